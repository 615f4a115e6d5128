/**
 * Test-only doors into the engine. Nothing in src/ imports this file: it exists so tests can prove that
 * the behaviours they check would fail without the mechanism under test. Planted bugs live here, injected
 * into a session as its switch strategy or lane keys, never as branches in the engine's own code.
 */
import { AdapterVersion } from "../src/engine/index.js";
import { LaneKey } from "./cache/LaneKey.js";
import type { LocalEngine } from "./engine/LocalEngine.js";
import type { LocalEngineSession } from "./session/LocalEngineSession.js";
import type { SwitchStrategy } from "./session/strategies/index.js";

/** The bug the rebuild exists to prevent: a switch takes the new weights but keeps the cache computed under the old. */
export const keepStaleStrategy: SwitchStrategy = {
  async switch(session, key, to) {
    const lane = session.activeLane();
    lane.versions = to;
    lane.key = key;
    return { sync: { reused: session.cachedTokens(), evaluated: 0, restored: 0, ms: 0 }, queueMs: 0, strategy: "unchanged" };
  },
};

/** A session whose switches keep the stale KV cache. */
export function openStaleSession(engine: LocalEngine): Promise<LocalEngineSession> {
  return engine.openSessionWith({ strategy: keepStaleStrategy });
}

/**
 * A `reuse` session whose lanes are keyed by alias alone, without the base model, the adapter's content hash
 * and scale: the planted bug the exact keys exist to prevent (a refreshed adapter would continue a stale cache).
 */
export function openAliasKeyedSession(engine: LocalEngine): Promise<LocalEngineSession> {
  return engine.openSessionWith({
    keyOf: (versions) =>
      LaneKey.of(
        "",
        versions.map((v) => AdapterVersion.of(v.alias, "", 1)),
      ),
  });
}

/**
 * The independent correctness reference (no engine code on its path): tests compare the engine's caches
 * with it, given the base file and each adapter's own file and scale.
 */
export { PlainReference, type PlainAdapter, type PlainReferenceOptions } from "./reference/PlainReference.js";
export type { CacheReplay } from "./cache/DecodeLog.js";
export { LaneKey } from "./cache/LaneKey.js";
