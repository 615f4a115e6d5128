import {
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  rmSync,
  statSync,
  truncateSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { LocalEngine } from "../../src/engines/local/index.js";
import {
  ALORA_INVOCATION_KEY,
  GgmlType,
  GgufValueType,
  metaNumber,
  readGgufHeader,
  type GgufFile,
} from "../../src/gguf/index.js";
import { DEMO_INVOCATION } from "../../src/demo/demoWeights.js";
import { DEMO_DIMS, loraTargets } from "../../src/demo/qwen3.js";
import {
  bf16ToF32,
  f16ToF32,
  f32ToBf16,
  f32ToF16,
  importPeft,
  mapPeftTensorName,
  MODULE_TO_GGUF,
  PeftImportError,
  permuteRowsForRope,
  readGgufTensorData,
  SafetensorsFile,
  writeSafetensors,
  type ImportPeftOptions,
  type SafetensorsTensorSource,
} from "../../src/library/peft/index.js";
import { conversation, demo, demoEngine, maxAbsDiff } from "../helpers/engine.js";
import { referenceNextTokenLogProbs } from "../../src/engines/local/localTesting.js";

type Dtype = "F32" | "F16" | "BF16";
const SUFFIX_TO_MODULE = Object.fromEntries(
  Object.entries(MODULE_TO_GGUF).map(([module, spec]) => [spec.gguf, module]),
);
const MODULES = Object.keys(MODULE_TO_GGUF);
const BASE_CONFIG = {
  peft_type: "LORA",
  r: 8,
  lora_alpha: 8,
  target_modules: MODULES,
  bias: "none",
  task_type: "CAUSAL_LM",
};

let root: string;
let base: GgufFile;
let search: GgufFile;
let counter = 0;
const fresh = (label: string) => {
  const dir = join(root, `${label}-${counter++}`);
  mkdirSync(dir, { recursive: true });
  return dir;
};

const f32 = (bytes: Uint8Array) => new Float32Array(new Uint8Array(bytes).buffer);
const u16 = (bytes: Uint8Array) => new Uint16Array(new Uint8Array(bytes).buffer);
const bytesOf = (v: Float32Array | Uint16Array) => new Uint8Array(v.buffer, v.byteOffset, v.byteLength);

/** The demo `search` adapter as PEFT would save it: HF names, torch shapes, the same matrices. */
function peftTensorsFrom(
  adapter: GgufFile,
  opts: { dtype?: Dtype; name?: (hf: string) => string } = {},
): SafetensorsTensorSource[] {
  const dtype = opts.dtype ?? "F32";
  return adapter.tensors.map((t) => {
    const m = /^blk\.(\d+)\.(\w+)\.weight\.lora_([ab])$/.exec(t.name)!;
    const module = SUFFIX_TO_MODULE[m[2]!]!;
    const block = MODULE_TO_GGUF[module]!.block;
    const hf = `base_model.model.model.layers.${m[1]}.${block}.${module}.lora_${m[3]!.toUpperCase()}.weight`;
    const raw = readGgufTensorData(adapter, t);
    const data = dtype === "F32" ? raw : dtype === "F16" ? bytesOf(f32ToF16(f32(raw))) : bytesOf(f32ToBf16(f32(raw)));
    // ggml ne [in, r] is torch [r, in]; ne [r, out] is [out, r]
    return { name: opts.name ? opts.name(hf) : hf, dtype, shape: [...t.shape].reverse(), data };
  });
}

function writePeftDir(tensors: readonly SafetensorsTensorSource[], config: Record<string, unknown> = {}): string {
  const dir = fresh("peft");
  writeFileSync(join(dir, "adapter_config.json"), JSON.stringify({ ...BASE_CONFIG, ...config }, null, 2));
  writeSafetensors(join(dir, "adapter_model.safetensors"), tensors);
  return dir;
}

const importTo = (dir: string, alias: string, extra: Partial<ImportPeftOptions> = {}) =>
  importPeft({ dir, base, alias, outFile: join(fresh("out"), `${alias}.gguf`), ...extra });

/** Runs an import that must fail: a PeftImportError whose message matches, and nothing left in the output folder. */
async function refused(dir: string, ...patterns: RegExp[]): Promise<PeftImportError> {
  const outDir = fresh("refused");
  const err = await importPeft({ dir, base, alias: "bad", outFile: join(outDir, "bad.gguf") }).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(PeftImportError);
  for (const p of patterns) expect((err as Error).message).toMatch(p);
  expect(readdirSync(outDir)).toEqual([]);
  return err as PeftImportError;
}

beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), "weact-peft-"));
  base = readGgufHeader(demo.model);
  search = readGgufHeader(demo.adapters.search!);
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe("PEFT pieces", () => {
  it("maps HF module names to GGUF tensor names, with and without the adapter name and the prefix", () => {
    const cases: [string, string | undefined][] = [
      ["base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", "blk.0.attn_q.weight.lora_a"],
      ["base_model.model.model.layers.3.self_attn.k_proj.lora_B.default.weight", "blk.3.attn_k.weight.lora_b"],
      ["model.layers.12.self_attn.v_proj.lora_A.weight", "blk.12.attn_v.weight.lora_a"],
      ["layers.1.self_attn.o_proj.lora_B.weight", "blk.1.attn_output.weight.lora_b"],
      ["base_model.model.model.layers.2.mlp.gate_proj.lora_A.default.weight", "blk.2.ffn_gate.weight.lora_a"],
      ["base_model.model.model.layers.2.mlp.up_proj.lora_B.weight", "blk.2.ffn_up.weight.lora_b"],
      ["base_model.model.model.layers.2.mlp.down_proj.lora_A.weight", "blk.2.ffn_down.weight.lora_a"],
      ["base_model.model.lm_head.lora_B.weight", "output.weight.lora_b"],
      ["base_model.model.model.layers.2.self_attn.gate_proj.lora_A.weight", undefined],
      ["base_model.model.model.layers.0.self_attn.rotary_emb.lora_A.weight", undefined],
      ["base_model.model.model.embed_tokens.lora_embedding_A", undefined],
      ["base_model.model.model.layers.0.self_attn.q_proj.lora_A.other.weight", undefined],
      ["base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector", undefined],
    ];
    for (const [hf, want] of cases) {
      const m = mapPeftTensorName(hf);
      expect(m ? `${m.target}.lora_${m.factor}` : undefined, hf).toBe(want);
    }
  });

  it("permutes q/k rows exactly like convert_hf_to_gguf's LlamaModel.permute (numpy reference)", () => {
    // numpy: np.arange(24).reshape(3, 2, 4).swapaxes(1, 2).reshape(24)
    const want = [0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15, 16, 20, 17, 21, 18, 22, 19, 23];
    const rows = new Float32Array(24 * 3).map((_, i) => Math.floor(i / 3));
    const out = f32(permuteRowsForRope(bytesOf(rows), 24, 3));
    expect(Array.from({ length: 24 }, (_, r) => out[r * 3])).toEqual(want);
  });

  it("converts halves: F16 rounds to nearest even, BF16 widens exactly", () => {
    const v = new Float32Array([0, -0, 1, -2.5, 65504, 1e-7, 6.1e-5, 1 + 2 ** -11, 1 + 3 * 2 ** -11, 70000]);
    expect(Array.from(f16ToF32(f32ToF16(v)))).toEqual([
      0,
      -0,
      1,
      -2.5,
      65504,
      2 * 2 ** -24,
      1023 * 2 ** -24,
      1,
      1 + 2 ** -9,
      Infinity,
    ]);
    const b = new Uint16Array([0x3f80, 0xc020, 0x0001, 0x7f7f]);
    expect(Array.from(bf16ToF32(b))).toEqual([
      1,
      -2.5,
      2 ** -133,
      Number(new Float32Array([3.3895313892515355e38])[0]),
    ]);
    expect(Array.from(f32ToBf16(bf16ToF32(b)))).toEqual(Array.from(b));
  });

  it("writes and reads safetensors", () => {
    const path = join(fresh("st"), "t.safetensors");
    const a = new Float32Array([1, 2, 3, 4, 5, 6]);
    writeSafetensors(path, [
      { name: "x", dtype: "F32", shape: [2, 3], data: bytesOf(a) },
      { name: "y", dtype: "F16", shape: [1], data: bytesOf(f32ToF16(new Float32Array([0.5]))) },
    ]);
    const st = SafetensorsFile.open(path);
    try {
      expect(st.header.metadata).toEqual({ format: "pt" });
      expect(st.header.dataStart % 8).toBe(0);
      expect(st.header.tensors.map((t) => [t.name, t.dtype, t.shape])).toEqual([
        ["x", "F32", [2, 3]],
        ["y", "F16", [1]],
      ]);
      expect(Array.from(f32(st.read(st.tensor("x")!)))).toEqual([1, 2, 3, 4, 5, 6]);
      expect(Array.from(f16ToF32(u16(st.read(st.tensor("y")!))))).toEqual([0.5]);
    } finally {
      st.close();
    }
  });
});

