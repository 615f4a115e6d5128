import {
  ALORA_INVOCATION_KEY,
  FILE_TYPE_OF,
  GgmlType,
  f32ToF16,
  quantize,
  gguf,
  type GgufEntry,
  type GgufTensorSource,
} from "../gguf/index.js";
import type { Architecture, ModelDims, Projection } from "./architectures.js";
import { SeededRandom } from "./random.js";
import type { DemoVocabulary } from "./vocabulary.js";

/** The types a generated base model's weight matrices can have (vectors stay F32, as llama-quantize keeps them). */
export type WeightType = GgmlType.F32 | GgmlType.F16 | GgmlType.Q8_0 | GgmlType.Q4_0;

/** Which vocabulary entries play which role, and how llama.cpp pre-tokenizes. */
export interface TokenizerSpec {
  pre: string;
  eos: string;
  /** Padding (and, unless `bos` is given, BOS) token. */
  pad: string;
  bos?: string;
  addBos: boolean;
}

function bytesOf(values: Float32Array, type: WeightType): Uint8Array {
  if (type === GgmlType.F32) return new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
  if (type === GgmlType.F16) return new Uint8Array(f32ToF16(values).buffer);
  return quantize(values, type);
}

function gaussian(rng: SeededRandom, n: number, std: number): Float32Array {
  const v = new Float32Array(n);
  for (let i = 0; i < n; i++) v[i] = rng.normal() * std;
  return v;
}

function tensor(name: string, shape: number[], type: WeightType, values: () => Float32Array): GgufTensorSource {
  return { name, shape, type, data: () => bytesOf(values(), type) };
}

const filled = (n: number, value: number) => () => new Float32Array(n).fill(value);

export interface ModelFileOptions {
  name: string;
  architecture: Architecture;
  dims: ModelDims;
  vocab: DemoVocabulary;
  tokenizer: TokenizerSpec;
  chatTemplate: string;
  seed: number;
  weightType: WeightType;
  /** Scales every weight matrix's spread (default 1); below 1 the random model is less sensitive to rounding. */
  gain?: number;
  /**
   * A model to train rather than to serve random: the output projection starts as the token embedding over
   * sqrt(n_embd), so writing out the token an attention head read is the identity from the start. From the
   * default (an independent output at gain 3) the trained demo's base never learned to copy from its context:
   * not even repeated random tokens in 400 steps, where from this start it copies them all.
   */
  outputFromEmbedding?: boolean;
}

/**
 * A random base model of `architecture`, deterministic from `seed`: every tensor its llama.cpp loader needs,
 * each from its own seeded stream (so its values do not depend on the weight type or on other tensors).
 */
