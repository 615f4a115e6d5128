import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { ARCHITECTURES } from "../../src/demo/architectures.js";
import { loraFile } from "../../src/demo/model.js";
import {
  f16ToF32,
  f32ToF16,
  GgmlType,
  gguf,
  metaNumber,
  metaString,
  readGgufHeader,
  viewAs,
  writeGguf,
  type GgufFile,
} from "../../src/gguf/index.js";
import {
  effectiveSettings,
  mergeAdapters,
  MergeSettingsSchema,
  mergeLora,
  LoraMergeError,
  uniformDraws,
  type MergeMethod,
} from "../../src/library/merge/index.js";
import { readGgufTensorData, SafetensorsFile } from "../../src/library/peft/index.js";
import { PACKAGE_ROOT } from "../../src/paths.js";
import { tempDir } from "../helpers/files.js";

/** training/gemma/merge_fixture.py: three PEFT LoRAs of a tiny Gemma 3 and PEFT's own merges of them. */
const FIXTURE = join(PACKAGE_ROOT, "test", "fixtures", "merge", "peft-merges.safetensors");

interface FixtureMerge {
  name: string;
  combination_type: string;
  weights: number[];
  density: number | null;
}

/** The fixture's tensors (read whole: it is tens of KB) and what merge_fixture.py recorded of them. */
function readFixture() {
  const st = SafetensorsFile.open(FIXTURE);
  let tensors: Map<string, Float32Array>;
  try {
    tensors = new Map(st.header.tensors.map((t) => [t.name, viewAs(st.read(t), Float32Array, 4)]));
  } finally {
    st.close();
  }
  const meta = st.header.metadata;
  const adapters = JSON.parse(meta.adapters!) as { name: string; lora_alpha: number; r: number }[];
  const merges = JSON.parse(meta.merges!) as FixtureMerge[];
  const first = `${adapters[0]!.name}/`;
  const modules = [...tensors.keys()]
    .filter((name) => name.startsWith(first) && name.endsWith(".lora_A"))
    .map((name) => name.slice(first.length, -".lora_A".length));
  const factors = (adapter: string, module: string) => ({
    a: tensors.get(`${adapter}/${module}.lora_A`)!,
    b: tensors.get(`${adapter}/${module}.lora_B`)!,
  });
  return {
    merges,
    modules,
    inputs: (module: string) => adapters.map((a) => ({ ...factors(a.name, module), scaling: a.lora_alpha / a.r })),
    peft: (merge: string, module: string) => factors(merge, module),
  };
}

const maxAbsDiff = (x: Float32Array, y: Float32Array) => {
  expect(x.length).toBe(y.length);
  return x.reduce((max, v, i) => Math.max(max, Math.abs(v - y[i]!)), 0);
};

const METHOD_OF: Record<string, MergeMethod> = { linear: "linear", ties: "ties", dare_ties: "dare-ties" };

