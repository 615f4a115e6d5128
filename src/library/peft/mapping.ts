/**
 * HF/PEFT module names -> GGUF tensor names, for the decoder families whose projections convert to GGUF
 * unchanged (gemma3, qwen2, qwen3) or with llama.cpp's q/k row permutation (llama, granite: convert_hf_to_gguf.py's
 * LlamaModel.permute, which reorders each head's rows from HF's rotate-half layout to the interleaved one).
 */

/** Projection module -> GGUF tensor suffix, in the order tensors are written. */
export const MODULE_TO_GGUF: Readonly<Record<string, { block: "self_attn" | "mlp"; gguf: string }>> = {
  q_proj: { block: "self_attn", gguf: "attn_q" },
  k_proj: { block: "self_attn", gguf: "attn_k" },
  v_proj: { block: "self_attn", gguf: "attn_v" },
  o_proj: { block: "self_attn", gguf: "attn_output" },
  gate_proj: { block: "mlp", gguf: "ffn_gate" },
  up_proj: { block: "mlp", gguf: "ffn_up" },
  down_proj: { block: "mlp", gguf: "ffn_down" },
};
const MODULE_ORDER = Object.keys(MODULE_TO_GGUF);

/** GGUF architectures the importer knows, and whether their conversion permutes q/k rows. */
export const PEFT_ARCHITECTURES: Readonly<Record<string, { permuteQK: boolean }>> = {
  llama: { permuteQK: true },
  granite: { permuteQK: true },
  // convert_hf_to_gguf.py's Gemma3Model keeps the projections as they are (it adds 1 to the norms only)
  gemma3: { permuteQK: false },
  qwen2: { permuteQK: false },
  qwen3: { permuteQK: false },
};

export interface MappedTensor {
  /** The base weight the pair adapts, e.g. `blk.3.attn_q.weight`. */
  readonly target: string;
  readonly factor: "a" | "b";
  /** HF module, e.g. `q_proj` (or `lm_head`). */
  readonly module: string;
  readonly layer: number | undefined;
  /** Sort key: layers in order, modules in MODULE_TO_GGUF order, lm_head last. */
  readonly order: number;
}

// Saved PEFT files use `base_model.model.model.layers...lora_A.weight`; in-memory state dicts add the adapter
// name (`lora_A.default.weight`); some tools strip the `base_model.model.` prefix.
const LAYER_NAME =
  /^(?:base_model\.model\.)?(?:model\.)?layers\.(\d+)\.(self_attn|mlp)\.([a-z_]+)\.lora_([AB])(?:\.default)?\.weight$/;
const HEAD_NAME = /^(?:base_model\.model\.)?lm_head\.lora_([AB])(?:\.default)?\.weight$/;

export function mapPeftTensorName(name: string): MappedTensor | undefined {
  const head = HEAD_NAME.exec(name);
  if (head)
    return {
      target: "output.weight",
      factor: head[1] === "A" ? "a" : "b",
      module: "lm_head",
      layer: undefined,
      order: Number.MAX_SAFE_INTEGER,
    };
  const m = LAYER_NAME.exec(name);
  if (!m) return undefined;
  const [, layerText, block, module, factor] = m;
  const spec = MODULE_TO_GGUF[module!];
  if (!spec || spec.block !== block) return undefined;
  const layer = Number(layerText);
  return {
    target: `blk.${layer}.${spec.gguf}.weight`,
    factor: factor === "A" ? "a" : "b",
    module: module!,
    layer,
    order: layer * MODULE_ORDER.length + MODULE_ORDER.indexOf(module!),
  };
}

/**
 * convert_hf_to_gguf.py's LlamaModel.permute on the rows of a [rows, ...] row-major matrix given as bytes:
 * `w.reshape(nHead, 2, rows / nHead / 2, ...).swapaxes(1, 2).reshape(w.shape)`. For a LoRA pair only
 * lora_B (the output rows) moves: P (B A) = (P B) A. `inverse` undoes it (GGUF -> PEFT export).
 */
export function permuteRowsForRope(bytes: Uint8Array, rows: number, nHead: number, inverse = false): Uint8Array {
  if (rows % (nHead * 2) !== 0) throw new Error(`cannot permute ${rows} rows into ${nHead} heads of rotary pairs`);
  if (bytes.byteLength % rows !== 0) throw new Error(`${bytes.byteLength} bytes do not split into ${rows} rows`);
  const rowBytes = bytes.byteLength / rows;
  const half = rows / nHead / 2;
  const out = new Uint8Array(bytes.byteLength);
  for (let h = 0; h < nHead; h++) {
    for (let i = 0; i < half; i++) {
      for (let t = 0; t < 2; t++) {
        const hf = h * 2 * half + t * half + i;
        const gguf = h * 2 * half + 2 * i + t;
        const [from, to] = inverse ? [gguf, hf] : [hf, gguf];
        out.set(bytes.subarray(from * rowBytes, (from + 1) * rowBytes), to * rowBytes);
      }
    }
  }
  return out;
}

/** GGUF tensor name of a LoRA factor -> the HF module it adapts (the inverse of mapPeftTensorName), or undefined. */
export function ggufToPeftName(name: string): { peft: string; module: string; layer: number | undefined } | undefined {
  const head = /^output\.weight\.lora_([ab])$/.exec(name);
  if (head)
    return {
      peft: `base_model.model.lm_head.lora_${head[1]!.toUpperCase()}.weight`,
      module: "lm_head",
      layer: undefined,
    };
  const m = /^blk\.(\d+)\.([a-z_]+)\.weight\.lora_([ab])$/.exec(name);
  if (!m) return undefined;
  const module = Object.keys(MODULE_TO_GGUF).find((k) => MODULE_TO_GGUF[k]!.gguf === m[2]);
  if (!module) return undefined;
  const layer = Number(m[1]);
  return {
    peft: `base_model.model.model.layers.${layer}.${MODULE_TO_GGUF[module]!.block}.${module}.lora_${m[3]!.toUpperCase()}.weight`,
    module,
    layer,
  };
}
