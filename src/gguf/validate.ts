import { GgmlType, GgufValueType, type GgufTensorInfo } from "./format.js";
import { metaNumber, metaString, type GgufFile } from "./reader.js";

/**
 * Checks that stop a file before llama.cpp sees it. llama.cpp aborts the whole process (not a catchable
 * error) on some missing hyperparameters, so the ones it needs are required here.
 */

/** Architectures whose llama.cpp loader reads `<arch>.feed_forward_length` unconditionally. */
const DENSE_FFN_ARCHITECTURES = new Set([
  "llama",
  "qwen2",
  "qwen3",
  "mistral",
  "gemma",
  "gemma2",
  "gemma3",
  "phi3",
  "granite",
  "olmo2",
]);
/** Architectures llama.cpp always builds with a sliding-window KV cache. */
const SWA_ARCHITECTURES = new Set(["gemma4", "gemma3n"]);
const MAX_REASONABLE = { blocks: 1024, embedding: 1 << 17, heads: 1 << 12, context: 1 << 24 };

export function baseModelProblems(file: GgufFile): string[] {
  const problems: string[] = [];
  const arch = metaString(file, "general.architecture");
  if (!arch) return ["general.architecture is missing"];
  if (metaString(file, "general.type") === "adapter") problems.push("this is an adapter file, not a base model");
  const need = (key: string, max: number, min = 1) => {
    const v = metaNumber(file, key);
    if (v === undefined) problems.push(`${key} is missing`);
    else if (!Number.isInteger(v) || v < min || v > max) problems.push(`${key} = ${v} is out of range`);
    return v;
  };
  need(`${arch}.context_length`, MAX_REASONABLE.context);
  const embedding = need(`${arch}.embedding_length`, MAX_REASONABLE.embedding);
  need(`${arch}.block_count`, MAX_REASONABLE.blocks);
  const heads = need(`${arch}.attention.head_count`, MAX_REASONABLE.heads);
  const kvHeads = metaNumber(file, `${arch}.attention.head_count_kv`);
  if (kvHeads !== undefined && heads !== undefined && (kvHeads < 1 || heads % kvHeads !== 0)) {
    problems.push(`${arch}.attention.head_count_kv = ${kvHeads} does not divide head_count = ${heads}`);
  }
  if (DENSE_FFN_ARCHITECTURES.has(arch)) need(`${arch}.feed_forward_length`, 1 << 20);
  if (SWA_ARCHITECTURES.has(arch)) {
    // llama.cpp asserts (aborting the process) that a sliding-window model has at least one sliding-window layer
    const pattern = file.metadata.get(`${arch}.attention.sliding_window_pattern`);
    if (pattern && typeof pattern === "object" && "items" in pattern && !pattern.items.some(Boolean)) {
      problems.push(`${arch}.attention.sliding_window_pattern marks no layer as sliding-window`);
    }
  }
  if (!metaString(file, "tokenizer.ggml.model")) problems.push("tokenizer.ggml.model is missing");
  const tokens = file.metadata.get("tokenizer.ggml.tokens");
  const vocab = tokens && typeof tokens === "object" && "items" in tokens ? tokens.items.length : 0;
  if (vocab === 0) problems.push("tokenizer.ggml.tokens is missing or empty");
  const embd = file.tensors.find((t) => t.name === "token_embd.weight");
  if (!embd) problems.push("tensor token_embd.weight is missing");
  else if (embedding !== undefined && vocab > 0 && (embd.shape[0] !== embedding || embd.shape[1] !== vocab)) {
    problems.push(
      `token_embd.weight has shape [${embd.shape}] but embedding_length x vocabulary is [${embedding},${vocab}]`,
    );
  }
  return problems;
}

const LORA_TENSOR_TYPES = new Set<number>([GgmlType.F32, GgmlType.F16, GgmlType.BF16, 8 /* Q8_0 */]);
const MAX_LISTED = 5;

/** llama.cpp's key for an activated LoRA's invocation sequence (token ids of the base vocabulary, UINT32). */
export const ALORA_INVOCATION_KEY = "adapter.alora.invocation_tokens";

export interface LoraShape {
  rank: number;
  alpha: number | undefined;
  targets: number;
  /** An activated LoRA's invocation sequence; undefined for an ordinary LoRA. */
  invocationTokens: number[] | undefined;
}

/** Tokens in a model's vocabulary (`tokenizer.ggml.tokens`); Infinity for a file that lists none. */
export function vocabularySize(model: GgufFile): number {
  const vocab = model.metadata.get("tokenizer.ggml.tokens");
  return vocab && typeof vocab === "object" && "items" in vocab ? vocab.items.length : Infinity;
}

