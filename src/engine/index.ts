/**
 * The engine interface: what sessions, harness, tools and the HTTP layers know of the engine that serves
 * the model. Types, the identity values and the errors; no backend. `src/engines/local/` implements it on llama.cpp
 * (through node-llama-cpp); the composition root (src/composition) is the one place that picks a backend.
 */
export type { Engine, CacheStats, DecodeRoundStats, OpenSessionOptions } from "./Engine.js";
export type { BackgroundWork, EngineSession, LaneState, PrefillReport } from "./EngineSession.js";
export type { EngineFeatures, EngineCapacity } from "./features.js";
export type { CallSyntax, ChatCodec } from "./ChatCodec.js";
export type * from "./types.js";
export { AdapterVersion } from "./AdapterVersion.js";
export { readAdapterFile } from "./adapterFile.js";
export { commonPrefixLength } from "./tokens.js";
export { ensureActivatedAlone, invocationStart } from "./invocation.js";
export { aliasesOf, WeightSet } from "./WeightSet.js";
export { VersionPins } from "./VersionPins.js";
export * from "./errors.js";
