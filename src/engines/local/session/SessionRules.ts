import type { Token } from "../llama/nodeLlamaCpp.js";
import type { AdapterVersion } from "../../../engine/index.js";
import type { Lane } from "../cache/Lane.js";
import type { CutFloor } from "../cache/slidingWindow.js";
import type { LaneKey } from "../cache/LaneKey.js";
import type { PrefixKeyOf } from "../cache/PrefixStore.js";
import type { SwitchStrategy } from "./SwitchStrategy.js";

/** Names a weight set exactly; tests swap in a careless one to prove the key matters. */
export type LaneKeyOf = (versions: readonly AdapterVersion[]) => LaneKey;

/** Where an activated LoRA starts applying in a prompt (see adapters/invocation.ts); tests plant an off-by-one. */
export type InvocationOf = (tokens: readonly Token[], invocation: readonly number[]) => number | undefined;

/** The weights a background extension of `lane` applies: its own; tests plant the active lane's. */
export type BackgroundWeightsOf = (lane: Lane, active: Lane) => readonly AdapterVersion[];

/**
 * How one session keys, switches and catches up its caches: the engine's defaults, or a planted bug from testing.ts.
 */
export interface SessionRules {
  strategy: SwitchStrategy;
  keyOf: LaneKeyOf;
  invocationOf: InvocationOf;
  prefixKeyOf: PrefixKeyOf;
  backgroundWeights: BackgroundWeightsOf;
  /** How far back a cache can be cut and continued (a sliding-window cache loses cells); tests plant a weaker one. */
  cutFloor: CutFloor;
  /** Sessions of one scope share prompt prefixes (OpenSessionOptions.promptScope). */
  promptScope: string;
}
