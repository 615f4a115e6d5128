import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { LocalEngine } from "../native/index.js";
import { GgmlType, readGgufHeader, gguf, writeGguf, type GgufTensorSource } from "../src/gguf/index.js";
import { ARCHITECTURES } from "../src/demo/architectures.js";
import { familyNamed } from "../src/demo/families.js";
import { llamaCppTemplates } from "../src/demo/llamaCppTemplates.js";
import { modelFile } from "../src/demo/model.js";
import { DEMO_DIMS } from "../src/demo/qwen3.js";
import { SeededRandom } from "../src/demo/random.js";
import { buildVocabulary } from "../src/demo/vocabulary.js";
import { importPeft, PEFT_ARCHITECTURES, permuteRowsForRope, writeSafetensors } from "../src/library/peft/index.js";
import { PACKAGE_ROOT } from "../src/paths.js";
import { conversation, maxAbsDiff, quietLogger, TEST_THREADS } from "./helpers/engine.js";
import { tempDir } from "./helpers/files.js";

const RANK = 4;
const d = DEMO_DIMS;
const MODULES = [
  { module: "q_proj", gguf: "attn_q", out: d.nHead * d.headDim, heads: d.nHead },
  { module: "k_proj", gguf: "attn_k", out: d.nHeadKv * d.headDim, heads: d.nHeadKv },
  { module: "v_proj", gguf: "attn_v", out: d.nHeadKv * d.headDim, heads: undefined },
];
/** Largest |a - b| over the tokens `a` finds plausible (log-prob > -10): the tail of a random model's distribution is rounding noise. */
function plausibleDiff(a: Map<number, number>, b: Map<number, number>): number {
  let d = 0;
  for (const [token, lp] of a) if (lp > -10) d = Math.max(d, Math.abs(lp - b.get(token)!));
  return d;
}
const bytes = (v: Float32Array) => new Uint8Array(v.buffer, v.byteOffset, v.byteLength);

/** A PEFT adapter's factors per layer and module, torch layout: A [r, in], B [out, r] (row-major). */
function peftFactors(seed: number) {
  const rng = new SeededRandom(seed);
  const gauss = (n: number, std: number) => Float32Array.from({ length: n }, () => rng.normal() * std);
  return Array.from({ length: d.nLayer }, () => MODULES.map((m) => ({ ...m, a: gauss(RANK * d.nEmbd, 1 / Math.sqrt(d.nEmbd)), b: gauss(m.out * RANK, 0.3 / Math.sqrt(RANK)) })));
}

/** B A in torch layout [out, in]: the same bytes as a ggml ne [in, out] tensor. */
function product(b: Float32Array, a: Float32Array, out: number): Float32Array {
  const r = new Float32Array(out * d.nEmbd);
  for (let o = 0; o < out; o++)
    for (let k = 0; k < RANK; k++) {
      const bk = b[o * RANK + k]!;
      for (let i = 0; i < d.nEmbd; i++) r[o * d.nEmbd + i] += bk * a[k * d.nEmbd + i]!;
    }
  return r;
}

const engines: LocalEngine[] = [];
afterEach(async () => {
  for (const e of engines.splice(0)) await e.dispose();
});
const load = async (modelPath: string, lora?: string) => {
  const engine = await LocalEngine.load({ modelPath, gpu: false, threads: TEST_THREADS, contextSize: 8192, sequencesPerContext: 1, logger: quietLogger() });
  engines.push(engine);
  if (lora) await engine.addAdapter({ alias: "imported", filePath: lora, scale: 1 });
  return engine;
};

