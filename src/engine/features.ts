import type { CacheStrategy } from "./types.js";

/** What an engine can do: callers check these instead of knowing which backend serves them. */
export interface EngineFeatures {
  /** Next-token distributions (`EngineSession.nextTokenLogProbs`) and per-token top log-probs on `generate`. */
  logProbs: boolean;
  /** Adapters can be added, refreshed and removed while the engine serves. */
  runtimeAdapterLoading: boolean;
  /** Several adapters applied together (`switchWeights` with more than one alias). */
  adapterSets: boolean;
  /** Activated LoRA (an adapter that applies only from its invocation tokens on, so the cache before them is kept). */
  alora: boolean;
  /** Constrained decoding: the function-calling grammar and `steerToolCall`. */
  grammar: boolean;
  /** The cache strategies this engine implements; `Engine.cacheStrategy` is the one its sessions use. */
  cacheStrategies: readonly CacheStrategy[];
}

/** What an engine can hold at once. */
export interface EngineCapacity {
  /** Sessions open at once; one more is refused with EngineCapacityError. */
  sessions: number;
  /** Independent evaluation contexts the sessions are spread over. */
  contexts: number;
  /** Model calls worth letting through at once: more would only wait inside the engine. */
  concurrentCalls: number;
  /** Tokens one session's context window holds. */
  contextSize: number;
}