describe("static merges as PEFT makes them", () => {
  const fixture = readFixture();

  it("the fixture covers each method, a pruning density below 1 and a negative weight", () => {
    expect(fixture.merges.map((m) => m.combination_type).sort()).toEqual(["dare_ties", "linear", "ties"]);
    expect(fixture.merges.find((m) => m.combination_type === "ties")!.density).toBeLessThan(1);
    expect(fixture.merges.flatMap((m) => m.weights).some((w) => w < 0)).toBe(true);
    expect(fixture.modules.length).toBeGreaterThan(0);
  });

  it.each(fixture.merges.map((m) => [m.combination_type, m] as const))(
    "%s equals PEFT's add_weighted_adapter on every factor",
    (_name, merge) => {
      let max = 0;
      for (const module of fixture.modules) {
        const ours = mergeLora(fixture.inputs(module), {
          method: METHOD_OF[merge.combination_type]!,
          weights: merge.weights,
          density: merge.density ?? 1,
          // dare_ties at density 1 draws nothing
          random: () => {
            throw new Error("no draw expected");
          },
        });
        const theirs = fixture.peft(merge.name, module);
        max = Math.max(max, maxAbsDiff(ours.a, theirs.a), maxAbsDiff(ours.b, theirs.b));
      }
      expect(max).toBeLessThanOrEqual(1e-6);
    },
  );

  it("DARE keeps about `density` of the entries, rescaled, the same ones for a seed and others for another", () => {
    const n = 20_000;
    const draws = uniformDraws(1, "values");
    const a = Float32Array.from({ length: n }, () => draws() - 0.5);
    // a zero second adapter: the merged entry is the first one's where DARE kept it, zero where it dropped it
    const adapters = [
      { a, b: a, scaling: 1 },
      { a: new Float32Array(n), b: new Float32Array(n), scaling: 1 },
    ];
    const merge = (seed: number) =>
      mergeLora(adapters, { method: "dare-ties", weights: [1, 1], density: 0.3, random: uniformDraws(seed, "t") }).a;
    const merged = merge(0);
    const kept = merged.filter((x) => x !== 0).length / n;
    expect(kept).toBeGreaterThan(0.28);
    expect(kept).toBeLessThan(0.32);
    merged.forEach((x, i) => {
      if (x !== 0) expect(x).toBeCloseTo(a[i]! / 0.3, 5);
    });
    expect(merge(0)).toEqual(merged);
    expect(merge(1)).not.toEqual(merged);
  });

  it("TIES keeps the largest magnitudes of each factor and elects the sign from the pruned factors", () => {
    const merged = mergeLora(
      [
        { a: Float32Array.of(4, -1, 0.5, -3), b: Float32Array.of(1), scaling: 1 },
        { a: Float32Array.of(-2, 2, 0.25, -1), b: Float32Array.of(1), scaling: 1 },
      ],
      { method: "ties", weights: [1, 1], density: 0.5, random: Math.random },
    );
    // kept: [4, 0, 0, -3] and [-2, 2, 0, 0]; sums 2, 2, 0, -3: signs +, +, +, -
    expect([...merged.a]).toEqual([4, 2, 0, -3]);
  });

  it("merges a single adapter linearly whatever the method, as PEFT does: its factors times sqrt(w s)", () => {
    const alone = mergeLora([{ a: Float32Array.of(4, -1), b: Float32Array.of(-2, 0.5), scaling: 2 }], {
      method: "ties",
      weights: [-2],
      density: 0.5,
      random: Math.random,
    });
    expect([...alone.a]).toEqual([-8, 2]);
    expect([...alone.b]).toEqual([-4, 1]);
  });
});

describe("merge settings", () => {
  it("take a density in (0, 1] for ties and dare-ties only, a seed for dare-ties only, and spell the defaults out", () => {
    const problems = (s: Record<string, unknown>) =>
      MergeSettingsSchema.safeParse(s).error?.issues.map((i) => `${i.path.join(".")}: ${i.message}`) ?? [];
    const density = "density: a number greater than 0 and at most 1 (the fraction of each factor kept; 1 keeps all)";
    expect(problems({ method: "ties", weights: [1, 1], density: 0 })).toEqual([density]);
    expect(problems({ method: "ties", weights: [1, 1], density: 1.5 })).toEqual([density]);
    expect(problems({ method: "ties", weights: [1, 1], density: NaN })).toEqual([density]);
    expect(problems({ method: "dare-ties", weights: [1], seed: 1.5 })).toEqual([
      "seed: an integer from 0 to 4294967295",
    ]);
    expect(problems({ method: "linear", weights: [1, Infinity] })).toEqual(["weights.1: a finite number"]);
    expect(problems({ method: "dare-ties", weights: [1, -1], density: 1, seed: 2 ** 32 - 1 })).toEqual([]);
    expect(effectiveSettings({ method: "ties", weights: [1, 1] })).toEqual({
      method: "ties",
      weights: [1, 1],
      density: 0.2,
    });
    expect(effectiveSettings({ method: "dare-ties", weights: [1, 1] })).toEqual({
      method: "dare-ties",
      weights: [1, 1],
      density: 0.5,
      seed: 0,
    });
    expect(effectiveSettings({ method: "linear", weights: [1, 1] })).toEqual({ method: "linear", weights: [1, 1] });
  });
});

/** A small qwen3-shaped GGUF LoRA (two layers of a 32-wide model). */
function writeLora(
  dir: string,
  name: string,
  opts: { rank?: number; seed?: number; type?: GgmlType.F16 | GgmlType.F32; alpha?: number } = {},
) {
  const dims = { nEmbd: 32, nLayer: 2, nHead: 2, nHeadKv: 1, headDim: 16, nFf: 64, contextLength: 256 };
  const lora = loraFile({
    name,
    dims,
    architecture: ARCHITECTURES.qwen3,
    rank: opts.rank ?? 4,
    seed: opts.seed ?? 1,
    strength: 0.5,
    type: opts.type,
  });
  if (opts.alpha !== undefined) lora.metadata["adapter.lora.alpha"] = gguf.f32(opts.alpha);
  const file = join(dir, `${name}.gguf`);
  writeGguf(file, lora.metadata, lora.tensors);
  return file;
}

