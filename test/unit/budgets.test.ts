import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import {
  DEFAULT_SOFT_LIMITS,
  DEFAULT_STAGE_BUDGET,
  describeEnd,
  layered,
  SoftLimitsSchema,
  StageBudgetSchema,
  type StageBudget,
} from "../../src/budgets/budgets.js";
import { StageUsage } from "../../src/sessions/StageUsage.js";

const budget: StageBudget = { turns: 3, tokens: 100, toolCalls: 2, seconds: 10, noToolTurns: 2 };

describe("stage budgets of client-driven generate (StageUsage)", () => {
  beforeEach(() => void vi.useFakeTimers({ now: 1_000_000 }));
  afterEach(() => void vi.useRealTimers());

  it("a fresh stage has nothing spent", () => {
    expect(new StageUsage("plan").exhausted(budget)).toBeUndefined();
  });

  it("turns: spent exactly at the budget", () => {
    const u = new StageUsage("plan");
    u.recordTurn(1, true);
    u.recordTurn(1, true);
    expect(u.exhausted(budget)).toBeUndefined();
    u.recordTurn(1, true);
    expect(u.exhausted(budget)).toBe("turn budget (3) spent");
  });

  it("tokens: the sum of generated tokens, spent at the budget", () => {
    const u = new StageUsage("plan");
    u.recordTurn(60, true);
    u.recordTurn(39, true);
    expect(u.exhausted(budget)).toBeUndefined();
    const v = new StageUsage("plan");
    v.recordTurn(60, true);
    v.recordTurn(40, true);
    expect(v.exhausted(budget)).toBe("token budget (100) spent");
  });

  it("tool calls: spent at the budget", () => {
    const u = new StageUsage("plan");
    u.recordToolCall();
    expect(u.exhausted(budget)).toBeUndefined();
    u.recordToolCall();
    expect(u.exhausted(budget)).toBe("tool-call budget (2) spent");
  });

  it("seconds: spent when the stage is as old as the budget", () => {
    const u = new StageUsage("plan");
    vi.advanceTimersByTime(9_999);
    expect(u.exhausted(budget)).toBeUndefined();
    vi.advanceTimersByTime(1);
    expect(u.exhausted(budget)).toBe("time budget (10 s) spent");
  });

  it("consecutive turns without a tool call end the stage; a tool call resets the count", () => {
    const u = new StageUsage("plan");
    const wide = { ...budget, turns: 10 };
    u.recordTurn(1, false);
    expect(u.exhausted(wide)).toBeUndefined();
    u.recordTurn(1, true);
    u.recordTurn(1, false);
    expect(u.exhausted(wide)).toBeUndefined();
    u.recordTurn(1, false);
    expect(u.exhausted(wide)).toBe("2 turns without a tool call");
  });

  it("reports the first budget in order: no tool, turns, tokens, tool calls, then seconds", () => {
    const u = new StageUsage("plan");
    for (let i = 0; i < 3; i++) u.recordTurn(50, false);
    u.recordToolCall();
    u.recordToolCall();
    vi.advanceTimersByTime(20_000);
    expect(u.exhausted(budget)).toBe("2 turns without a tool call");
    const wideNoTool = { ...budget, noToolTurns: 9 };
    expect(u.exhausted(wideNoTool)).toBe("turn budget (3) spent");
    expect(u.exhausted({ ...wideNoTool, turns: 9 })).toBe("token budget (100) spent");
    expect(u.exhausted({ ...wideNoTool, turns: 9, tokens: 999 })).toBe("tool-call budget (2) spent");
    expect(u.exhausted({ ...wideNoTool, turns: 9, tokens: 999, toolCalls: 9 })).toBe("time budget (10 s) spent");
    expect(u.exhausted({ ...wideNoTool, turns: 9, tokens: 999, toolCalls: 9, seconds: 99 })).toBeUndefined();
    expect(u.adapter).toBe("plan");
  });
});

