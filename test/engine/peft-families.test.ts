import { join } from "node:path";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { LocalEngine } from "../../src/engines/local/index.js";
import { GgmlType, readGgufHeader, gguf, writeGguf, type GgufTensorSource } from "../../src/gguf/index.js";
import { importPeft, PEFT_ARCHITECTURES, permuteRowsForRope } from "../../src/library/peft/index.js";
import { conversation, maxAbsDiff, quietLogger, TEST_THREADS } from "../helpers/engine.js";
import { tempDir } from "../helpers/files.js";
import {
  bytes,
  d,
  familyBase,
  peftFactors,
  plausibleDiff,
  product,
  RANK,
  writePeftFolder,
} from "../helpers/peftFamilies.js";
import { referenceNextTokenLogProbs } from "../../src/engines/local/localTesting.js";

const engines: LocalEngine[] = [];
afterEach(async () => {
  for (const e of engines.splice(0)) await e.dispose();
});
const load = async (modelPath: string, lora?: string) => {
  const engine = await LocalEngine.load({
    modelPath,
    gpu: false,
    threads: TEST_THREADS,
    contextSize: 8192,
    sequencesPerContext: 1,
    logger: quietLogger(),
  });
  engines.push(engine);
  if (lora) await engine.addAdapter({ alias: "imported", filePath: lora, scale: 1 });
  return engine;
};

describe("PEFT import per family, checked by behaviour against a dense model with the LoRA merged", () => {
  const figures: Record<string, number> = {};
  afterAll(() =>
    console.log("max |log-prob(base + imported LoRA) - log-prob(merged dense)|:", JSON.stringify(figures)),
  );

  it.each(["llama", "mistral", "granite", "qwen2", "qwen3"])("%s", async (name) => {
    const dir = tempDir();
    const { arch, base } = familyBase(name, dir);
    const permutes = PEFT_ARCHITECTURES[arch.name]!.permuteQK;
    const factors = peftFactors(77);
    const peft = writePeftFolder(join(dir, "peft"), factors);
    const imported = await importPeft({
      dir: peft,
      base: readGgufHeader(join(dir, "base.gguf")),
      alias: "imported",
      outFile: join(dir, "imported.gguf"),
    });

    // the dense model a merged HF checkpoint converts to: convert_hf_to_gguf permutes the merged q/k rows of
    // llama-family models
    const delta = new Map(
      factors.flatMap((layer, l) =>
        layer.map((f) => {
          const ba = product(f.b, f.a, f.out);
          const permuted =
            permutes && f.heads ? new Float32Array(permuteRowsForRope(bytes(ba), f.out, f.heads).slice().buffer) : ba;
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
        {
          name: `blk.${l}.${f.gguf}.weight.lora_a`,
          shape: [d.nEmbd, RANK],
          type: GgmlType.F32,
          data: () => bytes(f.a),
        },
        { name: `blk.${l}.${f.gguf}.weight.lora_b`, shape: [RANK, f.out], type: GgmlType.F32, data: () => bytes(f.b) },
      ]),
    );
    writeGguf(
      join(dir, "unpermuted.gguf"),
      {
        "general.architecture": gguf.str(arch.name),
        "general.type": gguf.str("adapter"),
        "adapter.type": gguf.str("lora"),
        "adapter.lora.alpha": gguf.f32(RANK),
      },
      unpermuted,
    );

    const withLora = await load(join(dir, "base.gguf"), imported.outFile);
    const tokens = withLora.renderTokens(conversation("Which river flows through Paris?"));
    const got = await referenceNextTokenLogProbs(withLora, "imported", tokens);
    const dense = await referenceNextTokenLogProbs(await load(join(dir, "merged.gguf")), null, tokens);
    const plain = await referenceNextTokenLogProbs(withLora, null, tokens);
    figures[`${name} (all tokens)`] = Math.max(maxAbsDiff(got, dense), maxAbsDiff(dense, got));
    figures[name] = plausibleDiff(dense, got);
    figures[`${name} LoRA effect`] = plausibleDiff(dense, plain);
    expect(figures[name]).toBeLessThanOrEqual(1e-3);
    expect(plausibleDiff(dense, plain)).toBeGreaterThan(0.01); // the LoRA matters

    const buggy = await referenceNextTokenLogProbs(
      await load(join(dir, "base.gguf"), join(dir, "unpermuted.gguf")),
      "imported",
      tokens,
    );
    const bugDiff = plausibleDiff(dense, buggy);
    figures[`${name} without permutation`] = bugDiff;
    if (permutes) expect(bugDiff).toBeGreaterThan(1e-3);
    else expect(bugDiff).toBeLessThanOrEqual(1e-3); // nothing to permute: the same file
  });
});
