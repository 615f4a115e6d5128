import type { LlamaContextSequence, Token } from "node-llama-cpp";
import type { AdapterVersion, WeightSet } from "../../../engine/index.js";
import type { SwitchStrategy } from "./SwitchStrategy.js";

/** Names a weight set exactly; tests swap in a careless one to prove the key matters. */
export type WeightsOf = (versions: readonly AdapterVersion[]) => WeightSet;

/** Where an activated LoRA starts applying in a prompt (see adapters/invocation.ts); tests plant an off-by-one. */
export type InvocationOf = (tokens: readonly Token[], invocation: readonly number[]) => number | undefined;

/** The weights a background extension of a lane applies: its own; tests plant the active lane's. */
export type BackgroundWeightsOf = (own: WeightSet, active: WeightSet) => WeightSet;

/** Names a shared prompt prefix: its scope, the weights it is computed under, its tokens. */
export type PrefixKeyOf = (scope: string, weights: WeightSet, tokens: readonly Token[]) => string;

/**
 * The first cache position a cut may leave in place and continue from (0: any cut is safe). A sliding-window cache
 * that keeps only its window frees the cells behind it; tests plant a weaker floor.
 */
export type CutFloor = (sequence: LlamaContextSequence) => number;

/**
 * How one session keys, switches and catches up its caches: the engine's defaults, or a planted bug from
 * localTesting.ts.
 */
export interface SessionRules {
  strategy: SwitchStrategy;
  weightsOf: WeightsOf;
  invocationOf: InvocationOf;
  prefixKeyOf: PrefixKeyOf;
  backgroundWeights: BackgroundWeightsOf;
  /** How far back a cache can be cut and continued (a sliding-window cache loses cells); tests plant a weaker one. */
  cutFloor: CutFloor;
  /** Sessions of one scope share prompt prefixes (OpenSessionOptions.promptScope). */
  promptScope: string;
}
