/**
 * The local engine: it serves the base model and its adapters in this process, on llama.cpp through node-llama-cpp,
 * and implements the engine interface (src/engine). The composition root (src/composition) creates it here; the rest
 * of src/ sees only the interface. What is llama.cpp but not the engine lives beside it: src/llamaCpp (starting
 * llama.cpp, loading a model, rendering, the chat codec a remote engine uses), src/modelProbe (what doctor and the
 * engine read of a model file in a child process), src/modelFiles (fetching models).
 */
export { LocalEngine } from "./LocalEngine.js";
export type { LocalEngineSession } from "./LocalEngineSession.js";
export type { CacheOptions, LocalEngineOptions } from "./engineOptions.js";
export type { GpuSetting } from "../../llamaCpp/startLlama.js";
export type { BindingSetting } from "../../llamaCpp/binding.js";
