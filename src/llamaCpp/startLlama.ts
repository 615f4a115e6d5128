import { availableParallelism } from "node:os";
import { getLlama, getLlamaGpuTypes, LlamaLogLevel, type Llama } from "node-llama-cpp";
import type { EngineLogger } from "../engine/index.js";
import {
  BINDING_BUILD_COMMAND,
  BindingUnavailableError,
  sourceBindingDir,
  sourceBindingFile,
  type BindingSetting,
} from "./binding.js";
import { BindingModuleError, loadLlamaFromBindingFolder } from "./bindingFolder.js";

export type GpuSetting = "auto" | "cuda" | "vulkan" | "metal" | false;

export interface RuntimeOptions {
  gpu: GpuSetting;
  /**
   * Threads for evaluation; defaults to the machine's cores (node-llama-cpp's default of 4 is 60x slower on 2 cores).
   */
  threads?: number;
  /** Which native binding to load (model.binding; default "prebuilt"): see binding.ts. */
  binding?: BindingSetting;
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

/** The binding a process loaded: "prebuilt" or "source" (with its folder). */
export interface LoadedBinding {
  kind: "prebuilt" | "source";
  folder?: string;
}

/**
 * The binding this process loaded first. One process loads one binding: the source build's libraries share their
 * names (libggml-base.so, ...) with the prebuilt's, and the dynamic loader would hand the second binding the first
 * one's libraries.
 */
let processBinding: LoadedBinding["kind"] | undefined;

export interface LoadLlamaOptions {
  binding: BindingSetting;
  gpu: GpuSetting;
  maxThreads: number;
  logLevel: LlamaLogLevel;
  logger: (level: LlamaLogLevel, message: string) => void;
  /** Where the choice of binding is told (info when `auto` falls back, warn when the source build fails to load). */
  log?: EngineLogger;
}

/**
 * Starts llama.cpp with the binding `binding` asks for: the prebuilt one through node-llama-cpp's `getLlama` (never
 * building, never downloading), the source build from its cache folder (scripts/node-llama-cpp-build.sh). `auto` falls
 * back to the prebuilt one, which always works; `source` throws `BindingUnavailableError` instead.
 */
export async function loadLlama(opts: LoadLlamaOptions): Promise<{ llama: Llama; binding: LoadedBinding }> {
  const source = await sourceBindingChoice(opts);
  if (source) {
    try {
      const llama = await loadLlamaFromBindingFolder(source, opts);
      processBinding = "source";
      return { llama, binding: { kind: "source", folder: source } };
    } catch (err) {
      // once its libraries are in the process, the prebuilt binding would be handed them: no fallback then
      if (!(err instanceof BindingModuleError)) processBinding = "source";
      if (opts.binding === "source" || !(err instanceof BindingModuleError))
        throw new BindingUnavailableError(
          `the build in ${source} does not start: ${(err as Error).message}`,
          opts.binding,
        );
      opts.log?.warn(
        { component: "llama.cpp", binding: source, err: (err as Error).message },
        "the source-built node-llama-cpp binding does not load; using the prebuilt one",
      );
    }
  }
  if (processBinding === "source")
    throw new Error(
      "this process already loaded the source-built node-llama-cpp binding: one process loads one binding (model.binding)",
    );
  const llama = await getLlama({
    gpu: opts.gpu,
    build: "never", // no compiler downloads at run time: the prebuilt binaries ship in the npm packages
    skipDownload: true,
    progressLogs: false,
    maxThreads: opts.maxThreads,
    logLevel: opts.logLevel,
    logger: opts.logger,
  });
  processBinding = "prebuilt";
  return { llama, binding: { kind: "prebuilt" } };
}

/** The source build's folder when `opts.binding` asks for it and it can be used here; else undefined (prebuilt). */
async function sourceBindingChoice(opts: LoadLlamaOptions): Promise<string | undefined> {
  if (opts.binding === "prebuilt") return undefined;
  const refuse = (reason: string): undefined => {
    if (opts.binding === "source") throw new BindingUnavailableError(reason);
    opts.log?.info({ component: "llama.cpp" }, `model.binding "auto": ${reason}; using the prebuilt binding`);
    return undefined;
  };
  // the source build is CPU-only: a GPU the prebuilt binaries would use wins
  const gpus =
    opts.gpu === false ? [] : opts.gpu === "auto" ? (await getLlamaGpuTypes("supported")).filter(Boolean) : [opts.gpu];
  if (gpus.length) return refuse(`the source build is CPU-only and model.gpu selects ${gpus.join(", ")}`);
  const { dir } = sourceBindingDir();
  if (!sourceBindingFile(dir))
    return refuse(
      `this machine has no source-built node-llama-cpp binding (${dir}; \`${BINDING_BUILD_COMMAND}\` builds it)`,
    );
  if (processBinding === "prebuilt")
    return refuse("this process already loaded the prebuilt binding (one process loads one binding)");
  return dir;
}

export async function startLlama(
  opts: RuntimeOptions,
): Promise<{ llama: Llama; threads: number; errors: LlamaLogTail; binding: LoadedBinding }> {
  const threads = opts.threads ?? availableParallelism();
  const errors = new LlamaLogTail();
  const { llama, binding } = await loadLlama({
    binding: opts.binding ?? "prebuilt",
    gpu: opts.gpu,
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
    log: opts.logger,
  });
  opts.logger.info(
    { gpu: llama.gpu, threads, cpuMathCores: llama.cpuMathCores, binding: binding.kind, bindingFolder: binding.folder },
    "llama.cpp runtime ready",
  );
  return { llama, threads, errors, binding };
}