describe("importPeft on the demo model and the real engine", () => {
  let engine: LocalEngine;
  const conv = conversation("Which river flows through Paris, and how long is it?", [
    { role: "assistant", text: "The Seine; I will check its length." },
    { role: "user", text: "Give the length in km." },
  ]);
  let tokens: ReturnType<LocalEngine["renderTokens"]>;
  let native: Map<number, number>;
  /**
   * Largest |delta log-prob| of the next token after the conversation, against the native search adapter, both
   * directions.
   */
  async function diff(alias: string): Promise<number> {
    const other = await referenceNextTokenLogProbs(engine, alias, tokens);
    expect(other.size).toBe(native.size);
    return Math.max(maxAbsDiff(native, other), maxAbsDiff(other, native));
  }
  const figures: Record<string, number> = {};

  beforeAll(async () => {
    engine = await demoEngine({ adapters: ["search"] });
    tokens = engine.renderTokens(conv);
    native = await referenceNextTokenLogProbs(engine, "search", tokens);
  });
  afterAll(async () => {
    console.log("max |delta log-prob| against the native search adapter:", figures);
    await engine?.dispose();
  });

  it("F32: the same matrices give the same GGUF tensors and identical next-token log-probs", async () => {
    expect(metaNumber(search, "adapter.lora.alpha")).toBe(8);
    const result = await importTo(writePeftDir(peftTensorsFrom(search)), "peft-search");
    expect(result).toMatchObject({
      architecture: "qwen3",
      rank: 8,
      alpha: 8,
      scaling: 1,
      tensors: 56,
      targets: 28,
      dtypes: { F32: 56 },
    });
    expect(result.sha256).toMatch(/^[0-9a-f]{64}$/);

    const out = readGgufHeader(result.outFile);
    expect([...out.metadata.entries()]).toEqual([
      ["general.architecture", "qwen3"],
      ["general.type", "adapter"],
      ["general.name", "peft-search"],
      ["adapter.type", "lora"],
      ["adapter.lora.alpha", 8],
    ]);
    expect(out.tensors.map((t) => [t.name, t.shape, t.type])).toEqual(
      search.tensors.map((t) => [t.name, t.shape, t.type]),
    );
    for (const t of search.tensors)
      expect(readGgufTensorData(out, t.name).equals(readGgufTensorData(search, t))).toBe(true);

    await engine.addAdapter({ alias: "peft-search", filePath: result.outFile, scale: 1 });
    figures.f32 = await diff("peft-search");
    expect(figures.f32).toBeLessThanOrEqual(1e-6);
    expect(figures.f32).toBe(0);
  });

  it("accepts the `.default` adapter-name segment and names without the base_model.model. prefix (same file)", async () => {
    const canonical = await importTo(writePeftDir(peftTensorsFrom(search)), "peft-search");
    const named = await importTo(
      writePeftDir(peftTensorsFrom(search, { name: (n) => n.replace(/\.weight$/, ".default.weight") })),
      "peft-search",
    );
    const bare = await importTo(
      writePeftDir(peftTensorsFrom(search, { name: (n) => n.replace(/^base_model\.model\./, "") })),
      "peft-search",
    );
    expect(named.sha256).toBe(canonical.sha256);
    expect(bare.sha256).toBe(canonical.sha256);
  });

  it("F16: kept as F16, differs from F32 only by the rounding of the weights", async () => {
    const tensors = peftTensorsFrom(search, { dtype: "F16" });
    const result = await importTo(writePeftDir(tensors), "peft-search-f16");
    expect(result.dtypes).toEqual({ F16: 56 });
    const out = readGgufHeader(result.outFile);
    for (const [i, t] of out.tensors.entries()) {
      expect(t.type).toBe(GgmlType.F16);
      const bytes = readGgufTensorData(out, t);
      expect(bytes.equals(Buffer.from(tensors[i]!.data))).toBe(true);
      // every weight is the F32 one rounded to F16: within half an F16 ulp (relative 2^-11)
      const exact = f32(readGgufTensorData(search, t.name));
      const rounded = f16ToF32(u16(bytes));
      for (let j = 0; j < exact.length; j++)
        expect(Math.abs(rounded[j]! - exact[j]!)).toBeLessThanOrEqual(Math.abs(exact[j]!) * 2 ** -11 + 2 ** -25);
    }
    await engine.addAdapter({ alias: "peft-search-f16", filePath: result.outFile, scale: 1 });
    figures.f16 = await diff("peft-search-f16");
    expect(figures.f16).toBeLessThanOrEqual(1e-2);
    expect(figures.f16).toBeGreaterThan(0);
  });

  it("BF16: widened to F32 exactly", async () => {
    const tensors = peftTensorsFrom(search, { dtype: "BF16" });
    const result = await importTo(writePeftDir(tensors), "peft-search-bf16");
    expect(result.dtypes).toEqual({ BF16: 56 });
    const out = readGgufHeader(result.outFile);
    for (const [i, t] of out.tensors.entries()) {
      expect(t.type).toBe(GgmlType.F32);
      expect(Array.from(f32(readGgufTensorData(out, t)))).toEqual(Array.from(bf16ToF32(u16(tensors[i]!.data))));
    }
    await engine.addAdapter({ alias: "peft-search-bf16", filePath: result.outFile, scale: 1 });
    figures.bf16 = await diff("peft-search-bf16");
    expect(figures.bf16).toBeLessThanOrEqual(0.1);
    expect(figures.bf16).toBeGreaterThan(0);
  });

  it("rsLoRA: alpha/sqrt(r) scaling is reproduced by writing alpha*sqrt(r)", async () => {
    // PEFT scaling sqrt(8)/sqrt(8) = 1, the native search adapter's 8/8
    const result = await importTo(
      writePeftDir(peftTensorsFrom(search), { use_rslora: true, lora_alpha: Math.sqrt(8) }),
      "peft-rslora",
    );
    expect(result.alpha).toBeCloseTo(8, 12);
    expect(result.scaling).toBe(1);
    await engine.addAdapter({ alias: "peft-rslora", filePath: result.outFile, scale: 1 });
    figures.rslora = await diff("peft-rslora");
    expect(figures.rslora).toBe(0);
  });

  it("llama bases: lora_B of q_proj/k_proj gets convert_hf_to_gguf's rope row permutation (q by head_count, k by head_count_kv)", async () => {
    // the demo header relabelled as llama (same shapes: 4 heads, 2 kv heads, head_dim 32)
    const llama: GgufFile = {
      ...base,
      metadata: new Map(
        [...base.metadata].map(([k, v]) =>
          k === "general.architecture" ? [k, "llama"] : [k.replace(/^qwen3\./, "llama."), v],
        ),
      ),
    };
    const result = await importPeft({
      dir: writePeftDir(peftTensorsFrom(search)),
      base: llama,
      alias: "llama-search",
      outFile: join(fresh("out"), "l.gguf"),
    });
    expect(result.architecture).toBe("llama");
    const out = readGgufHeader(result.outFile);
    for (const t of search.tensors) {
      const want = readGgufTensorData(search, t);
      const heads = t.name.endsWith("attn_q.weight.lora_b")
        ? 4
        : t.name.endsWith("attn_k.weight.lora_b")
          ? 2
          : undefined;
      const got = readGgufTensorData(out, t.name);
      expect(got.equals(heads ? Buffer.from(permuteRowsForRope(want, t.shape[1]!, heads)) : want), t.name).toBe(true);
      if (heads) expect(got.equals(want)).toBe(false);
    }
  });

  it("aLoRA: alora_invocation_tokens becomes llama.cpp's adapter.alora.invocation_tokens, and the engine serves it as an activated LoRA", async () => {
    const invocation = engine.tokenize(DEMO_INVOCATION);
    const result = await importTo(
      writePeftDir(peftTensorsFrom(search), { alora_invocation_tokens: invocation }),
      "peft-alora",
    );
    const out = readGgufHeader(result.outFile);
    expect(out.metadata.get(ALORA_INVOCATION_KEY)).toEqual({ itemType: GgufValueType.UINT32, items: invocation });
    const info = await engine.addAdapter({ alias: "peft-alora", filePath: result.outFile, scale: 1 });
    expect(info.invocationTokens).toEqual(invocation);
    // the same matrices as search: after its invocation at the end of the prompt, the last token is the adapter's
    const session = await engine.openSession({ adapter: "peft-alora" });
    try {
      const invoked = conversation(`${DEMO_INVOCATION} Which river flows through Paris?`);
      const absent = conversation("Which river flows through Paris?");
      const got = await session.nextTokenLogProbs(absent);
      const base = await referenceNextTokenLogProbs(engine, null, engine.renderTokens(absent), session.cacheReplay());
      expect(maxAbsDiff(base, got)).toBeLessThanOrEqual(1e-4); // absent: the base's
      expect(
        maxAbsDiff(
          await referenceNextTokenLogProbs(engine, "search", engine.renderTokens(invoked)),
          await session.nextTokenLogProbs(invoked),
        ),
      ).toBeGreaterThan(0.1);
    } finally {
      await session.close();
    }
  });

  it("accepts fan_in_fan_out (it describes the base weight's layout, not the LoRA factors)", async () => {
    const canonical = await importTo(writePeftDir(peftTensorsFrom(search)), "peft-search");
    const flagged = await importTo(writePeftDir(peftTensorsFrom(search), { fan_in_fan_out: true }), "peft-search");
    expect(flagged.sha256).toBe(canonical.sha256);
  });
});

