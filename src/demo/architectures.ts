import { gguf, type GgufEntry } from "../gguf/index.js";

/** Hyperparameters of a generated model (any architecture here). */
export interface ModelDims {
  nEmbd: number;
  nLayer: number;
  nHead: number;
  nHeadKv: number;
  headDim: number;
  nFf: number;
  contextLength: number;
}

/** A weight matrix of every block, with its ggml shape [n_in, n_out]. */
export interface Projection {
  suffix: string;
  nIn: number;
  nOut: number;
}

/** One llama.cpp architecture: the GGUF keys its loader reads and the tensors it creates (src/models/<arch>.cpp). */
export interface Architecture {
  readonly name: string;
  /** Every block's weight matrices, in the order they are written; LoRA adapters target all of them. */
  projections(d: ModelDims): Projection[];
  /** Per-block vectors besides attn_norm and ffn_norm (F32): q/k norms, post norms, biases. */
  blockVectors(d: ModelDims): { suffix: string; length: number; value: number }[];
  /** Whole-model vectors besides output_norm (e.g. gemma4's rope_freqs). */
  modelVectors(d: ModelDims): { name: string; length: number; value: number }[];
  /** Keys beyond the common `<arch>.*` hyperparameters. */
  extraKeys(d: ModelDims): Record<string, GgufEntry>;
  ropeFreqBase: number;
}

/** q, k, v, o and the gated MLP as separate matrices: llama, qwen2, qwen3, granite, gemma4. */
function separateProjections(d: ModelDims): Projection[] {
  const q = d.nHead * d.headDim;
  const kv = d.nHeadKv * d.headDim;
  return [
    { suffix: "attn_q", nIn: d.nEmbd, nOut: q },
    { suffix: "attn_k", nIn: d.nEmbd, nOut: kv },
    { suffix: "attn_v", nIn: d.nEmbd, nOut: kv },
    { suffix: "attn_output", nIn: q, nOut: d.nEmbd },
    { suffix: "ffn_gate", nIn: d.nEmbd, nOut: d.nFf },
    { suffix: "ffn_up", nIn: d.nEmbd, nOut: d.nFf },
    { suffix: "ffn_down", nIn: d.nFf, nOut: d.nEmbd },
  ];
}

const none = () => [];
const plain = (name: string, ropeFreqBase: number, extra: Architecture["extraKeys"] = () => ({})): Architecture => ({
  name,
  projections: separateProjections,
  blockVectors: none,
  modelVectors: none,
  extraKeys: extra,
  ropeFreqBase,
});

const qkNorm = (d: ModelDims) => [
  { suffix: "attn_q_norm", length: d.headDim, value: 1 },
  { suffix: "attn_k_norm", length: d.headDim, value: 1 },
];

export const ARCHITECTURES = {
  llama: plain("llama", 500_000),
  qwen2: {
    ...plain("qwen2", 1_000_000),
    // Qwen2.5 has q/k/v biases
    blockVectors: (d: ModelDims) => [
      { suffix: "attn_q.bias", length: d.nHead * d.headDim, value: 0.01 },
      { suffix: "attn_k.bias", length: d.nHeadKv * d.headDim, value: 0.01 },
      { suffix: "attn_v.bias", length: d.nHeadKv * d.headDim, value: 0.01 },
    ],
  },
  qwen3: { ...plain("qwen3", 1_000_000), blockVectors: qkNorm },
  granite: plain("granite", 10_000, (d) => ({
    // Granite 3.x's muP scales: llama.cpp requires logit_scale
    "granite.logit_scale": gguf.f32(1),
    "granite.residual_scale": gguf.f32(0.5),
    "granite.embedding_scale": gguf.f32(4),
    "granite.attention.scale": gguf.f32(1 / Math.sqrt(d.headDim)),
  })),
  gemma4: {
    ...plain("gemma4", 1_000_000),
    blockVectors: (d: ModelDims) => [
      ...qkNorm(d),
      { suffix: "post_attention_norm", length: d.nEmbd, value: 1 },
      { suffix: "post_ffw_norm", length: d.nEmbd, value: 1 },
    ],
    // full-attention layers read proportional-rope factors; ones leave rope unchanged
    modelVectors: (d: ModelDims) => [{ name: "rope_freqs.weight", length: d.headDim / 2, value: 1 }],
    extraKeys: (d: ModelDims) => ({
      // sliding-window layers with a full one last, as Gemma's; the window spans the whole context, so a
      // cache rolled back to a prefix keeps every token it needs (llama.cpp requires at least one SWA layer)
      "gemma4.attention.sliding_window": gguf.u32(d.contextLength),
      "gemma4.attention.sliding_window_pattern": gguf.bools(
        Array.from({ length: d.nLayer }, (_, l) => l < d.nLayer - 1),
      ),
      "gemma4.attention.key_length_swa": gguf.u32(d.headDim),
      "gemma4.attention.value_length_swa": gguf.u32(d.headDim),
      "gemma4.embedding_length_per_layer_input": gguf.u32(0),
      "gemma4.final_logit_softcapping": gguf.f32(30),
    }),
  },
  phi3: {
    ...plain("phi3", 10_000),
    // Phi-3 fuses q/k/v into attn_qkv and gate/up into one ffn_up of twice the width
    projections: (d: ModelDims) => [
      { suffix: "attn_qkv", nIn: d.nEmbd, nOut: d.nHead * d.headDim + 2 * d.nHeadKv * d.headDim },
      { suffix: "attn_output", nIn: d.nHead * d.headDim, nOut: d.nEmbd },
      { suffix: "ffn_up", nIn: d.nEmbd, nOut: 2 * d.nFf },
      { suffix: "ffn_down", nIn: d.nFf, nOut: d.nEmbd },
    ],
  },
} satisfies Record<string, Architecture>;

export type ArchitectureName = keyof typeof ARCHITECTURES;
