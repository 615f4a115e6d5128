import { LlamaLogLevel, type Llama, type LlamaModel, type Token } from "node-llama-cpp";
import type { BindingSetting } from "../../../llamaCpp/binding.js";
import { loadLlama } from "../../../llamaCpp/startLlama.js";
import type { CacheReplay } from "../kv/DecodeLog.js";
import { replayedNextTokenLogProbs } from "./replay.js";

/** An adapter as the reference applies it: its own file and scale, never a version id of the engine's. */
export interface PlainAdapter {
  readonly filePath: string;
  readonly scale: number;
}

export interface PlainReferenceOptions {
  modelPath: string;
  /** Same threads, context size and batch size as the engine under test: llama.cpp's numerics depend on them. */
  threads: number;
  contextSize: number;
  batchSize?: number;
  /** As the engine's `swaFullCache` (default false): a full and a window-sized SWA cache round differently. */
  swaFullCache?: boolean;
  /** As the engine's contexts (false when batch-invariant, the default): the two attentions round differently. */
  flashAttention?: boolean | "auto";
  /** As the engine's `binding` (default "prebuilt"): one process loads one binding, and their numerics differ. */
  binding?: BindingSetting;
}

/**
 * The correctness reference that shares no code with the engine's sessions: its own llama.cpp runtime and
 * model loaded from the base file, and for every question a fresh context created by node-llama-cpp's public
 * API with the adapters given by file path and scale (only the replay of a cache's decodes, plain data, is
 * shared with the engine's own reference). An alias resolving to the wrong version, a wrong scale or a wrong
 * copy of a file in the engine then shows as a difference instead of being reproduced on both sides.
 */
export class PlainReference {
  private constructor(
    private readonly llama: Llama,
    private readonly model: LlamaModel,
    private readonly opts: Required<PlainReferenceOptions>,
  ) {}

  static async load(options: PlainReferenceOptions): Promise<PlainReference> {
    const { llama } = await loadLlama({
      binding: options.binding ?? "prebuilt",
      gpu: false,
      maxThreads: 0, // every context runs with exactly `threads`, as the engine's do
      logLevel: LlamaLogLevel.error,
      logger: (_level, message) => void process.stderr.write(message.endsWith("\n") ? message : `${message}\n`),
    });
    const model = await llama.loadModel({ modelPath: options.modelPath, gpuLayers: 0 });
    return new PlainReference(llama, model, {
      batchSize: 512,
      swaFullCache: false,
      flashAttention: false,
      binding: "prebuilt",
      ...options,
    });
  }

  tokenize(text: string): Token[] {
    return this.model.tokenize(text, false);
  }

  /**
   * Log-probs of the token after `tokens` under the base with `adapters` applied from the start, or, given
   * `activatedFrom` (an activated LoRA's invocation point, found by the caller), under the base before that
   * position and the adapters from it. The batch split follows `replay` (a session's `cacheReplay()`: data, no
   * engine code) when given, else all but the last token in one decode; then the rest; then the last token.
   */
  async nextTokenLogProbs(
    adapters: readonly PlainAdapter[],
    tokens: readonly Token[],
    replay?: CacheReplay,
    activatedFrom?: number,
  ): Promise<Map<number, number>> {
    const context = await this.context(adapters);
    const base = activatedFrom === undefined ? undefined : await this.context([]);
    try {
      return await replayedNextTokenLogProbs(
        context.getSequence(),
        tokens,
        replay,
        base && { base: base.getSequence(), from: activatedFrom! },
      );
    } finally {
      await context.dispose();
      await base?.dispose();
    }
  }

  private context(adapters: readonly PlainAdapter[]) {
    return this.model.createContext({
      contextSize: this.opts.contextSize,
      batchSize: this.opts.batchSize,
      threads: this.opts.threads,
      swaFullCache: this.opts.swaFullCache,
      flashAttention: this.opts.flashAttention,
      sequences: 1,
      lora: { adapters: adapters.map((a) => ({ filePath: a.filePath, scale: a.scale })) },
    });
  }

  async dispose(): Promise<void> {
    await this.model.dispose();
    await this.llama.dispose();
  }
}