describe("importPeft refuses, naming the field or file, and writes nothing", () => {
  const good = () => peftTensorsFrom(search);

  it.each([
    [{ use_dora: true }, /use_dora: DoRA/],
    [{ modules_to_save: ["lm_head"] }, /modules_to_save: fully trained modules \(lm_head\)/],
    [{ rank_pattern: { q_proj: 16 } }, /rank_pattern: per-module ranks/],
    [{ alpha_pattern: { q_proj: 16 } }, /alpha_pattern: per-module alphas/],
    [{ bias: "lora_only" }, /bias: is "lora_only"/],
    [{ peft_type: "IA3" }, /peft_type: is "IA3"/],
    [{ r: undefined }, /\br: /],
    [{ alora_invocation_tokens: [] }, /alora_invocation_tokens: /],
    [
      { alora_invocation_tokens: [1, 1_000_000] },
      /names token ids outside the base model's vocabulary of \d+ \(1000000\)/,
    ],
  ])("adapter_config.json %j", async (config, pattern) => {
    const err = await refused(writePeftDir(good(), config), /adapter_config\.json/, pattern);
    expect(err.file).toMatch(/adapter_config\.json$/);
    expect(err.field).toBe(Object.keys(config)[0]);
  });

  it("a PEFT adapter built for a model with another hidden size", async () => {
    const dims = { ...DEMO_DIMS, nEmbd: 64 };
    let seed = 1;
    const random = (n: number) =>
      bytesOf(new Float32Array(n).map(() => ((seed = (seed * 48271) % 2147483647) / 2147483647 - 0.5) * 0.1));
    const tensors: SafetensorsTensorSource[] = [];
    for (let l = 0; l < dims.nLayer; l++) {
      for (const t of loraTargets(dims)) {
        const module = SUFFIX_TO_MODULE[t.suffix]!;
        const prefix = `base_model.model.model.layers.${l}.${MODULE_TO_GGUF[module]!.block}.${module}`;
        tensors.push({ name: `${prefix}.lora_A.weight`, dtype: "F32", shape: [8, t.nIn], data: random(8 * t.nIn) });
        tensors.push({ name: `${prefix}.lora_B.weight`, dtype: "F32", shape: [t.nOut, 8], data: random(8 * t.nOut) });
      }
    }
    const err = await refused(
      writePeftDir(tensors),
      /adapter_model\.safetensors/,
      /does not fit weact-demo-qwen3\.gguf/,
      /blk\.0\.attn_q\.weight: LoRA maps \[64\] -> \[128\] but the base weight is \[128,128\]/,
    );
    expect(err.field).toBe("base model");
    expect(err.problems.length).toBeGreaterThan(1);
  });

  it("a truncated safetensors file", async () => {
    const dir = writePeftDir(good());
    const file = join(dir, "adapter_model.safetensors");
    truncateSync(file, Math.floor(statSync(file).size / 2));
    await refused(dir, /adapter_model\.safetensors/, /past the end of the file/, /truncated/);
    truncateSync(file, 100); // inside the JSON header
    await refused(dir, /adapter_model\.safetensors \(header\)/, /truncated/);
  });

  it("an unsupported dtype (I8)", async () => {
    const tensors = good();
    const a = tensors[0]!;
    tensors[0] = { ...a, dtype: "I8", data: new Uint8Array(a.shape[0]! * a.shape[1]!) };
    await refused(
      writePeftDir(tensors),
      /adapter_model\.safetensors \(dtype\)/,
      /layers\.0\.self_attn\.q_proj\.lora_A\.weight is I8/,
    );
  });

  it("a module name that maps to no GGUF tensor", async () => {
    const tensors = good();
    tensors.push({
      name: "base_model.model.model.embed_tokens.lora_embedding_A",
      dtype: "F32",
      shape: [8, 16],
      data: new Uint8Array(8 * 16 * 4),
    });
    tensors.push({
      name: "base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector",
      dtype: "F32",
      shape: [128],
      data: new Uint8Array(128 * 4),
    });
    const err = await refused(
      writePeftDir(tensors),
      /adapter_model\.safetensors \(tensor names\)/,
      /2 tensor\(s\) map to no GGUF tensor: base_model\.model\.model\.embed_tokens\.lora_embedding_A, .*lora_magnitude_vector/,
    );
    expect(err.problems).toHaveLength(2);
  });

  it("tensors whose rank is not the config's r, and a lora_A without its lora_B", async () => {
    await refused(writePeftDir(good(), { r: 4 }), /do not have rank r = 4/);
    await refused(writePeftDir(good().slice(1)), /q_proj\.lora_B\.weight has no lora_A/);
  });

  it("an existing output file unless overwrite is set", async () => {
    const dir = writePeftDir(good());
    const outFile = join(fresh("exists"), "a.gguf");
    copyFileSync(demo.adapters.plan!, outFile);
    await expect(importPeft({ dir, base, alias: "a", outFile })).rejects.toThrow(/a\.gguf \(outFile\): already exists/);
    expect(readGgufHeader(outFile).tensors[0]!.shape[1]).toBe(4); // still the plan adapter
    const r = await importPeft({ dir, base, alias: "a", outFile, overwrite: true });
    expect(r.rank).toBe(8);
    expect(readdirSync(join(outFile, ".."))).toEqual(["a.gguf"]);
  });
});

