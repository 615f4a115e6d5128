import { z } from "zod";
import { LONG_TEXT_MAX } from "../config/configSchema.js";
import { SoftLimitsSchema, StageBudgetSchema } from "../budgets/budgets.js";
import { MERGE_METHODS, type MergeMethod } from "../library/merge/index.js";

export type Owner = string;

/**
 * How a run ended (docs/harness.md#how-a-run-ends): `answer`; `budget` (the final stage spent a budget); `context` (the
 * window ended a stage or turn); `degenerate` (a model turn looped or repeated its stage: no answer is presented);
 * `error` (the session could not return to the base); `cancelled` (only in the trace: the call itself failed).
 */
export const FINISHES = ["answer", "budget", "context", "degenerate", "error", "cancelled"] as const;
export type Finish = (typeof FINISHES)[number];

/** The policies every library has; `single:<alias>` names one of its adapters. */
export const FIXED_POLICIES = ["hard", "soft", "base", "static"] as const;

/** The library's static merge by `method` (`weact-mcp merge`), applied for the whole run. */
export const mergePolicy = (method: MergeMethod) => `static:${method}` as const;
export const MERGE_POLICIES = MERGE_METHODS.map(mergePolicy);

/**
 * Comparison modes share the library and harness: no adapters, one fixed adapter, all applied at once (`static`,
 * llama.cpp's sum of the adapters' updates), or one static merge of them.
 */
export const PolicySchema = z.union([
  z.enum(FIXED_POLICIES),
  z.enum(MERGE_POLICIES),
  z
    .string()
    .regex(
      /^single:[a-z][a-z0-9_-]{0,31}$/,
      `a policy is hard, soft, base, static, ${MERGE_POLICIES.join(", ")} or single:<alias>`,
    ),
]);
export type Policy = z.infer<typeof PolicySchema>;

/** Steering for models that do not open calls on their own (the demo model): at a chosen turn, steer into a call. */
/** A sampling seed: llama.cpp takes an unsigned 32-bit one. */
export const SeedSchema = z
  .number()
  .int()
  .min(0)
  .max(2 ** 32 - 1);

export const SteeringSchema = z
  .object({
    /** "base", an adapter alias, or "*" for any. */
    adapter: z.string().min(1).max(64).default("*"),
    /** 1-based turn within the current visit of that adapter (or of the base). */
    turn: z.number().int().positive(),
    /** The function to steer into (omit to let the grammar choose among the callable ones). */
    tool: z.string().min(1).max(64).optional(),
    /** Extra logit bias for that turn (by token text). */
    bias: z.record(z.string().min(1).max(64), z.number().min(-100).max(100)).optional(),
  })
  .strict();
export type Steering = z.infer<typeof SteeringSchema>;

export const RunTaskInputSchema = z.object({
  task: z.string().min(1).max(LONG_TEXT_MAX),
  policy: PolicySchema.default("hard"),
  workflow: z.array(z.string().min(1).max(64)).min(1).max(16).optional(),
  budgets: StageBudgetSchema.partial().optional(),
  soft: SoftLimitsSchema.partial().optional(),
  seed: SeedSchema.optional(),
  steering: z.array(SteeringSchema).max(64).optional(),
  /** Expected adapter sequence (for adapter-selection accuracy). */
  expectedStages: z.array(z.string().min(1).max(64)).max(32).optional(),
});
export type RunTaskInput = z.input<typeof RunTaskInputSchema>;
