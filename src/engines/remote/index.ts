/**
 * The remote backend: the engine interface (src/engine) over a serving engine in another process (llama-server,
 * vLLM, SGLang). The composition root (src/composition) creates it with the base model's tokenizer and chat template
 * (a ChatCodec from src/engines/local/index.ts) and the engine's address; nothing else in src/ knows it is remote.
 */
export { RemoteEngine } from "./RemoteEngine.js";
export type { RemoteEngineSession } from "./session/RemoteEngineSession.js";
export type { RemoteEngineOptions } from "./remoteEngineOptions.js";
export { flavorFor, type Flavor, type FlavorFeatures, type FlavorName } from "./flavors/index.js";