describe("weact-mcp import-peft", () => {
  it("turns a PEFT folder into a library adapter with one command", async () => {
    const { execFile } = await import("node:child_process");
    const { promisify } = await import("node:util");
    const { readFileSync } = await import("node:fs");
    const { MAIN, testConfig } = await import("../helpers/server.js");
    const lib = fresh("lib");
    writeFileSync(join(lib, "manifest.json"), JSON.stringify({ adapters: [] }));
    const dir = writePeftDir(peftTensorsFrom(search));
    const { stdout } = await promisify(execFile)(
      process.execPath,
      [
        MAIN,
        "import-peft",
        dir,
        "--alias",
        "peft-search",
        "--description",
        "Search, imported from PEFT.",
        "--config",
        testConfig(),
        "--adapters",
        lib,
      ],
      {
        env: { ...process.env, WEACT_LOG_LEVEL: "warn" },
      },
    );
    expect(stdout).toMatch(/imported .* as "peft-search": .*peft-search\.gguf \(rank 8, alpha 8/);
    const manifest = JSON.parse(readFileSync(join(lib, "manifest.json"), "utf8"));
    // recorded for the base it was imported for (the demo model the config serves): another base refuses it
    const { createHash } = await import("node:crypto");
    const baseSha256 = createHash("sha256").update(readFileSync(demo.model)).digest("hex");
    expect(manifest.adapters).toEqual([
      {
        alias: "peft-search",
        description: "Search, imported from PEFT.",
        file: "peft-search.gguf",
        scale: 1,
        baseSha256,
      },
    ]);
    expect(statSync(join(lib, "peft-search.gguf")).size).toBeGreaterThan(0);
  });
});