function factor(header: GgufFile, name: string): Float32Array {
  const info = header.tensors.find((t) => t.name === name)!;
  const bytes = readGgufTensorData(header, info);
  return info.type === GgmlType.F16 ? f16ToF32(viewAs(bytes, Uint16Array, 2)) : viewAs(bytes, Float32Array, 4);
}

describe("mergeAdapters: GGUF LoRAs into one GGUF LoRA", () => {
  it("merges every target's factors with the adapters' scalings and writes an F16 LoRA of their rank at alpha = rank", async () => {
    const dir = tempDir();
    const plan = writeLora(dir, "plan", { seed: 1, type: GgmlType.F16, alpha: 8 });
    const search = writeLora(dir, "search", { seed: 2, type: GgmlType.F16 });
    const out = join(dir, "merged.gguf");
    const result = await mergeAdapters({
      adapters: [
        { alias: "plan", file: plan, scale: 1 },
        { alias: "search", file: search, scale: 0.5 },
      ],
      settings: { method: "ties", weights: [1, -0.7] },
      outFile: out,
      name: "static-ties",
    });
    expect(result).toMatchObject({ outFile: out, rank: 4, type: "F16", architecture: "qwen3" });
    const merged = readGgufHeader(out);
    expect(metaString(merged, "general.type")).toBe("adapter");
    expect(metaString(merged, "adapter.type")).toBe("lora");
    expect(metaString(merged, "general.name")).toBe("static-ties");
    expect(metaNumber(merged, "adapter.lora.alpha")).toBe(4);
    const inputs = [readGgufHeader(plan), readGgufHeader(search)];
    expect(merged.tensors.map((t) => [t.name, t.shape, t.type])).toEqual(
      inputs[0]!.tensors.map((t) => [t.name, t.shape, GgmlType.F16]),
    );
    expect(result.targets).toBe(merged.tensors.length / 2);
    const target = merged.tensors[0]!.name.replace(/\.lora_a$/, "");
    const expected = mergeLora(
      inputs.map((h, k) => ({
        a: factor(h, `${target}.lora_a`),
        b: factor(h, `${target}.lora_b`),
        // plan: alpha 8 at rank 4; search: alpha = rank, served at scale 0.5
        scaling: [2, 0.5][k]!,
      })),
      { method: "ties", weights: [1, -0.7], density: 0.2, random: Math.random },
    );
    const f16 = (x: Float32Array) => f16ToF32(f32ToF16(x));
    expect(factor(merged, `${target}.lora_a`)).toEqual(f16(expected.a));
    expect(factor(merged, `${target}.lora_b`)).toEqual(f16(expected.b));
  });

  it("writes F32 when one input is F32", async () => {
    const dir = tempDir();
    const out = join(dir, "merged.gguf");
    const result = await mergeAdapters({
      adapters: [
        { alias: "plan", file: writeLora(dir, "plan", { type: GgmlType.F16 }), scale: 1 },
        { alias: "search", file: writeLora(dir, "search", { type: GgmlType.F32 }), scale: 1 },
      ],
      settings: { method: "linear", weights: [1, 1] },
      outFile: out,
      name: "m",
    });
    expect(result.type).toBe("F32");
    expect(readGgufHeader(out).tensors.every((t) => t.type === GgmlType.F32)).toBe(true);
  });

  it("refuses adapters of different ranks, naming the adapter and both ranks, and writes nothing", async () => {
    const dir = tempDir();
    const out = join(dir, "merged.gguf");
    const merge = mergeAdapters({
      adapters: [
        { alias: "plan", file: writeLora(dir, "plan", { rank: 4 }), scale: 1 },
        { alias: "search", file: writeLora(dir, "search", { rank: 8 }), scale: 1 },
      ],
      settings: { method: "linear", weights: [1, 1] },
      outFile: out,
      name: "m",
    });
    await expect(merge).rejects.toThrow(LoraMergeError);
    await expect(merge).rejects.toThrow(
      "cannot merge the adapters: search: its rank is 8, plan's is 4: PEFT merges (linear, ties, dare-ties) need one rank",
    );
    expect(() => readGgufHeader(out)).toThrow();
  });
});
