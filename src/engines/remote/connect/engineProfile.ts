import type { CacheStrategy, EngineFeatures, EngineCapacity, ModelInfo } from "../../../engine/index.js";
import type { EngineFacts, Flavor } from "../flavors/Flavor.js";
import type { RemoteEngineOptions } from "../remoteEngineOptions.js";

const DEFAULT_SESSIONS = 64;

/** What the backend offers over the engine it connected to, and what to change when one of its limits is hit. */
export interface EngineProfile {
  readonly features: EngineFeatures;
  readonly capacity: EngineCapacity;
  readonly cacheStrategy: CacheStrategy;
  readonly model: ModelInfo;
  /** What raises the session limit on this engine, for EngineCapacityError. */
  readonly sessionsLimit: string;
  /** What gives a session a longer window on this engine (ContextOverflowError's fix). */
  readonly contextLimit: string;
  /** Log-probs to ask for when a full distribution is wanted (the vocabulary, or what the engine allows). */
  readonly maxLogprobs: number;
}

/** The configured limits within the engine's own (`facts`), and what its flavor can do. */
export function engineProfile(
  opts: RemoteEngineOptions,
  flavor: Flavor,
  facts: EngineFacts,
  engineLabel: string,
): EngineProfile {
  const features = flavor.features;
  const codec = opts.codec;
  const sessions = Math.min(opts.sessions ?? facts.slots ?? DEFAULT_SESSIONS, facts.slots ?? Infinity);
  const capacity = {
    sessions,
    // the engine's own scheduler batches the requests in flight; its contexts are its business
    contexts: 1,
    concurrentCalls: Math.max(1, Math.min(opts.maxInFlight, sessions)),
    contextSize: Math.min(opts.contextSize ?? facts.contextSize, facts.contextSize),
  };
  return {
    capacity,
    features: {
      logProbs: true,
      runtimeAdapterLoading: features.runtimeAdapterLoading,
      adapterSets: features.adapterSets,
      alora: features.alora,
      grammar: true,
      cacheStrategies: [features.cacheStrategy],
    },
    cacheStrategy: features.cacheStrategy,
    model: {
      ...codec.model,
      filePath: `${engineLabel} (${facts.servedModel}; tokenizer and chat template from ${codec.model.filePath})`,
      name: facts.servedModel,
    },
    sessionsLimit:
      facts.slots === undefined
        ? "raise engine.remote.sessions"
        : sessions < facts.slots
          ? `raise engine.remote.sessions (up to the engine's ${facts.slots} slots)`
          : `start ${flavor.title} with more slots (it has ${facts.slots}) and raise engine.remote.sessions`,
    contextLimit:
      capacity.contextSize < facts.contextSize
        ? `raise model.contextSize (the engine allows ${facts.contextSize} tokens a session)`
        : `${features.contextLimit} (now ${facts.contextSize} tokens a session)`,
    maxLogprobs: features.logProbs === "full" ? codec.vocabularySize : (opts.maxLogprobs ?? 20),
  };
}
