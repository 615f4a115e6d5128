/**
 * The local engine: the only module of weact-mcp that reaches llama.cpp (through node-llama-cpp). It
 * implements the engine interface (src/engine); the composition root (src/runtime) creates it here, and the
 * rest of src/ sees only the interface. `doctor` also reads its llama.cpp-specific checks from here.
 */
export { LocalEngine } from "./LocalEngine.js";
export type { LocalEngineSession } from "./session/LocalEngineSession.js";
export type { CacheOptions, LocalEngineOptions } from "./options.js";
export type { GpuSetting } from "./llama/runtime.js";
export type { BindingSetting } from "./llama/binding.js";
/** What doctor checks before a model serves: whether its chat template parses calls, and the probe's own view. */
export { functionCallProblem } from "./chat/functionCalls.js";
export { probeModelDetailsInChild } from "./model/probe.js";
/** The base model's tokenizer and chat template for an engine in another process (src/engines/remote). */
export { LocalChatCodec } from "./model/LocalChatCodec.js";
/** A model file from Hugging Face through node-llama-cpp's downloader (src/models fetches the catalog's models). */
export { downloadHfFile, type HfDownload } from "./llama/download.js";
/** llama.cpp's raw prefill and decode speed with one binding (npm run bench -- --scenario binding). */
export { measureLlamaSpeed, type SpeedFigures, type SpeedOptions } from "./llama/speed.js";