describe("PEFT import per family, checked by behaviour against a dense model with the LoRA merged", () => {
  const figures: Record<string, number> = {};
  afterAll(() => console.log("max |log-prob(base + imported LoRA) - log-prob(merged dense)|:", JSON.stringify(figures)));

  it.each(["llama", "mistral", "granite", "qwen2", "qwen3"])("%s", async (name) => {
    const family = familyNamed(name)!;
    const arch = ARCHITECTURES[family.architecture];
    const permutes = PEFT_ARCHITECTURES[arch.name]!.permuteQK;
    const dir = tempDir();
    const template = llamaCppTemplates([family.template], join(PACKAGE_ROOT, "models", ".llama-cpp-templates"))[family.template]!;
    const spec = {
      name: family.modelName,
      architecture: arch,
      dims: d,
      vocab: buildVocabulary(family.specials),
      tokenizer: family.tokenizer,
      chatTemplate: template,
      seed: 31,
      weightType: GgmlType.F32,
      gain: 0.5,
    } as const;

    // the base, F32 so that merging is exact
    const base = modelFile(spec);
    writeGguf(join(dir, "base.gguf"), base.metadata, base.tensors);

    // the PEFT folder, as peft's save_pretrained writes it
    const factors = peftFactors(77);
    const peft = join(dir, "peft");
    mkdirSync(peft);
    writeFileSync(join(peft, "adapter_config.json"), JSON.stringify({ peft_type: "LORA", r: RANK, lora_alpha: RANK, target_modules: MODULES.map((m) => m.module), task_type: "CAUSAL_LM" }));
    writeSafetensors(
      join(peft, "adapter_model.safetensors"),
      factors.flatMap((layer, l) =>
        layer.flatMap((f) => [
          { name: `base_model.model.model.layers.${l}.self_attn.${f.module}.lora_A.weight`, dtype: "F32" as const, shape: [RANK, d.nEmbd], data: bytes(f.a) },
          { name: `base_model.model.model.layers.${l}.self_attn.${f.module}.lora_B.weight`, dtype: "F32" as const, shape: [f.out, RANK], data: bytes(f.b) },
        ]),
      ),
    );
    const imported = await importPeft({ dir: peft, base: readGgufHeader(join(dir, "base.gguf")), alias: "imported", outFile: join(dir, "imported.gguf") });

    // the dense model a merged HF checkpoint converts to: convert_hf_to_gguf permutes the merged q/k rows of llama-family models
    const delta = new Map(
      factors.flatMap((layer, l) =>
        layer.map((f) => {
          const ba = product(f.b, f.a, f.out);
          const permuted = permutes && f.heads ? new Float32Array(permuteRowsForRope(bytes(ba), f.out, f.heads).slice().buffer) : ba;
          return [`blk.${l}.${f.gguf}.weight`, permuted] as const;
        }),
      ),
    );
    const merged: GgufTensorSource[] = base.tensors.map((t) => {
      const add = delta.get(t.name);
      if (!add) return t;
      return {
        ...t,
        data: () => {
          const w = new Float32Array(t.data().slice().buffer);
          for (let i = 0; i < w.length; i++) w[i] = w[i]! + add[i]!;
          return bytes(w);
        },
      };
    });
    writeGguf(join(dir, "merged.gguf"), base.metadata, merged);

    // the planted bug: the same factors written without the permutation
    const unpermuted = factors.flatMap((layer, l) =>
      layer.flatMap((f): GgufTensorSource[] => [
        { name: `blk.${l}.${f.gguf}.weight.lora_a`, shape: [d.nEmbd, RANK], type: GgmlType.F32, data: () => bytes(f.a) },
        { name: `blk.${l}.${f.gguf}.weight.lora_b`, shape: [RANK, f.out], type: GgmlType.F32, data: () => bytes(f.b) },
      ]),
    );
    writeGguf(join(dir, "unpermuted.gguf"), { "general.architecture": gguf.str(arch.name), "general.type": gguf.str("adapter"), "adapter.type": gguf.str("lora"), "adapter.lora.alpha": gguf.f32(RANK) }, unpermuted);

    const withLora = await load(join(dir, "base.gguf"), imported.outFile);
    const tokens = withLora.renderTokens(conversation("Which river flows through Paris?"));
    const got = await withLora.referenceNextTokenLogProbs("imported", tokens);
    const dense = await (await load(join(dir, "merged.gguf"))).referenceNextTokenLogProbs(null, tokens);
    const plain = await withLora.referenceNextTokenLogProbs(null, tokens);
    figures[`${name} (all tokens)`] = Math.max(maxAbsDiff(got, dense), maxAbsDiff(dense, got));
    figures[name] = plausibleDiff(dense, got);
    figures[`${name} LoRA effect`] = plausibleDiff(dense, plain);
    expect(figures[name]).toBeLessThanOrEqual(1e-3);
    expect(plausibleDiff(dense, plain)).toBeGreaterThan(0.01); // the LoRA matters

    const buggy = await (await load(join(dir, "base.gguf"), join(dir, "unpermuted.gguf"))).referenceNextTokenLogProbs("imported", tokens);
    const bugDiff = plausibleDiff(dense, buggy);
    figures[`${name} without permutation`] = bugDiff;
    if (permutes) expect(bugDiff).toBeGreaterThan(1e-3);
    else expect(bugDiff).toBeLessThanOrEqual(1e-3); // nothing to permute: the same file
  });
});
