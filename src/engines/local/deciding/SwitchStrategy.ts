import type { CacheStrategy, WeightSet } from "../../../engine/index.js";

/** A switch to weights other than the active lane's, as a strategy sees it. */
export interface SwitchRequest {
  /** The new weights; not the active lane's. */
  to: WeightSet;
  /** The new weights are an activated LoRA: it runs on the session's base lane, from its invocation point on. */
  activating: boolean;
  /** The weights of the session's base lane. */
  base: WeightSet;
}

/**
 * What the session does with its caches for a switch. `rebuild`: the active lane takes the new weights and is
 * evaluated again from the start (none of its keys/values may be reused, nor a shared prefix). `continue`: the
 * lane for `home` is brought up to the history (live, spilled to disk, or started, from the shared prompt prefix
 * when one is saved), and the previous lane stays behind, idle, for the next return. `unchanged`: the active lane
 * keeps its cache and takes the new label (the session's own choice when the weights are the same ones).
 */
export type SwitchPlan = { kind: "rebuild" } | { kind: "continue"; home: WeightSet } | { kind: "unchanged" };

/**
 * How weight switches treat a session's KV cache: a decision, applied by the session (`LocalEngineSession`).
 * Chosen once, when the engine is created; whatever it decides, the session must end with the active lane holding
 * the cache a fresh context would compute under the new weights.
 */
export interface SwitchStrategy {
  plan(request: SwitchRequest): SwitchPlan;
}

/** The paper's: every switch re-evaluates the whole history under the new weights. */
const rebuild: SwitchStrategy = { plan: () => ({ kind: "rebuild" }) };

/**
 * One lane per weight set, continued where it left off. An activated LoRA has no lane of its own: it runs on the
 * session's base lane, whose cache before the invocation point is exactly what the adapter needs.
 */
const reuse: SwitchStrategy = {
  plan: ({ to, activating, base }) => ({ kind: "continue", home: activating ? base : to }),
};

/** The strategy for a configured cache strategy. */
export function switchStrategy(name: CacheStrategy): SwitchStrategy {
  return name === "reuse" ? reuse : rebuild;
}
