/**
 * The engine seam: the only module of weact-mcp that reaches llama.cpp (through node-llama-cpp).
 * Everything else imports from here.
 */
export { Engine } from "./engine/Engine.js";
export type { EngineSession, LogProbs } from "./session/EngineSession.js";
export type { LocalEngineOptions, CacheOptions } from "./engine/options.js";
export type * from "../src/engine/index.js";
export type { GpuSetting } from "./llama/runtime.js";
export * from "../src/engine/errors.js";
export { fileKind, GgufFormatError } from "./gguf/reader.js";
/** The FIFO async lock the engine uses per context; sessions reuse it to order their own operations. */
export { Mutex } from "./context/Mutex.js";
/** Content identity of model and adapter files. */
export { sha256File } from "./gguf/contentHash.js";
