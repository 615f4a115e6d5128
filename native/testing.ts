/**
 * Test-only doors into the engine. Nothing in src/ imports this file: it exists so tests can prove that
 * the behaviours they check would fail without the mechanism under test.
 */
import { ResidentAdapters } from "./adapters/ResidentAdapters.js";
import type { Engine } from "./engine/Engine.js";
import type { EngineSession } from "./session/EngineSession.js";

/** A session whose switches keep the stale KV cache: the bug the rebuild exists to prevent. */
export function openStaleSession(engine: Engine): Promise<EngineSession> {
  return engine.openSessionWith("keep-stale");
}

/**
 * A `reuse` session whose lanes are keyed by alias alone, without the adapter's content hash and scale:
 * the planted bug the exact keys exist to prevent (a refreshed adapter would continue a stale cache).
 */
export function openAliasKeyedSession(engine: Engine): Promise<EngineSession> {
  return engine.openSessionWith("reuse", [], (versions) => versions.map(ResidentAdapters.aliasOf).sort().join("+") || "base");
}

/**
 * The independent correctness reference (no engine code on its path): tests compare the engine's caches
 * with it, given the base file and each adapter's own file and scale.
 */
export { PlainReference, type PlainAdapter, type PlainReferenceOptions } from "./reference/PlainReference.js";
