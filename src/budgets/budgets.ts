import { z } from "zod";

/**
 * The one owner of stage budgets: their schema, defaults, precedence and the rule that says a stage is
 * spent. The harness (`harness/stage.ts`) and the server-side release of client-driven sessions
 * (`sessions/SessionService.ts`) both decide with `stageSpent`; this module imports nothing of either.
 */

/** Limits of one adapter stage. */
export const StageBudgetSchema = z
  .object({
    turns: z.number().int().positive(),
    tokens: z.number().int().positive(),
    toolCalls: z.number().int().nonnegative(),
    seconds: z.number().positive(),
    /** Consecutive turns without a tool call that end the stage. */
    noToolTurns: z.number().int().positive(),
  })
  .strict();
export type StageBudget = z.infer<typeof StageBudgetSchema>;

/** Limits of a whole soft run. */
export const SoftLimitsSchema = z
  .object({
    revisitsPerAdapter: z.number().int().nonnegative(),
    switches: z.number().int().nonnegative(),
    turns: z.number().int().positive(),
    tokens: z.number().int().positive(),
    seconds: z.number().positive(),
  })
  .strict();
export type SoftLimits = z.infer<typeof SoftLimitsSchema>;

export const DEFAULT_STAGE_BUDGET: StageBudget = { turns: 8, tokens: 2048, toolCalls: 6, seconds: 120, noToolTurns: 2 };
export const DEFAULT_SOFT_LIMITS: SoftLimits = {
  revisitsPerAdapter: 2,
  switches: 8,
  turns: 40,
  tokens: 8192,
  seconds: 600,
};

/**
 * Layers of partial settings, highest precedence first (run arguments > manifest entry > config file), over the
 * defaults.
 */
export function layered<T extends object>(defaults: T, ...layers: (Partial<T> | undefined)[]): T {
  const out = { ...defaults } as Record<string, unknown>;
  for (const layer of layers.slice().reverse()) {
    for (const [k, v] of Object.entries(layer ?? {})) if (v !== undefined) out[k] = v;
  }
  return out as T;
}

/** Why a stage ended: its own exit call, a spent budget, the context window, or a failure. */
export type StageEnd =
  | "exit_call"
  | "budget:turns"
  | "budget:tokens"
  | "budget:tool_calls"
  | "budget:seconds"
  | "no_tool"
  | "context"
  | "error";

/** What a stage has used so far. */
export interface StageSpend {
  turns: number;
  tokens: number;
  toolCalls: number;
  /** Consecutive turns, up to now, without a tool call. */
  turnsWithoutTool: number;
  elapsedMs: number;
}

/** The budget a stage has spent (so it must end before its next turn), or undefined. */
export function stageSpent(s: StageSpend, b: StageBudget): StageEnd | undefined {
  if (s.turnsWithoutTool >= b.noToolTurns) return "no_tool";
  if (s.turns >= b.turns) return "budget:turns";
  if (s.tokens >= b.tokens) return "budget:tokens";
  if (s.toolCalls >= b.toolCalls) return "budget:tool_calls";
  if (s.elapsedMs >= b.seconds * 1000) return "budget:seconds";
  return undefined;
}

export function describeEnd(end: StageEnd, b: StageBudget): string {
  switch (end) {
    case "budget:turns":
      return `turn budget (${b.turns}) spent`;
    case "budget:tokens":
      return `token budget (${b.tokens}) spent`;
    case "budget:tool_calls":
      return `tool-call budget (${b.toolCalls}) spent`;
    case "budget:seconds":
      return `time budget (${b.seconds} s) spent`;
    case "no_tool":
      return `${b.noToolTurns} turns without a tool call`;
    case "context":
      return "the context window is full";
    case "error":
      return "the stage failed";
    case "exit_call":
      return "the adapter released itself";
  }
}