export function modelFile(opts: ModelFileOptions): {
  metadata: Record<string, GgufEntry>;
  tensors: GgufTensorSource[];
} {
  const { dims: d, vocab, weightType, architecture: arch } = opts;
  const root = new SeededRandom(opts.seed);
  const nVocab = vocab.tokens.length;
  const weight = (name: string, nIn: number, nOut: number, gain = 1) =>
    tensor(name, [nIn, nOut], weightType, () =>
      gaussian(root.fork(name), nIn * nOut, (gain * (opts.gain ?? 1)) / Math.sqrt(nIn)),
    );

  const embedding = () => gaussian(root.fork("token_embd"), d.nEmbd * nVocab, 1);
  const tensors: GgufTensorSource[] = [
    tensor("token_embd.weight", [d.nEmbd, nVocab], weightType, embedding),
    tensor("output_norm.weight", [d.nEmbd], GgmlType.F32, filled(d.nEmbd, 1)),
    opts.outputFromEmbedding
      ? tensor("output.weight", [d.nEmbd, nVocab], weightType, () =>
          embedding().map((x) => x * (1 / Math.sqrt(d.nEmbd))),
        )
      : // A gain above 1 keeps the random model's next-token distribution peaked enough to show adapter effects.
        weight("output.weight", d.nEmbd, nVocab, 3),
    ...arch.modelVectors(d).map((v) => tensor(v.name, [v.length], GgmlType.F32, filled(v.length, v.value))),
  ];
  for (let l = 0; l < d.nLayer; l++) {
    const p = `blk.${l}.`;
    tensors.push(
      tensor(`${p}attn_norm.weight`, [d.nEmbd], GgmlType.F32, filled(d.nEmbd, 1)),
      ...arch
        .blockVectors(d)
        .map((v) =>
          tensor(
            `${p}${v.suffix}${v.suffix.endsWith(".bias") ? "" : ".weight"}`,
            [v.length],
            GgmlType.F32,
            filled(v.length, v.value),
          ),
        ),
      tensor(`${p}ffn_norm.weight`, [d.nEmbd], GgmlType.F32, filled(d.nEmbd, 1)),
      ...arch.projections(d).map((t) => weight(`${p}${t.suffix}.weight`, t.nIn, t.nOut)),
    );
  }
  const a = arch.name;
  const t = opts.tokenizer;
  const metadata: Record<string, GgufEntry> = {
    "general.architecture": gguf.str(a),
    "general.name": gguf.str(opts.name),
    "general.file_type": gguf.u32(FILE_TYPE_OF[weightType]!),
    [`${a}.context_length`]: gguf.u32(d.contextLength),
    [`${a}.embedding_length`]: gguf.u32(d.nEmbd),
    [`${a}.block_count`]: gguf.u32(d.nLayer),
    [`${a}.feed_forward_length`]: gguf.u32(d.nFf),
    [`${a}.attention.head_count`]: gguf.u32(d.nHead),
    [`${a}.attention.head_count_kv`]: gguf.u32(d.nHeadKv),
    [`${a}.attention.key_length`]: gguf.u32(d.headDim),
    [`${a}.attention.value_length`]: gguf.u32(d.headDim),
    [`${a}.attention.layer_norm_rms_epsilon`]: gguf.f32(1e-6),
    [`${a}.rope.freq_base`]: gguf.f32(arch.ropeFreqBase),
    ...arch.extraKeys(d),
    "tokenizer.ggml.model": gguf.str("gpt2"),
    "tokenizer.ggml.pre": gguf.str(t.pre),
    "tokenizer.ggml.tokens": gguf.strings(vocab.tokens),
    "tokenizer.ggml.token_type": gguf.i32s(vocab.tokenTypes),
    "tokenizer.ggml.merges": gguf.strings(vocab.merges),
    "tokenizer.ggml.eos_token_id": gguf.u32(vocab.idOf(t.eos)),
    "tokenizer.ggml.padding_token_id": gguf.u32(vocab.idOf(t.pad)),
    "tokenizer.ggml.bos_token_id": gguf.u32(vocab.idOf(t.bos ?? t.pad)),
    "tokenizer.ggml.add_bos_token": gguf.bool(t.addBos),
    "tokenizer.chat_template": gguf.str(opts.chatTemplate),
  };
  return { metadata, tensors };
}

/** One weight matrix a LoRA adapts: `blk.<layer>.<suffix>.weight`. */
export interface LayerProjection extends Projection {
  readonly layer: number;
}

export interface LoraOptions {
  name: string;
  rank: number;
  seed: number;
  strength: number;
  type?: GgmlType.F32 | GgmlType.F16;
  /** An activated LoRA's invocation sequence (token ids), written as llama.cpp's `adapter.alora.invocation_tokens`. */
  invocationTokens?: readonly number[];
}

/**
 * A LoRA adapter over every block projection of a generated model: W' = W + (alpha / r) * B A, in F32 or F16 (what
 * convert_lora_to_gguf.py writes). Both factors are random (a trained adapter's B is not zero), sized so the
 * adapter visibly moves the next-token distribution.
 */
export function loraFile(opts: LoraOptions & { architecture: Architecture; dims: ModelDims }) {
  const projections: LayerProjection[] = [];
  for (let layer = 0; layer < opts.dims.nLayer; layer++)
    for (const t of opts.architecture.projections(opts.dims)) projections.push({ layer, ...t });
  return loraOver(opts.architecture.name, projections, opts);
}

/** A random LoRA adapter over `projections` of a base of `architecture` (a generated one, or a real file's shapes). */
export function loraOver(architecture: string, projections: readonly LayerProjection[], opts: LoraOptions) {
  const { rank } = opts;
  const type = opts.type ?? GgmlType.F32;
  const root = new SeededRandom(opts.seed);
  const tensors: GgufTensorSource[] = [];
  for (const t of projections) {
    const base = `blk.${t.layer}.${t.suffix}.weight`;
    tensors.push(
      tensor(`${base}.lora_a`, [t.nIn, rank], type, () =>
        gaussian(root.fork(`${base}.a`), t.nIn * rank, 1 / Math.sqrt(t.nIn)),
      ),
      tensor(`${base}.lora_b`, [rank, t.nOut], type, () =>
        gaussian(root.fork(`${base}.b`), rank * t.nOut, opts.strength / Math.sqrt(rank)),
      ),
    );
  }
  const metadata: Record<string, GgufEntry> = {
    "general.architecture": gguf.str(architecture),
    "general.type": gguf.str("adapter"),
    "general.name": gguf.str(opts.name),
    "adapter.type": gguf.str("lora"),
    "adapter.lora.alpha": gguf.f32(rank),
    ...(opts.invocationTokens ? { [ALORA_INVOCATION_KEY]: gguf.u32s(opts.invocationTokens) } : {}),
  };
  return { metadata, tensors };
}
