import { existsSync, mkdirSync, readFileSync, renameSync, rmSync } from "node:fs";
import { join } from "node:path";
import { GgmlType, writeGguf, type GgufEntry, type GgufTensorSource } from "../gguf/index.js";
import { parseManifest, saveManifest } from "../library/manifest.js";
import { DEFAULT_MANIFEST } from "../paths.js";
import { ARCHITECTURES } from "./architectures.js";
import { FAMILIES, familyNamed, type Family } from "./families.js";
import { DEMO_ADAPTERS, DEMO_SEED } from "./demoWeights.js";
import { llamaCppTemplates } from "./llamaCppTemplates.js";
import { loraFile, modelFile, type WeightType } from "./model.js";
import { DEMO_DIMS } from "./qwen3.js";
import { buildVocabulary } from "./vocabulary.js";

/** Base model types a family set is generated in; its LoRAs stay F16 on every one, as users run them. */
export const QUANTS = { F16: GgmlType.F16, Q8_0: GgmlType.Q8_0, Q4_0: GgmlType.Q4_0 } as const satisfies Record<
  string,
  WeightType
>;
export type QuantName = keyof typeof QUANTS;
export const QUANT_NAMES = Object.keys(QUANTS) as QuantName[];

/** One generated set: what `weact-mcp --model MODEL --adapters ADAPTERS` serves. */
export interface FamilySet {
  family: string;
  quant: QuantName;
  model: string;
  /** The adapter manifest (plan, search, write, with the default library's descriptions). */
  adapters: string;
}

const LIBRARY = ["plan", "search", "write"] as const;

export function familyDir(root: string, family: string): string {
  return join(root, "models", "families", family);
}

export function familySetPaths(root: string, family: string, quant: QuantName): FamilySet {
  const dir = familyDir(root, family);
  return {
    family,
    quant,
    model: join(dir, `weact-${family}-${quant}.gguf`),
    adapters: join(dir, "adapters", "manifest.json"),
  };
}

/** Writes through a temporary name, so concurrent generators (parallel test files) never read half a file. */
export function writeAtomically(
  path: string,
  metadata: Record<string, GgufEntry>,
  tensors: readonly GgufTensorSource[],
): void {
  const tmp = `${path}.${process.pid}.tmp`;
  try {
    writeGguf(tmp, metadata, tensors);
    renameSync(tmp, path);
  } catch (err) {
    rmSync(tmp, { force: true });
    throw err;
  }
}

/** The family's adapters and manifest (shared by its quant types): F16 LoRAs, the default library's texts. */
function writeAdapters(root: string, family: Family, seed: number): void {
  const dir = join(familyDir(root, family.name), "adapters");
  mkdirSync(dir, { recursive: true });
  const architecture = ARCHITECTURES[family.architecture];
  for (const alias of LIBRARY) {
    const index = DEMO_ADAPTERS.findIndex((a) => a.alias === alias);
    const lora = loraFile({
      name: `weact-${family.name}-${alias}`,
      architecture,
      dims: DEMO_DIMS,
      rank: DEMO_ADAPTERS[index]!.rank,
      seed: seed + 1000 * (index + 1),
      strength: 0.5,
      type: GgmlType.F16,
    });
    writeAtomically(join(dir, `${alias}.gguf`), lora.metadata, lora.tensors);
  }
  const defaults = parseManifest(JSON.parse(readFileSync(DEFAULT_MANIFEST, "utf8")), DEFAULT_MANIFEST);
  const entries = LIBRARY.map((alias) => ({
    ...defaults.find((e) => e.alias === alias)!,
    file: `${alias}.gguf`,
    filePath: join(dir, `${alias}.gguf`),
  }));
  saveManifest(join(dir, "manifest.json"), entries);
}

/**
 * Generates one family's demo set in `quant`, deterministic from `seed`: the same seed gives byte-identical
 * files, and every quant type quantizes the same F32 values. The chat template is the real one, read from
 * node-llama-cpp's llama.cpp bundle (cached under models/.llama-cpp-templates).
 */
export function generateFamilySet(root: string, familyName: string, quant: QuantName, seed = DEMO_SEED): FamilySet {
  const family = familyNamed(familyName);
  if (!family) throw new Error(`unknown family "${familyName}" (known: ${FAMILIES.map((f) => f.name).join(", ")})`);
  const paths = familySetPaths(root, family.name, quant);
  const template = llamaCppTemplates([family.template], join(root, "models", ".llama-cpp-templates"))[family.template]!;
  mkdirSync(familyDir(root, family.name), { recursive: true });
  const model = modelFile({
    name: family.modelName,
    architecture: ARCHITECTURES[family.architecture],
    dims: DEMO_DIMS,
    vocab: buildVocabulary(family.specials),
    tokenizer: family.tokenizer,
    chatTemplate: template,
    seed,
    weightType: QUANTS[quant],
  });
  writeAtomically(paths.model, model.metadata, model.tensors);
  writeAdapters(root, family, seed);
  return paths;
}

/** The set, generated only if one of its files is missing (the default seed). */
export function ensureFamilySet(root: string, family: string, quant: QuantName): FamilySet {
  const paths = familySetPaths(root, family, quant);
  const adapterFiles = LIBRARY.map((a) => join(familyDir(root, family), "adapters", `${a}.gguf`));
  if ([paths.model, paths.adapters, ...adapterFiles].every((p) => existsSync(p))) return paths;
  return generateFamilySet(root, family, quant);
}
