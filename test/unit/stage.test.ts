import { afterEach, describe, expect, it, vi } from "vitest";
import type { StageBudget } from "../../src/budgets/budgets.js";
import type { ModelCall, ModelTurn, WeightOutcome } from "../../src/harness/driver.js";
import { RunContext } from "../../src/harness/RunContext.js";
import { runStage } from "../../src/harness/stage.js";

type Planned = { text?: string; calls?: { name: string; arguments?: Record<string, unknown> }[]; tokens?: number };

/**
 * A double of the RunContext surface a stage uses, recording what the stage asks of it. Only the stage's own
 * logic is under test here (policies over the real RunContext: harness-policies.test.ts).
 */
function fakeContext(
  turns: Planned[],
  opts: { active?: string | null; offloadOk?: boolean; clockMsPerTurn?: number } = {},
) {
  let active: string | null = opts.active === undefined ? "plan" : opts.active;
  let ids = 0;
  const log: string[] = [];
  const events: { type: string; data: Record<string, unknown> }[] = [];
  const maxTokens: number[] = [];
  const offloads: Record<string, unknown>[] = [];
  const ok = (o: boolean): WeightOutcome => ({ ok: o, switchMs: 0, rebuildMs: 0, rebuiltTokens: 0, reusedTokens: 0 });
  const ctx = {
    route: () => active ?? "base",
    now: () => performance.now(),
    // the window is never the limit here: the real room and release logic run over a window this big
    opts: { contextReserve: 0 },
    contextReserve: 0,
    roomForTurn: RunContext.prototype.roomForTurn,
    release: RunContext.prototype.release,
    startVisit: (route: string) => log.push(`visit:${route}`),
    trace: { event: (type: string, data: Record<string, unknown>) => events.push({ type, data }) },
    modelTurn: async (_stage: string, max: number): Promise<ModelTurn> => {
      maxTokens.push(max);
      if (opts.clockMsPerTurn) vi.advanceTimersByTime(opts.clockMsPerTurn);
      const next = turns.shift() ?? { text: "idle" };
      const calls: ModelCall[] = (next.calls ?? []).map((c) => ({
        id: `c${++ids}`,
        name: c.name,
        arguments: c.arguments ?? {},
      }));
      return {
        text: next.text ?? "",
        calls,
        adapter: active,
        generated: next.tokens ?? 10,
        prompt: 1,
        cached: 0,
        finishReason: "stop",
      };
    },
    weightAction: async (
      _stage: string,
      action: string,
      author: string,
      fn: () => Promise<WeightOutcome>,
      detail: Record<string, unknown>,
    ) => {
      log.push(`${action}:${author}:${JSON.stringify(detail)}`);
      return fn();
    },
    orchestrate: async <T>(fn: () => Promise<T>) => fn(),
    tool: async (_stage: string, call: ModelCall) => {
      log.push(`tool:${call.name}`);
      return { ok: true };
    },
    driver: {
      active: () => active,
      room: async () => ({ size: 1_000_000_000, used: 0, release: 0 }),
      elide: async () => ({ elided: 0, callIds: [], freedTokens: 0 }),
      offload: async (o: Record<string, unknown>) => {
        offloads.push(o);
        const done = opts.offloadOk ?? true;
        if (done) active = null;
        return ok(done);
      },
      reject: async (id: string, message: string) => void log.push(`reject:${id}:${message}`),
    },
  };
  return { ctx: ctx as unknown as RunContext, log, events, maxTokens, offloads };
}

const budget: StageBudget = { turns: 4, tokens: 100, toolCalls: 2, seconds: 60, noToolTurns: 2 };