describe("how a stage end is described", () => {
  it("names the budget and its size", () => {
    expect(describeEnd("budget:turns", budget)).toBe("turn budget (3) spent");
    expect(describeEnd("budget:tokens", budget)).toBe("token budget (100) spent");
    expect(describeEnd("budget:tool_calls", budget)).toBe("tool-call budget (2) spent");
    expect(describeEnd("budget:seconds", budget)).toBe("time budget (10 s) spent");
    expect(describeEnd("no_tool", budget)).toBe("2 turns without a tool call");
    expect(describeEnd("error", budget)).toBe("the stage failed");
    expect(describeEnd("exit_call", budget)).toBe("the adapter released itself");
  });
});

describe("budget layers", () => {
  it("run arguments over the manifest entry over the config over the defaults; undefined never overrides", () => {
    expect(layered(DEFAULT_STAGE_BUDGET)).toEqual(DEFAULT_STAGE_BUDGET);
    const run = { turns: 2 };
    const manifest = { turns: 5, tokens: 500 };
    const config = { turns: 7, tokens: 700, seconds: 70, noToolTurns: undefined };
    expect(layered(DEFAULT_STAGE_BUDGET, run, manifest, config)).toEqual({
      ...DEFAULT_STAGE_BUDGET,
      turns: 2,
      tokens: 500,
      seconds: 70,
    });
    expect(layered(DEFAULT_STAGE_BUDGET, undefined, { turns: undefined }, { turns: 4 })).toEqual({
      ...DEFAULT_STAGE_BUDGET,
      turns: 4,
    });
    expect(DEFAULT_STAGE_BUDGET).toEqual({ turns: 8, tokens: 2048, toolCalls: 6, seconds: 120, noToolTurns: 2 });
  });
});

describe("budget schemas", () => {
  it("accept the defaults and name a wrong field; unknown fields are refused", () => {
    expect(StageBudgetSchema.parse(DEFAULT_STAGE_BUDGET)).toEqual(DEFAULT_STAGE_BUDGET);
    expect(SoftLimitsSchema.parse(DEFAULT_SOFT_LIMITS)).toEqual(DEFAULT_SOFT_LIMITS);
    expect(StageBudgetSchema.safeParse({ ...DEFAULT_STAGE_BUDGET, turns: 0 }).success).toBe(false);
    expect(StageBudgetSchema.safeParse({ ...DEFAULT_STAGE_BUDGET, toolCalls: 0 }).success).toBe(true);
    expect(StageBudgetSchema.safeParse({ ...DEFAULT_STAGE_BUDGET, tokens: 1.5 }).success).toBe(false);
    expect(StageBudgetSchema.safeParse({ ...DEFAULT_STAGE_BUDGET, seconds: 0 }).success).toBe(false);
    expect(StageBudgetSchema.safeParse({ ...DEFAULT_STAGE_BUDGET, noToolTurns: 0 }).success).toBe(false);
    expect(StageBudgetSchema.safeParse({ ...DEFAULT_STAGE_BUDGET, turnz: 1 }).success).toBe(false);
    expect(StageBudgetSchema.safeParse({ turns: 1 }).success).toBe(false);
    expect(SoftLimitsSchema.safeParse({ ...DEFAULT_SOFT_LIMITS, switches: -1 }).success).toBe(false);
    expect(SoftLimitsSchema.safeParse({ ...DEFAULT_SOFT_LIMITS, revisitsPerAdapter: 0, switches: 0 }).success).toBe(
      true,
    );
    expect(SoftLimitsSchema.safeParse({ ...DEFAULT_SOFT_LIMITS, turns: 0 }).success).toBe(false);
    expect(SoftLimitsSchema.safeParse({ ...DEFAULT_SOFT_LIMITS, extra: 1 }).success).toBe(false);
    expect(DEFAULT_SOFT_LIMITS).toEqual({ revisitsPerAdapter: 2, switches: 8, turns: 40, tokens: 8192, seconds: 600 });
  });
});