/**
 * An activated LoRA's invocation sequence as llama.cpp reads it (an array of UINT32 token ids of the base, checked
 * against a vocabulary of `size` tokens), or why it cannot be one.
 */
export function invocationTokens(adapter: GgufFile, size: number): { tokens?: number[]; problem?: string } {
  const value = adapter.metadata.get(ALORA_INVOCATION_KEY);
  if (value === undefined) return {};
  if (typeof value !== "object" || !("items" in value))
    return { problem: `${ALORA_INVOCATION_KEY} is not an array (llama.cpp needs an array of UINT32 token ids)` };
  if (value.itemType !== GgufValueType.UINT32)
    return {
      problem: `${ALORA_INVOCATION_KEY} has items of GGUF type ${value.itemType}; llama.cpp needs UINT32 token ids`,
    };
  if (!value.items.length)
    return { problem: `${ALORA_INVOCATION_KEY} is empty: an activated LoRA needs its invocation sequence` };
  const tokens = value.items.map(Number);
  const outside = tokens.filter((t) => !Number.isInteger(t) || t < 0 || t >= size);
  if (outside.length)
    return {
      problem: `${ALORA_INVOCATION_KEY} names token ids outside the base vocabulary of ${size}: ${outside.slice(0, MAX_LISTED).join(", ")}`,
    };
  return { tokens };
}

/** Problems that make `adapter` unusable with `base`; an empty list means llama.cpp can load it safely. */
export function loraProblems(
  adapter: GgufFile,
  base: GgufFile,
): { problems: string[]; incompatible: boolean; shape?: LoraShape } {
  const problems: string[] = [];
  if (metaString(adapter, "general.type") !== "adapter")
    problems.push(`general.type is "${metaString(adapter, "general.type") ?? "(missing)"}", expected "adapter"`);
  if (metaString(adapter, "adapter.type") !== "lora")
    problems.push(`adapter.type is "${metaString(adapter, "adapter.type") ?? "(missing)"}", expected "lora"`);
  if (problems.length) return { problems, incompatible: false };

  const mismatches: string[] = [];
  const adapterArch = metaString(adapter, "general.architecture");
  const baseArch = metaString(base, "general.architecture");
  if (adapterArch !== baseArch)
    mismatches.push(`architecture is ${adapterArch ?? "(missing)"}, the base model is ${baseArch}`);

  const baseTensors = new Map(base.tensors.map((t) => [t.name, t]));
  const pairs = new Map<string, { a?: GgufTensorInfo; b?: GgufTensorInfo }>();
  for (const t of adapter.tensors) {
    const m = /^(.*)\.lora_([ab])$/.exec(t.name);
    if (!m) {
      mismatches.push(`tensor ${t.name} is neither a .lora_a nor a .lora_b tensor`);
      continue;
    }
    if (!LORA_TENSOR_TYPES.has(t.type))
      mismatches.push(`tensor ${t.name} has unsupported type ${t.type} (F32, F16, BF16 or Q8_0 expected)`);
    const pair = pairs.get(m[1]!) ?? {};
    pair[m[2] as "a" | "b"] = t;
    pairs.set(m[1]!, pair);
  }
  if (pairs.size === 0) mismatches.push("the adapter has no LoRA tensors");
  const invocation = invocationTokens(adapter, vocabularySize(base));
  if (invocation.problem) mismatches.push(invocation.problem);
  let rank = 0;
  for (const [target, { a, b }] of pairs) {
    if (!a || !b) {
      mismatches.push(`${target} has a lora_${a ? "a" : "b"} without its lora_${a ? "b" : "a"}`);
      continue;
    }
    const w = baseTensors.get(target);
    if (!w) {
      mismatches.push(`${target} does not exist in the base model`);
      continue;
    }
    if (a.shape.length !== 2 || b.shape.length !== 2 || a.shape[1] !== b.shape[0]) {
      mismatches.push(`${target}: lora_a [${a.shape}] and lora_b [${b.shape}] do not share a rank`);
    } else if (a.shape[0] !== w.shape[0] || b.shape[1] !== w.shape[1]) {
      mismatches.push(`${target}: LoRA maps [${a.shape[0]}] -> [${b.shape[1]}] but the base weight is [${w.shape}]`);
    }
    rank = Math.max(rank, a.shape[1] ?? 0);
  }
  if (mismatches.length > MAX_LISTED)
    mismatches.splice(MAX_LISTED, mismatches.length - MAX_LISTED, `and ${mismatches.length - MAX_LISTED} more`);
  return {
    problems: mismatches,
    incompatible: mismatches.length > 0,
    shape: {
      rank,
      alpha: metaNumber(adapter, "adapter.lora.alpha"),
      targets: pairs.size,
      invocationTokens: invocation.tokens,
    },
  };
}
