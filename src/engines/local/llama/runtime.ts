import { availableParallelism } from "node:os";
import { getLlama, LlamaLogLevel, type Llama } from "node-llama-cpp";
import type { EngineLogger } from "../../../engine/index.js";

export type GpuSetting = "auto" | "cuda" | "vulkan" | "metal" | false;

export interface RuntimeOptions {
  gpu: GpuSetting;
  /**
   * Threads for evaluation; defaults to the machine's cores (node-llama-cpp's default of 4 is 60x slower on 2 cores).
   */
  threads?: number;
  logger: EngineLogger;
}

/**
 * llama.cpp warnings about what the server chose on purpose, logged at debug: every context of a sliding-window model
 * reports the full-size SWA cache (model.swaFullCache), and every LoRA tensor over a repacked CPU weight its fallback.
 */
const CHOSEN = [/using full-size SWA cache/, /cannot use buft 'CPU_REPACK', fallback to CPU/];

/**
 * Recent llama.cpp error lines. llama.cpp reports why it refused a file only in its log
 * (node-llama-cpp throws "Failed to initialize LoRA adapter"), so errors are enriched from here.
 */
export class LlamaLogTail {
  private entries: { seq: number; line: string }[] = [];
  private seq = 0;
  record(line: string) {
    this.entries.push({ seq: this.seq++, line: line.trim() });
    if (this.entries.length > 20) this.entries.shift();
  }
  mark(): number {
    return this.seq;
  }
  since(mark: number): string {
    return this.entries
      .filter((e) => e.seq >= mark)
      .map((e) => e.line)
      .join(" | ");
  }
}

export async function startLlama(
  opts: RuntimeOptions,
): Promise<{ llama: Llama; threads: number; errors: LlamaLogTail }> {
  const threads = opts.threads ?? availableParallelism();
  const errors = new LlamaLogTail();
  const llama = await getLlama({
    gpu: opts.gpu,
    build: "never", // no compiler downloads at run time: the prebuilt binaries ship in the npm packages
    skipDownload: true,
    progressLogs: false,
    // 0 = no sharing of a thread budget between contexts: each context always runs with `threads`.
    // A shared budget changes a context's thread count with what else exists, and with it the float
    // reduction order: the same tokens then give measurably different log-probs.
    maxThreads: 0,
    logLevel: LlamaLogLevel.warn,
    // node-llama-cpp logs to stdout by default, which belongs to the stdio transport
    logger: (level, message) => {
      const text = message.trimEnd();
      if (!text) return;
      if (level === LlamaLogLevel.error || level === LlamaLogLevel.fatal) {
        errors.record(text);
        opts.logger.error({ component: "llama.cpp" }, text);
      } else if (level === LlamaLogLevel.warn && !CHOSEN.some((r) => r.test(text)))
        opts.logger.warn({ component: "llama.cpp" }, text);
      else opts.logger.debug({ component: "llama.cpp" }, text);
    },
  });
  opts.logger.info({ gpu: llama.gpu, threads, cpuMathCores: llama.cpuMathCores }, "llama.cpp runtime ready");
  return { llama, threads, errors };
}
