import { existsSync, mkdirSync, readFileSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { writeAtomically } from "../src/demo/familySets.js";
import { DEMO_SEED } from "../src/demo/demoWeights.js";
import { loraOver, type LayerProjection } from "../src/demo/model.js";
import { GgmlType, metaString, readGgufHeader, type GgufFile } from "../src/gguf/index.js";
import { parseManifest, saveManifest } from "../src/library/manifest.js";
import { DEFAULT_MANIFEST, PACKAGE_ROOT } from "../src/paths.js";

/** The projections PEFT's usual `target_modules` name (q, k, v, o, gate, up, down), in llama.cpp's tensor names. */
const TARGETS = new Set(["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"]);

/** Every block projection of a real base model a LoRA can adapt, with its shape as the file has it. */
export function projectionsOf(base: GgufFile): LayerProjection[] {
  const out: LayerProjection[] = [];
  for (const t of base.tensors) {
    const m = /^blk\.(\d+)\.([a-z_]+)\.weight$/.exec(t.name);
    if (m && TARGETS.has(m[2]!) && t.shape.length === 2)
      out.push({ layer: Number(m[1]), suffix: m[2]!, nIn: t.shape[0]!, nOut: t.shape[1]! });
  }
  return out;
}

/** A real base model's test library: the files the engine tests and the bench switch between, and its manifest. */
export interface RealModelAdapters {
  plan: string;
  search: string;
  write: string;
  /** A second version of `write`, for refresh. */
  writeV2: string;
  /** plan, search and write with the default library's descriptions. */
  manifest: string;
}

export const realModelAdapterPaths = (dir: string): RealModelAdapters => ({
  plan: join(dir, "plan.gguf"),
  search: join(dir, "search.gguf"),
  write: join(dir, "write.gguf"),
  writeV2: join(dir, "write-v2.gguf"),
  manifest: join(dir, "manifest.json"),
});

const SET = [
  { alias: "plan", file: "plan.gguf", rank: 4 },
  { alias: "search", file: "search.gguf", rank: 8 },
  { alias: "write", file: "write.gguf", rank: 4 },
  { alias: "write-v2", file: "write-v2.gguf", rank: 4 },
] as const;

/**
 * Deterministic F16 LoRA adapters of a real base model's shapes (random factors, as the demo families' are), in
 * `dir`: written only when a file is missing. `strength` sizes B so each adapter moves the next-token distribution
 * visibly without making the model write noise.
 */
export function ensureRealModelAdapters(basePath: string, dir: string, strength: number): RealModelAdapters {
  const paths = realModelAdapterPaths(dir);
  if (Object.values(paths).every((p) => existsSync(p))) return paths;
  const base = readGgufHeader(basePath);
  const architecture = metaString(base, "general.architecture")!;
  const projections = projectionsOf(base);
  mkdirSync(dir, { recursive: true });
  for (const [index, a] of SET.entries()) {
    const lora = loraOver(architecture, projections, {
      name: `weact-test-${architecture}-${a.alias}`,
      rank: a.rank,
      seed: DEMO_SEED + 1000 * (index + 1),
      strength,
      type: GgmlType.F16,
    });
    writeAtomically(join(dir, a.file), lora.metadata, lora.tensors);
  }
  const defaults = parseManifest(JSON.parse(readFileSync(DEFAULT_MANIFEST, "utf8")), DEFAULT_MANIFEST);
  const entries = (["plan", "search", "write"] as const).map((alias) => ({
    ...defaults.find((e) => e.alias === alias)!,
    file: `${alias}.gguf`,
    filePath: join(dir, `${alias}.gguf`),
  }));
  saveManifest(paths.manifest, entries);
  return paths;
}

/** Where Gemma 3 270M's test adapters are written (not committed). */
export const GEMMA_TEST_ADAPTERS = join(PACKAGE_ROOT, "models", "gemma3", "test-adapters");

/**
 * Gemma 3 270M's test library (models/gemma3/test-adapters), until trained adapters exist. Strength 0.03 moves the
 * next-token distribution by up to 3.5 nats against the base while the model still writes sentences.
 */
export const gemmaTestAdapters = (modelPath: string): RealModelAdapters =>
  ensureRealModelAdapters(modelPath, GEMMA_TEST_ADAPTERS, 0.03);

/**
 * Qwen2.5-Coder-0.5B-Instruct's test library, written beside the fetched model (nothing of it in the repository). The
 * same strength as Gemma's moves its next-token distribution by a few nats too (test/engine/qwen.test.ts prints it).
 */
export const qwenTestAdapters = (modelPath: string): RealModelAdapters =>
  ensureRealModelAdapters(modelPath, testAdapterDir(modelPath), 0.03);

/** Where a fetched model's test adapters go: beside it in the model cache. */
export const testAdapterDir = (modelPath: string) =>
  join(dirname(modelPath), "test-adapters", basename(modelPath, ".gguf"));
