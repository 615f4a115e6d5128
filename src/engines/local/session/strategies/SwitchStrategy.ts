import type { Token } from "../../llama/nodeLlamaCpp.js";
import type { AdapterVersion, SwitchReport } from "../../../../engine/index.js";
import type { Lane, Slot } from "../../cache/Lane.js";
import type { LaneKey } from "../../cache/LaneKey.js";
import type { Synced, SyncPlan } from "../laneSync.js";
import type { EngineServices } from "../EngineServices.js";

/** What a strategy sees and changes of the session it switches. */
export interface SwitchingSession {
  readonly id: number;
  readonly host: EngineServices;
  /** The active lane. */
  activeLane(): Lane;
  /** Makes another lane the active one (a strategy that moves the session to another lane). */
  activate(lane: Lane): void;
  /** Every lane the session holds, by key (`LaneKey.toString()`), the active one included. */
  readonly lanes: Map<string, Lane>;
  /** Tokens whose KV the active lane holds now. */
  cachedTokens(): number;
  /** The active lane's slot; SessionClosedError if it has none. */
  liveSlot(): Slot;
  /** How a sync brings `lane` (with the versions it has now) to `tokens`: invocation point, shared prefix. */
  planFor(lane: Lane, tokens: readonly Token[]): SyncPlan;
  /** Whether `versions` is an activated LoRA: it runs on the session's base lane, from its invocation point on. */
  activates(versions: readonly AdapterVersion[]): boolean;
  /** The key of the session's base lane. */
  baseKey(): LaneKey;
}

export interface SwitchOutcome {
  sync: Synced;
  /** Waiting for the context lock. */
  queueMs: number;
  strategy: SwitchReport["strategy"];
}

/**
 * What a weight switch does with a session's KV cache. Chosen once, when the engine is created; every
 * strategy must leave the active lane holding the cache a fresh context would compute under `to`.
 */
export interface SwitchStrategy {
  /**
   * Makes `to` (named exactly by `key`, which differs from the active lane's) the session's weights over
   * `tokens`, the whole rendered history. Called one switch at a time per session, with `to` pinned; on a
   * failure the session must keep a correct cache under its previous weights.
   */
  switch(session: SwitchingSession, key: LaneKey, to: readonly AdapterVersion[], tokens: Token[], queued: number): Promise<SwitchOutcome>;
}