describe("one stage", () => {
  afterEach(() => void vi.useRealTimers());

  it("ends on the model's own offload_lora, with its handoff, and the harness adds no release", async () => {
    const f = fakeContext([
      { text: "planning", calls: [{ name: "search" }] },
      { text: "  ", calls: [{ name: "offload_lora", arguments: { handoff: "the plan" } }] },
    ]);
    const r = await runStage(f.ctx, "1:plan", budget);
    expect(r).toEqual({
      end: "exit_call",
      lastText: "planning",
      turns: 2,
      tokens: 20,
      toolCalls: 1,
      handoff: "the plan",
    });
    expect(f.log).toEqual(["visit:plan", "tool:search", 'offload:model:{"handoff":"the plan"}']);
    expect(f.offloads).toEqual([{ callId: "c2" }]);
    expect(f.maxTokens).toEqual([100, 90]); // each turn may use what is left of the token budget
    expect(f.events.map((e) => e.type)).toEqual(["stage_start", "stage_end"]);
    expect(f.events[0]!.data).toEqual({ stage: "1:plan", adapter: "plan", budget, reserve: 0 });
    expect(f.events[1]!.data).toMatchObject({ stage: "1:plan", end: "exit_call", turns: 2, tokens: 20, toolCalls: 1 });
    expect(f.events[1]!.data.ms).toBeGreaterThanOrEqual(0);
    expect(f.events[1]!.data.ms).toBeLessThan(10_000); // the stage's own duration, not a clock reading
  });

  it("a handoff that is not a string is dropped; a refused offload does not end the stage", async () => {
    const f = fakeContext([{ calls: [{ name: "offload_lora", arguments: { handoff: 42 } }] }], { offloadOk: false });
    const r = await runStage(f.ctx, "1:plan", { ...budget, turns: 1 });
    expect(r.end).toBe("budget:turns");
    expect(r.handoff).toBeUndefined();
    expect(f.log[1]).toBe("offload:model:{}");
  });

  it("refuses a load_lora inside the stage and goes on", async () => {
    const f = fakeContext([
      { calls: [{ name: "load_lora", arguments: { adapter: "write" } }] },
      { calls: [{ name: "offload_lora" }] },
    ]);
    const r = await runStage(f.ctx, "2:search", budget);
    expect(r.end).toBe("exit_call");
    expect(f.log).toContain(
      "reject:c1:load_lora refused: the harness runs this stage under plan; finish it with offload_lora",
    );
  });

  it("ends after noToolTurns turns without a tool call and releases the adapter itself, with the last text as handoff", async () => {
    const f = fakeContext([{ text: "first" }, { text: "" }]);
    const r = await runStage(f.ctx, "1:plan", budget);
    expect(r).toMatchObject({ end: "no_tool", turns: 2, lastText: "first" });
    expect(f.offloads).toEqual([
      { handoff: "first", reason: "stage ended by the harness: 2 turns without a tool call" },
    ]);
    expect(f.log.at(-1)).toBe('offload:harness:{"cause":"no_tool"}');
  });

  it("a harness release hands off at most 2000 characters, and nothing when the stage wrote nothing", async () => {
    const long = fakeContext([{ text: "x".repeat(2500) }, {}]);
    await runStage(long.ctx, "1:plan", budget);
    expect(long.offloads[0]!.handoff).toBe("x".repeat(2000));
    const silent = fakeContext([{}, {}]);
    await runStage(silent.ctx, "1:plan", budget);
    expect(silent.offloads[0]).toEqual({
      handoff: undefined,
      reason: "stage ended by the harness: 2 turns without a tool call",
    });
  });

  it("the base as a fallback stage is never released", async () => {
    const f = fakeContext([{}, {}], { active: null });
    const r = await runStage(f.ctx, "1:base", budget);
    expect(r.end).toBe("no_tool");
    expect(f.offloads).toEqual([]);
  });

  it("spends the turn budget exactly", async () => {
    const f = fakeContext(Array.from({ length: 9 }, () => ({ calls: [{ name: "search" }], tokens: 1 })));
    const r = await runStage(f.ctx, "1:plan", { ...budget, toolCalls: 99, turns: 3 });
    expect(r).toMatchObject({ end: "budget:turns", turns: 3, toolCalls: 3 });
    expect(f.offloads[0]!.reason).toBe("stage ended by the harness: turn budget (3) spent");
  });

  it("spends the token budget exactly", async () => {
    const f = fakeContext(Array.from({ length: 9 }, () => ({ calls: [{ name: "search" }], tokens: 50 })));
    const r = await runStage(f.ctx, "1:plan", { ...budget, toolCalls: 99, turns: 99 });
    expect(r).toMatchObject({ end: "budget:tokens", turns: 2, tokens: 100 });
  });

  it("refuses the tool call over the tool-call budget and ends the stage before another turn", async () => {
    const f = fakeContext([
      { calls: [{ name: "search" }, { name: "read" }, { name: "search" }] },
      { calls: [{ name: "search" }] },
    ]);
    const r = await runStage(f.ctx, "1:plan", budget);
    expect(r).toMatchObject({ end: "budget:tool_calls", toolCalls: 2, turns: 1 });
    expect(f.log).toContain("reject:c3:search refused: this stage's budget of 2 tool calls is spent");
    expect(f.log.filter((l) => l.startsWith("tool:"))).toEqual(["tool:search", "tool:read"]);
  });

  it("spends the time budget when the stage is as old as it", async () => {
    vi.useFakeTimers({ toFake: ["performance"] });
    const f = fakeContext(
      Array.from({ length: 9 }, () => ({ calls: [{ name: "search" }] })),
      { clockMsPerTurn: 5_000 },
    );
    const r = await runStage(f.ctx, "1:plan", { ...budget, seconds: 10, turns: 99, toolCalls: 99, tokens: 9999 });
    expect(r).toMatchObject({ end: "budget:seconds", turns: 2 });
  });
});
