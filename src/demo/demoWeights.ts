import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { GgmlType, writeGguf } from "../gguf/index.js";
import { DEMO_DIMS, QWEN3_0_6B_DIMS, qwen3LoraFile, qwen3ModelFile, type Qwen3Dims } from "./qwen3.js";
import { buildVocabulary } from "./vocabulary.js";

export const DEMO_SEED = 20260;

/**
 * The text whose tokens invoke the demo's activated LoRA (`verify`): printable ASCII without spaces, which the
 * demo vocabulary tokenizes one byte token per character in any context (its few merges are lower case).
 */
export const DEMO_INVOCATION = "VERIFY:";

/**
 * The demo adapters: the default library (plan, search, write), `code` for runtime insertion, `write-v2` for
 * refresh, `verify` an activated LoRA (it applies from the last `DEMO_INVOCATION` in the prompt on).
 */
export const DEMO_ADAPTERS: readonly { alias: string; rank: number; invocation?: string }[] = [
  { alias: "plan", rank: 4 },
  { alias: "search", rank: 8 },
  { alias: "write", rank: 4 },
  { alias: "code", rank: 4 },
  { alias: "write-v2", rank: 4 },
  { alias: "verify", rank: 4, invocation: DEMO_INVOCATION },
];

export interface DemoWeights {
  model: string;
  adapters: Record<string, string>;
}

interface Variant {
  modelName: string;
  dims: Qwen3Dims;
  weightType: GgmlType.F32 | GgmlType.F16;
  modelPath: string;
  adapterDir: string;
  ranks: (rank: number) => number;
}

function variant(root: string, big: boolean): Variant {
  return big
    ? {
        modelName: "weact-big-qwen3-0.6b-shape",
        dims: QWEN3_0_6B_DIMS,
        weightType: GgmlType.F16,
        modelPath: join(root, "models", "big", "weact-big-qwen3.gguf"),
        adapterDir: join(root, "models", "big", "adapters"),
        // rank-16/32 adapters at 0.6B width: tens of MB each, large enough for RSS to mean something
        ranks: (rank) => (rank >= 8 ? 32 : 16),
      }
    : {
        modelName: "weact-demo-qwen3",
        dims: DEMO_DIMS,
        weightType: GgmlType.F32,
        modelPath: join(root, "models", "demo", "weact-demo-qwen3.gguf"),
        adapterDir: join(root, "adapters", "demo"),
        ranks: (rank) => rank,
      };
}

export function demoWeightPaths(root: string, big = false): DemoWeights {
  const v = variant(root, big);
  return {
    model: v.modelPath,
    adapters: Object.fromEntries(DEMO_ADAPTERS.map((a) => [a.alias, join(v.adapterDir, `${a.alias}.gguf`)])),
  };
}

export function demoWeightsExist(root: string, big = false): boolean {
  const paths = demoWeightPaths(root, big);
  return [paths.model, ...Object.values(paths.adapters)].every((p) => existsSync(p));
}

/** Writes the demo model and adapters, deterministic from `seed`: the same seed gives byte-identical files. */
export function generateDemoWeights(root: string, opts: { seed?: number; big?: boolean } = {}): DemoWeights {
  const seed = opts.seed ?? DEMO_SEED;
  const v = variant(root, opts.big ?? false);
  const paths = demoWeightPaths(root, opts.big ?? false);
  const vocab = buildVocabulary();
  mkdirSync(join(v.modelPath, ".."), { recursive: true });
  mkdirSync(v.adapterDir, { recursive: true });
  const model = qwen3ModelFile({ name: v.modelName, dims: v.dims, vocab, seed, weightType: v.weightType });
  writeGguf(paths.model, model.metadata, model.tensors);
  DEMO_ADAPTERS.forEach((a, i) => {
    const invocationTokens = a.invocation ? [...a.invocation].map((c) => vocab.idOf(c)) : undefined;
    const lora = qwen3LoraFile({
      name: `${v.modelName}-${a.alias}`,
      dims: v.dims,
      rank: v.ranks(a.rank),
      seed: seed + 1000 * (i + 1),
      strength: 0.5,
      invocationTokens,
    });
    writeGguf(paths.adapters[a.alias]!, lora.metadata, lora.tensors);
  });
  return paths;
}
