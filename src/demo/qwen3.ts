import { GgmlType } from "../../native/gguf/format.js";
import { gguf, type GgufEntry, type GgufTensorSource } from "../../native/gguf/writer.js";
import { QWEN3_CHAT_TEMPLATE } from "./chatTemplate.js";
import { SeededRandom } from "./random.js";
import type { DemoVocabulary } from "./vocabulary.js";

/** Hyperparameters of a generated qwen3-architecture model. */
export interface Qwen3Dims {
  nEmbd: number;
  nLayer: number;
  nHead: number;
  nHeadKv: number;
  headDim: number;
  nFf: number;
  contextLength: number;
}

export const DEMO_DIMS: Qwen3Dims = { nEmbd: 128, nLayer: 4, nHead: 4, nHeadKv: 2, headDim: 32, nFf: 384, contextLength: 8192 };
/** Qwen3-0.6B's shape (with the demo's small vocabulary), for benchmarks where the tiny model's overheads would mislead. */
export const QWEN3_0_6B_DIMS: Qwen3Dims = { nEmbd: 1024, nLayer: 28, nHead: 16, nHeadKv: 8, headDim: 128, nFf: 3072, contextLength: 8192 };

/** The projections a LoRA adapter targets, with their ggml shape [n_in, n_out]. */
export function loraTargets(d: Qwen3Dims): { suffix: string; nIn: number; nOut: number }[] {
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

function f32Bytes(values: Float32Array): Uint8Array {
  return new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
}

function toF16(values: Float32Array): Uint8Array {
  const out = new Uint16Array(values.length);
  const f = new Float32Array(1);
  const u = new Uint32Array(f.buffer);
  for (let i = 0; i < values.length; i++) {
    f[0] = values[i]!;
    const x = u[0]!;
    const sign = (x >>> 16) & 0x8000;
    const exp = ((x >>> 23) & 0xff) - 127 + 15;
    const mant = x & 0x7fffff;
    if (exp <= 0) out[i] = sign; // tiny values flush to zero: fine for random weights
    else if (exp >= 31) out[i] = sign | 0x7c00;
    else out[i] = sign | (exp << 10) | ((mant + 0x1000) >>> 13); // round to nearest
  }
  return new Uint8Array(out.buffer);
}

function gaussian(rng: SeededRandom, n: number, std: number): Float32Array {
  const v = new Float32Array(n);
  for (let i = 0; i < n; i++) v[i] = rng.normal() * std;
  return v;
}

function tensor(name: string, shape: number[], type: GgmlType.F32 | GgmlType.F16, values: () => Float32Array): GgufTensorSource {
  return { name, shape, type, data: () => (type === GgmlType.F16 ? toF16(values()) : f32Bytes(values())) };
}

export function qwen3ModelFile(opts: { name: string; dims: Qwen3Dims; vocab: DemoVocabulary; seed: number; weightType: GgmlType.F32 | GgmlType.F16 }) {
  const { dims: d, vocab, weightType } = opts;
  const root = new SeededRandom(opts.seed);
  const nVocab = vocab.tokens.length;
  const ones = (n: number) => () => new Float32Array(n).fill(1);
  const weight = (name: string, nIn: number, nOut: number, gain = 1) =>
    tensor(name, [nIn, nOut], weightType, () => gaussian(root.fork(name), nIn * nOut, gain / Math.sqrt(nIn)));

  const tensors: GgufTensorSource[] = [
    tensor("token_embd.weight", [d.nEmbd, nVocab], weightType, () => gaussian(root.fork("token_embd"), d.nEmbd * nVocab, 1)),
    tensor("output_norm.weight", [d.nEmbd], GgmlType.F32, ones(d.nEmbd)),
    // A gain above 1 keeps the random model's next-token distribution peaked enough to show adapter effects.
    weight("output.weight", d.nEmbd, nVocab, 3),
  ];
  for (let l = 0; l < d.nLayer; l++) {
    const p = `blk.${l}.`;
    tensors.push(
      tensor(`${p}attn_norm.weight`, [d.nEmbd], GgmlType.F32, ones(d.nEmbd)),
      tensor(`${p}attn_q_norm.weight`, [d.headDim], GgmlType.F32, ones(d.headDim)),
      tensor(`${p}attn_k_norm.weight`, [d.headDim], GgmlType.F32, ones(d.headDim)),
      tensor(`${p}ffn_norm.weight`, [d.nEmbd], GgmlType.F32, ones(d.nEmbd)),
      ...loraTargets(d).map((t) => weight(`${p}${t.suffix}.weight`, t.nIn, t.nOut)),
    );
  }
  const eos = vocab.idOf("<|im_end|>");
  const pad = vocab.idOf("<|endoftext|>");
  const metadata: Record<string, GgufEntry> = {
    "general.architecture": gguf.str("qwen3"),
    "general.name": gguf.str(opts.name),
    "general.file_type": gguf.u32(weightType === GgmlType.F16 ? 1 : 0),
    "qwen3.context_length": gguf.u32(d.contextLength),
    "qwen3.embedding_length": gguf.u32(d.nEmbd),
    "qwen3.block_count": gguf.u32(d.nLayer),
    "qwen3.feed_forward_length": gguf.u32(d.nFf),
    "qwen3.attention.head_count": gguf.u32(d.nHead),
    "qwen3.attention.head_count_kv": gguf.u32(d.nHeadKv),
    "qwen3.attention.key_length": gguf.u32(d.headDim),
    "qwen3.attention.value_length": gguf.u32(d.headDim),
    "qwen3.attention.layer_norm_rms_epsilon": gguf.f32(1e-6),
    "qwen3.rope.freq_base": gguf.f32(1_000_000),
    "tokenizer.ggml.model": gguf.str("gpt2"),
    "tokenizer.ggml.pre": gguf.str("qwen2"),
    "tokenizer.ggml.tokens": gguf.strings(vocab.tokens),
    "tokenizer.ggml.token_type": gguf.i32s(vocab.tokenTypes),
    "tokenizer.ggml.merges": gguf.strings(vocab.merges),
    "tokenizer.ggml.eos_token_id": gguf.u32(eos),
    "tokenizer.ggml.padding_token_id": gguf.u32(pad),
    "tokenizer.ggml.bos_token_id": gguf.u32(pad),
    "tokenizer.ggml.add_bos_token": gguf.bool(false),
    "tokenizer.chat_template": gguf.str(QWEN3_CHAT_TEMPLATE),
  };
  return { metadata, tensors };
}

/**
 * A LoRA adapter over every attention and MLP projection: W' = W + (alpha / r) * B A.
 * Both factors are random (a trained adapter's B is not zero), sized so the adapter visibly moves the
 * next-token distribution.
 */
export function qwen3LoraFile(opts: { name: string; dims: Qwen3Dims; rank: number; seed: number; strength: number }) {
  const { dims: d, rank } = opts;
  const root = new SeededRandom(opts.seed);
  const tensors: GgufTensorSource[] = [];
  for (let l = 0; l < d.nLayer; l++) {
    for (const t of loraTargets(d)) {
      const base = `blk.${l}.${t.suffix}.weight`;
      tensors.push(
        tensor(`${base}.lora_a`, [t.nIn, rank], GgmlType.F32, () => gaussian(root.fork(`${base}.a`), t.nIn * rank, 1 / Math.sqrt(t.nIn))),
        tensor(`${base}.lora_b`, [rank, t.nOut], GgmlType.F32, () => gaussian(root.fork(`${base}.b`), rank * t.nOut, opts.strength / Math.sqrt(rank))),
      );
    }
  }
  const metadata: Record<string, GgufEntry> = {
    "general.architecture": gguf.str("qwen3"),
    "general.type": gguf.str("adapter"),
    "general.name": gguf.str(opts.name),
    "adapter.type": gguf.str("lora"),
    "adapter.lora.alpha": gguf.f32(rank),
  };
  return { metadata, tensors };
}
