import { readFileSync } from "node:fs";
import { z } from "zod";
import { describeIssues } from "../manifest.js";
import { PeftImportError } from "./errors.js";

const nonEmpty = (v: unknown) =>
  v !== undefined &&
  v !== null &&
  (Array.isArray(v) ? v.length > 0 : typeof v === "object" ? Object.keys(v).length > 0 : true);

/**
 * The fields of PEFT's `adapter_config.json` that decide whether the adapter is a plain LoRA that
 * llama.cpp computes exactly (W x + alpha/r * B A x); everything else in the file is ignored. Refused,
 * with the reason: DoRA, trained copies of whole modules (`modules_to_save`), per-module ranks or alphas,
 * trained biases, layer replication, parameter (not module) targets.
 *
 * Accepted: `alora_invocation_tokens` (an activated LoRA: written as llama.cpp's `adapter.alora.invocation_tokens`,
 * which the engine applies from the invocation point on), `use_rslora` (PEFT scales by alpha/sqrt(r); the importer
 * writes alpha*sqrt(r) so llama.cpp's
 * alpha/r gives the same factor) and `fan_in_fan_out` (it only says how the *base* weight is laid out, for
 * GPT-2's Conv1D; lora_A and lora_B are nn.Linear either way, and the families mapped here use nn.Linear,
 * for which PEFT itself resets the flag).
 */
export const PeftConfigSchema = z
  .looseObject({
    peft_type: z.string(),
    r: z.number().int().positive(),
    lora_alpha: z.number().positive(),
    target_modules: z.union([z.array(z.string()).min(1), z.string().min(1)]),
    base_model_name_or_path: z.string().nullable().optional(),
    use_dora: z.boolean().nullable().optional(),
    use_rslora: z.boolean().nullable().optional(),
    fan_in_fan_out: z.boolean().nullable().optional(),
    bias: z.string().nullable().optional(),
    lora_bias: z.boolean().nullable().optional(),
    modules_to_save: z.array(z.string()).nullable().optional(),
    rank_pattern: z.record(z.string(), z.unknown()).nullable().optional(),
    alpha_pattern: z.record(z.string(), z.unknown()).nullable().optional(),
    layer_replication: z.unknown().optional(),
    target_parameters: z.array(z.string()).nullable().optional(),
    /** An activated LoRA (PEFT's aLoRA): the token ids after whose last occurrence the adapter applies. */
    alora_invocation_tokens: z.array(z.number().int().nonnegative()).min(1).nullable().optional(),
  })
  .superRefine((c, ctx) => {
    const refuse = (field: string, message: string) => ctx.addIssue({ code: "custom", path: [field], message });
    if (c.peft_type !== "LORA") refuse("peft_type", `is "${c.peft_type}": only LORA adapters can be imported`);
    if (c.use_dora)
      refuse(
        "use_dora",
        "DoRA adapters are not supported: their magnitude vector rescales whole weight columns, which a GGUF LoRA cannot express",
      );
    if (nonEmpty(c.modules_to_save))
      refuse(
        "modules_to_save",
        `fully trained modules (${c.modules_to_save!.join(", ")}) are not supported: only low-rank A/B pairs can be served as an adapter`,
      );
    if (nonEmpty(c.rank_pattern)) refuse("rank_pattern", "per-module ranks are not supported: every module must use r");
    if (nonEmpty(c.alpha_pattern))
      refuse("alpha_pattern", "per-module alphas are not supported: a GGUF LoRA has one alpha");
    if (c.bias && c.bias !== "none") refuse("bias", `is "${c.bias}": trained biases are not supported (only "none")`);
    if (c.lora_bias) refuse("lora_bias", "a LoRA bias on lora_B is not supported");
    if (nonEmpty(c.layer_replication))
      refuse("layer_replication", "replicated layers change the model's structure and are not supported");
    if (nonEmpty(c.target_parameters)) refuse("target_parameters", "parameter targets (not modules) are not supported");
  });

export type PeftConfig = z.infer<typeof PeftConfigSchema>;

/** The scaling PEFT applies to B A x. */
export function peftScaling(c: PeftConfig): number {
  return c.use_rslora ? c.lora_alpha / Math.sqrt(c.r) : c.lora_alpha / c.r;
}

/** The alpha to write: llama.cpp scales by alpha / rank, so rank * PEFT's scaling reproduces it (rsLoRA included). */
export function ggufAlpha(c: PeftConfig): number {
  return c.use_rslora ? c.lora_alpha * Math.sqrt(c.r) : c.lora_alpha;
}

export function parsePeftConfig(raw: unknown, file: string): PeftConfig {
  const parsed = PeftConfigSchema.safeParse(raw);
  if (parsed.success) return parsed.data;
  const issues = describeIssues(parsed.error);
  const first = parsed.error.issues[0]?.path.join(".");
  throw new PeftImportError(file, first || undefined, issues.join("; "), issues);
}

export function readPeftConfig(file: string): PeftConfig {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(file, "utf8"));
  } catch (err) {
    throw new PeftImportError(file, undefined, `cannot read it as JSON: ${(err as Error).message}`);
  }
  return parsePeftConfig(raw, file);
}
