import { GgmlType } from "../gguf/index.js";
import { ARCHITECTURES, type ModelDims } from "./architectures.js";
import { QWEN3_CHAT_TEMPLATE } from "./chatTemplate.js";
import { loraFile, modelFile } from "./model.js";
import type { DemoVocabulary } from "./vocabulary.js";

/**
 * The default demo model: qwen3 with the Qwen3 template embedded (the family models in families.ts read theirs from
 * llama.cpp).
 */
export type Qwen3Dims = ModelDims;

export const DEMO_DIMS: Qwen3Dims = {
  nEmbd: 128,
  nLayer: 4,
  nHead: 4,
  nHeadKv: 2,
  headDim: 32,
  nFf: 384,
  contextLength: 8192,
};
/**
 * Qwen3-0.6B's shape (with the demo's small vocabulary), for benchmarks where the tiny model's overheads would mislead.
 */
export const QWEN3_0_6B_DIMS: Qwen3Dims = {
  nEmbd: 1024,
  nLayer: 28,
  nHead: 16,
  nHeadKv: 8,
  headDim: 128,
  nFf: 3072,
  contextLength: 8192,
};

/** The projections a LoRA adapter targets, with their ggml shape [n_in, n_out]. */
export const loraTargets = (d: Qwen3Dims) => ARCHITECTURES.qwen3.projections(d);

export function qwen3ModelFile(opts: {
  name: string;
  dims: Qwen3Dims;
  vocab: DemoVocabulary;
  seed: number;
  weightType: GgmlType.F32 | GgmlType.F16;
  outputFromEmbedding?: boolean;
}) {
  return modelFile({
    ...opts,
    architecture: ARCHITECTURES.qwen3,
    tokenizer: { pre: "qwen2", eos: "<|im_end|>", pad: "<|endoftext|>", addBos: false },
    chatTemplate: QWEN3_CHAT_TEMPLATE,
  });
}

export function qwen3LoraFile(opts: {
  name: string;
  dims: Qwen3Dims;
  rank: number;
  seed: number;
  strength: number;
  invocationTokens?: readonly number[];
}) {
  return loraFile({ ...opts, architecture: ARCHITECTURES.qwen3 });
}
