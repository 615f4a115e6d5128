import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ARCHITECTURES } from "../../src/demo/architectures.js";
import { familyNamed } from "../../src/demo/families.js";
import { llamaCppTemplates } from "../../src/demo/llamaCppTemplates.js";
import { modelFile } from "../../src/demo/model.js";
import { DEMO_DIMS } from "../../src/demo/qwen3.js";
import { SeededRandom } from "../../src/demo/random.js";
import { buildVocabulary } from "../../src/demo/vocabulary.js";
import { GgmlType, writeGguf } from "../../src/gguf/index.js";
import { writeSafetensors } from "../../src/library/peft/index.js";
import { PACKAGE_ROOT } from "../../src/paths.js";

/** PEFT adapters of known factors over small per-family bases: the import's and export's tests share them. */

export const RANK = 4;
export const d = DEMO_DIMS;
export const MODULES = [
  { module: "q_proj", gguf: "attn_q", out: d.nHead * d.headDim, heads: d.nHead },
  { module: "k_proj", gguf: "attn_k", out: d.nHeadKv * d.headDim, heads: d.nHeadKv },
  { module: "v_proj", gguf: "attn_v", out: d.nHeadKv * d.headDim, heads: undefined },
];
/**
 * Largest |a - b| over the tokens `a` finds plausible (log-prob > -10): the tail of a random model's distribution is
 * rounding noise.
 */
export function plausibleDiff(a: Map<number, number>, b: Map<number, number>): number {
  let d = 0;
  for (const [token, lp] of a) if (lp > -10) d = Math.max(d, Math.abs(lp - b.get(token)!));
  return d;
}
export const bytes = (v: Float32Array) => new Uint8Array(v.buffer, v.byteOffset, v.byteLength);

/** A PEFT adapter's factors per layer and module, torch layout: A [r, in], B [out, r] (row-major). */
export function peftFactors(seed: number) {
  const rng = new SeededRandom(seed);
  const gauss = (n: number, std: number) => Float32Array.from({ length: n }, () => rng.normal() * std);
  return Array.from({ length: d.nLayer }, () =>
    MODULES.map((m) => ({
      ...m,
      a: gauss(RANK * d.nEmbd, 1 / Math.sqrt(d.nEmbd)),
      b: gauss(m.out * RANK, 0.3 / Math.sqrt(RANK)),
    })),
  );
}

/** B A in torch layout [out, in]: the same bytes as a ggml ne [in, out] tensor. */
export function product(b: Float32Array, a: Float32Array, out: number): Float32Array {
  const r = new Float32Array(out * d.nEmbd);
  for (let o = 0; o < out; o++)
    for (let k = 0; k < RANK; k++) {
      const bk = b[o * RANK + k]!;
      for (let i = 0; i < d.nEmbd; i++) r[o * d.nEmbd + i] += bk * a[k * d.nEmbd + i]!;
    }
  return r;
}

/** A family's small F32 base (merging a LoRA into it is exact), written to dir/base.gguf. */
export function familyBase(name: string, dir: string) {
  const family = familyNamed(name)!;
  const arch = ARCHITECTURES[family.architecture];
  const template = llamaCppTemplates([family.template], join(PACKAGE_ROOT, "models", ".llama-cpp-templates"))[
    family.template
  ]!;
  const base = modelFile({
    name: family.modelName,
    architecture: arch,
    dims: d,
    vocab: buildVocabulary(family.specials),
    tokenizer: family.tokenizer,
    chatTemplate: template,
    seed: 31,
    weightType: GgmlType.F32,
    gain: 0.5,
  });
  writeGguf(join(dir, "base.gguf"), base.metadata, base.tensors);
  return { arch, base, path: join(dir, "base.gguf") };
}

/** The PEFT folder of `factors`, as peft's save_pretrained writes it. */
export function writePeftFolder(dir: string, factors: ReturnType<typeof peftFactors>, alpha = RANK): string {
  mkdirSync(dir, { recursive: true });
  writeFileSync(
    join(dir, "adapter_config.json"),
    JSON.stringify({
      peft_type: "LORA",
      r: RANK,
      lora_alpha: alpha,
      target_modules: MODULES.map((m) => m.module),
      task_type: "CAUSAL_LM",
    }),
  );
  writeSafetensors(
    join(dir, "adapter_model.safetensors"),
    factors.flatMap((layer, l) =>
      layer.flatMap((f) => [
        {
          name: `base_model.model.model.layers.${l}.self_attn.${f.module}.lora_A.weight`,
          dtype: "F32" as const,
          shape: [RANK, d.nEmbd],
          data: bytes(f.a),
        },
        {
          name: `base_model.model.model.layers.${l}.self_attn.${f.module}.lora_B.weight`,
          dtype: "F32" as const,
          shape: [f.out, RANK],
          data: bytes(f.b),
        },
      ]),
    ),
  );
  return dir;
}
