import { z } from "zod";

/**
 * The static merges, as PEFT's `add_weighted_adapter` makes them for LoRA (combination types linear, ties,
 * dare_ties); the names are also the policies' (`static:<method>`).
 */
export const MERGE_METHODS = ["linear", "ties", "dare-ties"] as const;
export type MergeMethod = (typeof MERGE_METHODS)[number];

/** The WeAct paper's baselines: TIES keeps 20 % of each factor, DARE-TIES 50 %. */
const DEFAULT_DENSITY: Readonly<Record<Exclude<MergeMethod, "linear">, number>> = {
  ties: 0.2,
  "dare-ties": 0.5,
};
const DEFAULT_MERGE_SEED = 0;

const DENSITY = "a number greater than 0 and at most 1 (the fraction of each factor kept; 1 keeps all)";
const SEED = "an integer from 0 to 4294967295";

/**
 * The fields of a merge's settings, each message saying what the field may be; `MergeSettingsSchema` adds the rules
 * between them.
 */
export const MergeSettingsFields = z
  .object({
    method: z.enum(MERGE_METHODS, { error: `one of ${MERGE_METHODS.join(", ")}` }),
    /** The fraction kept of each factor (ties, dare-ties); 1 keeps all (PEFT then prunes nothing). */
    density: z.number({ error: DENSITY }).gt(0, DENSITY).max(1, DENSITY).optional(),
    /** One per merged adapter, in their order; negative ones subtract. */
    weights: z.array(z.number({ error: "a finite number" })).min(1),
    /** DARE's random keep-or-drop draws (dare-ties). */
    seed: z
      .number({ error: SEED })
      .int(SEED)
      .min(0, SEED)
      .max(2 ** 32 - 1, SEED)
      .optional(),
  })
  .strict();
export type MergeSettings = z.infer<typeof MergeSettingsFields>;

/** What the fields alone cannot say: a density belongs to ties and dare-ties, a seed to dare-ties only. */
export function checkMergeSettings(s: MergeSettings, ctx: z.RefinementCtx): void {
  if (s.method === "linear" && s.density !== undefined)
    ctx.addIssue({
      code: "custom",
      path: ["density"],
      message: "linear prunes nothing: a density is for ties and dare-ties",
    });
  if (s.method !== "dare-ties" && s.seed !== undefined)
    ctx.addIssue({
      code: "custom",
      path: ["seed"],
      message: "only dare-ties draws at random: a seed is for dare-ties",
    });
}

/**
 * How one merge is made: the method, its density, each adapter's weight (1 each: the adapters' full updates) and
 * DARE's seed.
 */
export const MergeSettingsSchema = MergeSettingsFields.superRefine(checkMergeSettings);

/**
 * The settings with the defaults the method uses spelled out: what a merge records, so that a default changed later
 * does not change what a recorded merge means.
 */
export function effectiveSettings(s: MergeSettings): MergeSettings {
  if (s.method === "linear") return s;
  const density = s.density ?? DEFAULT_DENSITY[s.method];
  return s.method === "ties" ? { ...s, density } : { ...s, density, seed: s.seed ?? DEFAULT_MERGE_SEED };
}
