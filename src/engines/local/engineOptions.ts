import type { CacheStrategy, EngineLogger } from "../../engine/index.js";
import type { BindingSetting } from "../../llamaCpp/binding.js";
import type { GpuSetting } from "../../llamaCpp/startLlama.js";
import type { ChatTemplateSetting } from "../../llamaCpp/loadModel.js";

/** How the local engine (node-llama-cpp in this process) loads its base model. */
export interface LocalEngineOptions {
  modelPath: string;
  /** "auto" lets node-llama-cpp pick CUDA, Vulkan or Metal when present; false forces CPU. */
  gpu?: GpuSetting;
  /** Layers to offload to the GPU ("auto" fits what the VRAM holds). */
  gpuLayers?: number | "auto" | "max";
  /** Evaluation threads; defaults to the machine's cores. */
  threads?: number;
  /**
   * node-llama-cpp's native binding (default "prebuilt"): "source" loads the one scripts/node-llama-cpp-build.sh built
   * for this machine's CPU with OpenMP (an error when there is none), "auto" that one when present and loadable, else
   * the prebuilt one.
   */
  binding?: BindingSetting;
  /** Tokens of context per session (per sequence). */
  contextSize?: number;
  /**
   * Sequences per llama.cpp context. A session's active lane holds one; under `reuse`, idle lanes (a
   * session's caches under weights it left) hold the rest until somebody needs them.
   */
  sequencesPerContext?: number;
  /** Contexts the engine may create; sessions beyond contexts x sequences are refused. */
  maxContexts?: number;
  /** What a weight switch does with the KV cache. */
  cache?: CacheOptions;
  /** Tokens per decode batch. */
  batchSize?: number;
  /**
   * Sliding-window (SWA) models only (Gemma 2/3/4, ...): keep every token's cells in the SWA layers' cache too, rather
   * than a window-sized cache (a third of the KV memory on Gemma 3, as exact against a replay), whose freed cells make
   * a cut further back than the window start the cache again, and are reused in an order that depends on the
   * session's history (so its numbers do too). Default: as `batchInvariant`. See docs/models.md "Sliding-window
   * models" for the measurements.
   */
  swaFullCache?: boolean;
  /**
   * A session's tokens independent of the server's load (default true; model.batchInvariant): see DecodeRounds and
   * docs/models.md "The same tokens under any load".
   */
  batchInvariant?: boolean;
  /** How conversations are rendered (default "auto"; model.chatTemplate): see ModelLoadOptions. */
  chatTemplate?: ChatTemplateSetting;
  /**
   * Read the model's metadata in a child process before loading it (default true): a file that would abort
   * llama.cpp then kills only the probe. Costs a fraction of a second (vocabulary only, no weights).
   */
  probe?: boolean;
  logger: EngineLogger;
}

export interface CacheOptions {
  /** Default "reuse". */
  strategy?: CacheStrategy;
  /**
   * Where idle lanes are saved when their sequence is needed; null keeps no spilled states (they are dropped). Default:
   * a private temporary folder.
   */
  spillDir?: string | null;
  /** Disk budget for spilled states (shared prompt prefixes included); the oldest go first. Default 512 MiB. */
  spillBytes?: number;
  /**
   * `reuse` only: save the KV of each weight set's prompt prefix (system prompt and function docs) once and start
   * new caches from it (kept in the spill store). Default true.
   */
  sharedPrefixes?: boolean;
  /**
   * `reuse` only: while no caller's evaluation runs (a tool is running, or between calls), bring the caches a
   * session was told it needs next up to its history. Default true.
   */
  background?: boolean;
  /**
   * How long one background decode should take: a caller waits at most one such decode for background work.
   * Its tokens follow from the measured speed (at least 64, at most `batchSize`). Default 50 ms.
   */
  backgroundDecodeMs?: number;
}
