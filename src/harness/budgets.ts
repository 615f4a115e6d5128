import { z } from "zod";

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
export const DEFAULT_SOFT_LIMITS: SoftLimits = { revisitsPerAdapter: 2, switches: 8, turns: 40, tokens: 8192, seconds: 600 };

/** Layers of partial settings, highest precedence first (run arguments > manifest entry > config file), over the defaults. */
export function layered<T extends object>(defaults: T, ...layers: (Partial<T> | undefined)[]): T {
  const out = { ...defaults } as Record<string, unknown>;
  for (const layer of layers.slice().reverse()) {
    for (const [k, v] of Object.entries(layer ?? {})) if (v !== undefined) out[k] = v;
  }
  return out as T;
}
