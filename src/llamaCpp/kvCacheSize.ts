import { metaNumber, metaString, type GgufFile } from "../gguf/index.js";

/*
 * The KV cache llama.cpp allocates for a context, from the GGUF header alone (no llama.cpp in the process): the rules
 * of node-llama-cpp 3.21's context creation (LlamaContext.ts) and of the llama.cpp it builds
 * (llama-context.cpp, llama-kv-cache-iswa.cpp, llama-kv-cache.cpp, models/*.cpp).
 */

/** llama.cpp pads context and SWA cache sizes to this many cells (GGML_PAD in llama-context.cpp and -kv-cache-iswa.cpp). */
const CELL_PAD = 256;
/** F16, the type of the KV cache's keys and values (node-llama-cpp's default, which the engine keeps). */
const F16_BYTES = 2;

/**
 * Architectures whose sliding-window layers come in a period when the GGUF gives no per-layer pattern: the period
 * (`sliding_window_pattern`, a number, overrides it), whether the first layer of each period is the full one
 * (`set_swa_pattern`'s `dense_first`), and the window when the GGUF has none. One without a period here and without
 * a per-layer pattern in its GGUF is counted with every layer full-size.
 */
const SWA_PERIODS: Record<string, { period: number; denseFirst?: boolean; window?: number }> = {
  gemma2: { period: 2, window: 4096 },
  gemma3: { period: 6 },
  gemma3n: { period: 5 },
  "gemma-embedding": { period: 6 },
  cohere2: { period: 4 },
  olmo2: { period: 4 },
  exaone4: { period: 4 },
  llama4: { period: 4, window: 8192 },
  afmoe: { period: 4 },
  plamo3: { period: 8 },
  "gpt-oss": { period: 2 },
  smallthinker: { period: 4, denseFirst: true },
};
/** Architectures whose layers past a fixed count reuse earlier layers' KV (`n_layer_kv_from_start`) whatever the GGUF says. */
const KV_LAYERS_FROM_START: Record<string, number> = { gemma3n: 20 };

/** How the engine creates each context (`ContextSizes` and its sequences). */
export interface KvContextShape {
  /** Tokens per sequence (the engine's `model.contextSize`, at most the trained context). */
  contextSize: number;
  sequences: number;
  batchSize: number;
  swaFullCache: boolean;
}

export interface KvCacheSize {
  /** Bytes of one context's KV cache. */
  bytes: number;
  /** Cells per sequence of a full-attention layer, and of a sliding-window one (undefined: no such layer). */
  cells: { full: number; swa: number | undefined };
  layers: { full: number; swa: number };
  /** The sliding window, when the model has sliding-window layers. */
  window: number | undefined;
}

const pad = (n: number, to = CELL_PAD) => Math.ceil(n / to) * to;

/** One value of a per-layer key: an array's item, or the scalar every layer shares. */
function perLayer(file: GgufFile, key: string, layer: number): number | undefined {
  const value = file.metadata.get(key);
  if (value !== null && typeof value === "object" && "items" in value) {
    const item = value.items[layer];
    return typeof item === "bigint" ? Number(item) : typeof item === "number" ? item : undefined;
  }
  return metaNumber(file, key);
}

/** Which layers attend within the window, as llama.cpp's `load_arch_hparams` sets them; undefined: none do. */
function swaLayers(file: GgufFile, arch: string, layers: number): { window: number; isSwa: boolean[] } | undefined {
  const known = SWA_PERIODS[arch];
  const window = metaNumber(file, `${arch}.attention.sliding_window`) ?? known?.window ?? 0;
  if (window <= 0) return undefined;
  const pattern = file.metadata.get(`${arch}.attention.sliding_window_pattern`);
  if (pattern !== null && typeof pattern === "object" && "items" in pattern)
    return { window, isSwa: Array.from({ length: layers }, (_, i) => Boolean(pattern.items[i])) };
  if (!known) return undefined;
  const period = metaNumber(file, `${arch}.attention.sliding_window_pattern`) ?? known.period;
  const isSwa = Array.from({ length: layers }, (_, i) =>
    period === 0 ? true : known.denseFirst ? i % period !== 0 : i % period < period - 1,
  );
  return { window, isSwa };
}

/**
 * The KV cache llama.cpp allocates for one context of `shape`: each sequence is a stream of its own (node-llama-cpp
 * creates contexts with `kv_unified` false) of `n_ctx_seq` cells in full-attention layers, and, unless
 * `swaFullCache`, of min(n_ctx_seq, window + ubatch) cells padded to 256 in sliding-window layers (node-llama-cpp adds
 * one token to the batch of such a model). Keys and values are F16; with flash attention off llama.cpp would size the
 * values of every layer by the widest one, which only matters for models whose layers differ in head size.
 */
export function kvCacheSize(file: GgufFile, shape: KvContextShape): KvCacheSize {
  const arch = metaString(file, "general.architecture") ?? "";
  const layers = metaNumber(file, `${arch}.block_count`) ?? 0;
  const trained = metaNumber(file, `${arch}.context_length`) ?? Infinity;
  const heads = metaNumber(file, `${arch}.attention.head_count`) ?? 1;
  const embedding = metaNumber(file, `${arch}.embedding_length`) ?? 0;
  const swa = swaLayers(file, arch, layers);
  // node-llama-cpp: a context size under the trained one is padded up; the context holds every sequence's cells
  const padded = pad(shape.contextSize);
  const perSequence = shape.contextSize <= trained && padded < trained ? padded : shape.contextSize;
  const batch = Math.max(shape.batchSize, shape.sequences) + (swa && !shape.swaFullCache ? 1 : 0);
  // llama.cpp: n_ctx padded, then split into one stream per sequence, each padded again
  const nCtxSeq = pad(Math.floor(pad(perSequence * shape.sequences) / shape.sequences));
  const swaCells = swa && (shape.swaFullCache ? nCtxSeq : pad(Math.min(nCtxSeq, swa.window + batch)));
  const shared = metaNumber(file, `${arch}.attention.shared_kv_layers`);
  const kvLayers = KV_LAYERS_FROM_START[arch] ?? (shared ? layers - shared : layers);
  let bytes = 0;
  const counts = { full: 0, swa: 0 };
  for (let i = 0; i < Math.min(layers, kvLayers); i++) {
    const isSwa = swa?.isSwa[i] ?? false;
    const kvHeads =
      perLayer(file, `${arch}.attention.head_count_kv`, i) ??
      perLayer(file, `${arch}.attention.head_count`, i) ??
      heads;
    if (kvHeads === 0) continue; // a recurrent layer: no KV cells
    const suffix = isSwa ? "_swa" : "";
    const keyLength =
      metaNumber(file, `${arch}.attention.key_length${suffix}`) ??
      metaNumber(file, `${arch}.attention.key_length`) ??
      embedding / heads;
    const valueLength =
      metaNumber(file, `${arch}.attention.value_length${suffix}`) ??
      metaNumber(file, `${arch}.attention.value_length`) ??
      embedding / heads;
    const cells = isSwa && swaCells ? swaCells : nCtxSeq;
    bytes += (keyLength + valueLength) * kvHeads * cells * shape.sequences * F16_BYTES;
    counts[isSwa ? "swa" : "full"]++;
  }
  return {
    bytes,
    cells: { full: nCtxSeq, swa: swaCells || undefined },
    layers: counts,
    window: swa?.window,
  };
}
