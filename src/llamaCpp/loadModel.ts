import { resolveChatWrapper, type ChatWrapper, type Llama, type LlamaModel } from "node-llama-cpp";
import type { EngineLogger, ModelInfo } from "../engine/index.js";
import { ModelFileError, NoFunctionCallsError } from "../engine/index.js";
import {
  baseModelProblems,
  GgufFormatError,
  metaString,
  readGgufHeaderAsync,
  sha256File,
  vocabularySize,
  type GgufFile,
} from "../gguf/index.js";
import { JinjaChatWrapper } from "./hermesCalls.js";
import { functionCallProblem, wrapperFacts } from "../modelProbe/callSyntax.js";
import { probeModelInChild } from "../modelProbe/probe.js";
import type { BindingSetting } from "./binding.js";
import { startLlama, type GpuSetting, type LlamaLogTail } from "./startLlama.js";

/** What loading a model needs (the local engine's options carry these). */
export interface ModelLoadOptions {
  modelPath: string;
  gpu?: GpuSetting;
  gpuLayers?: number | "auto" | "max";
  threads?: number;
  binding?: BindingSetting;
  /** Read the file in a throwaway child first (llama.cpp aborts the process on some malformed files); default true. */
  probe?: boolean;
  /**
   * How conversations are rendered (model.chatTemplate): "auto", node-llama-cpp's chat wrapper for the template (its
   * own rendering of the template's format); "jinja", the GGUF's Jinja template itself, each run of text between
   * control tokens tokenized whole, as Hugging Face's `apply_chat_template` then the tokenizer give it.
   */
  chatTemplate?: ChatTemplateSetting;
  logger: EngineLogger;
}

export type ChatTemplateSetting = "auto" | "jinja";

export interface LoadedModel {
  llama: Llama;
  llamaModel: LlamaModel;
  header: GgufFile;
  info: ModelInfo;
  threads: number;
  /** llama.cpp's recent error lines, to explain a refused adapter. */
  errors: LlamaLogTail;
  /** What renders conversations for this model (model.chatTemplate). */
  chatWrapper: ChatWrapper;
}

/**
 * Validates the model file (llama.cpp aborts the process on some bad metadata), then starts llama.cpp and loads it
 * once: the weights, or with `vocabOnly` only its vocabulary and chat template (a remote engine's tokenizer).
 */
export async function loadModel(options: ModelLoadOptions, { vocabOnly = false } = {}): Promise<LoadedModel> {
  const logger = options.logger;
  let header: GgufFile;
  try {
    header = await readGgufHeaderAsync(options.modelPath);
  } catch (err) {
    if (err instanceof GgufFormatError) throw new ModelFileError(options.modelPath, err.reason);
    throw err;
  }
  const problems = baseModelProblems(header);
  if (problems.length) throw new ModelFileError(options.modelPath, problems.join("; "));
  if (options.probe ?? true) {
    const probe = await probeModelInChild(options.modelPath);
    if (!probe.ok) throw new ModelFileError(options.modelPath, probe.reason);
  }

  const { llama, threads, errors } = await startLlama({
    gpu: options.gpu ?? "auto",
    threads: options.threads,
    binding: options.binding,
    logger,
  });
  let llamaModel: LlamaModel;
  const mark = errors.mark();
  try {
    llamaModel = await llama.loadModel({
      modelPath: options.modelPath,
      gpuLayers: options.gpuLayers ?? "auto",
      vocabOnly,
    });
  } catch (err) {
    await llama.dispose();
    const detail = errors.since(mark);
    throw new ModelFileError(
      options.modelPath,
      `llama.cpp could not load it: ${(err as Error).message}${detail ? ` (${detail})` : ""}`,
    );
  }
  let chatWrapper: ChatWrapper;
  try {
    chatWrapper = chatWrapperOf(llamaModel, header, options.chatTemplate ?? "auto");
    const callProblem = functionCallProblem(wrapperFacts(chatWrapper));
    if (callProblem) throw new NoFunctionCallsError(options.modelPath, chatWrapper.wrapperName, callProblem);
  } catch (err) {
    await llamaModel.dispose();
    await llama.dispose();
    throw err;
  }
  const info: ModelInfo = {
    filePath: options.modelPath,
    sha256: await sha256File(options.modelPath),
    architecture: metaString(header, "general.architecture")!,
    name: metaString(header, "general.name"),
    trainContextSize: llamaModel.trainContextSize,
    sizeBytes: header.fileSize,
    chatWrapper: chatWrapper.wrapperName,
    vocabularySize: vocabularySize(header),
  };
  return { llama, llamaModel, header, info, threads, errors, chatWrapper };
}

/** The chat wrapper model.chatTemplate asks for; "jinja" on a file without a template names the key to change. */
function chatWrapperOf(llamaModel: LlamaModel, header: GgufFile, setting: ChatTemplateSetting): ChatWrapper {
  if (setting === "auto") return resolveChatWrapper(llamaModel);
  if (metaString(header, "tokenizer.chat_template") === undefined)
    throw new ModelFileError(
      header.path,
      'model.chatTemplate is "jinja" but the file has no tokenizer.chat_template: set model.chatTemplate to "auto"',
    );
  return new JinjaChatWrapper({
    tokenizer: llamaModel.tokenizer,
    template: metaString(header, "tokenizer.chat_template")!,
  });
}
