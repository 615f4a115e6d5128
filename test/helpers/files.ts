import { copyFileSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { writeGguf, gguf, GgmlType, tensorByteSize } from "../../src/gguf/index.js";
import { DEMO_DIMS, qwen3LoraFile, qwen3ModelFile, type Qwen3Dims } from "../../src/demo/qwen3.js";
import { buildVocabulary } from "../../src/demo/vocabulary.js";
import { demoWeightPaths } from "../../src/demo/demoWeights.js";
import { DEFAULT_MANIFEST, PACKAGE_ROOT, TRAINED_DIR } from "../../src/paths.js";

export function tempDir(prefix = "weact-test-"): string {
  return mkdtempSync(join(tmpdir(), prefix));
}

/** A demo-shaped model file with `edit` applied to its metadata (e.g. a key llama.cpp would abort without). */
export function writeModelVariant(dir: string, name: string, edit: (meta: Record<string, unknown>) => void): string {
  const model = qwen3ModelFile({ name, dims: DEMO_DIMS, vocab: buildVocabulary(), seed: 7, weightType: GgmlType.F32 });
  edit(model.metadata);
  const path = join(dir, `${name}.gguf`);
  writeGguf(path, model.metadata as never, model.tensors);
  return path;
}

export function writeLoraVariant(
  dir: string,
  name: string,
  opts: { dims?: Qwen3Dims; architecture?: string; seed?: number; invocationTokens?: readonly number[] } = {},
): string {
  const lora = qwen3LoraFile({
    name,
    dims: opts.dims ?? DEMO_DIMS,
    rank: 4,
    seed: opts.seed ?? 11,
    strength: 0.5,
    ...(opts.invocationTokens ? { invocationTokens: opts.invocationTokens } : {}),
  });
  if (opts.architecture) lora.metadata["general.architecture"] = gguf.str(opts.architecture);
  const path = join(dir, `${name}.gguf`);
  writeGguf(path, lora.metadata, lora.tensors);
  return path;
}

/**
 * A demo-shaped LoRA of `rank` whose weights are all zero: a large valid adapter (38 KB a rank) written at disk speed,
 * with no random numbers to draw.
 */
export function writeZeroLora(dir: string, name: string, rank: number): string {
  const lora = qwen3LoraFile({ name, dims: DEMO_DIMS, rank, seed: 1, strength: 0.5 });
  const path = join(dir, `${name}.gguf`);
  const zeros = lora.tensors.map((t) => ({ ...t, data: () => new Uint8Array(tensorByteSize(t.shape, t.type)) }));
  writeGguf(path, lora.metadata, zeros);
  return path;
}

/** A copy of `file` cut to `fraction` of its bytes. */
export function truncatedCopy(file: string, dir: string, name: string, fraction: number): string {
  const bytes = readFileSync(file);
  const path = join(dir, name);
  writeFileSync(path, bytes.subarray(0, Math.floor(bytes.length * fraction)));
  return path;
}

/** A copy of `file` with `patch` applied to its bytes. */
export function patchedCopy(file: string, dir: string, name: string, patch: (bytes: Buffer) => void): string {
  const bytes = Buffer.from(readFileSync(file));
  patch(bytes);
  const path = join(dir, name);
  writeFileSync(path, bytes);
  return path;
}

/**
 * A private adapter library: the shipped manifest and copies of the demo adapters (code and write-v2 too, for
 * registering and refreshing) in a temporary folder, so an admin write or a manifest edit never touches the
 * repository.
 */
export function tempLibrary(): { dir: string; manifest: string; file: (alias: string) => string } {
  const dir = tempDir("weact-lib-");
  const demo = demoWeightPaths(PACKAGE_ROOT);
  for (const [alias, path] of Object.entries(demo.adapters)) copyFileSync(path, join(dir, `${alias}.gguf`));
  const manifest = join(dir, "manifest.json");
  writeFileSync(manifest, readFileSync(DEFAULT_MANIFEST, "utf8").replaceAll('"demo/', '"'));
  return { dir, manifest, file: (alias) => join(dir, `${alias}.gguf`) };
}

/**
 * A private copy of the trained demo library (its GGUFs, its manifest, the code capability's entry), so a server may
 * write beside its manifest and admin calls never touch the repository.
 */
export function trainedLibraryCopy(): { dir: string; manifest: string } {
  const dir = tempDir("weact-trained-");
  for (const f of readdirSync(TRAINED_DIR).filter((f) => f.endsWith(".gguf") || f.endsWith(".json")))
    copyFileSync(join(TRAINED_DIR, f), join(dir, f));
  return { dir, manifest: join(dir, "manifest.json") };
}
