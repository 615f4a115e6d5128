import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { LocalEngine, LocalEngineSession } from "../../src/engines/local/index.js";
import type { Conversation } from "../../src/engine/index.js";
import { openPrefixKeyedWithoutVersionsSession, PlainReference } from "../../src/engines/local/localTesting.js";
import { scriptedTrajectory } from "../../testkit/scriptedTrajectory.js";
import { demo, demoEngine, maxAbsDiff, TEST_BINDING, TEST_THREADS } from "../helpers/engine.js";

/** Correctness: a plain context from the files replaying the cache's decodes (see kv-cache.test.ts). */
const TOLERANCE = 1e-4;

let reference: PlainReference;
let engine: LocalEngine;
beforeAll(async () => {
  reference = await PlainReference.load({
    modelPath: demo.model,
    threads: TEST_THREADS,
    contextSize: 4096,
    binding: TEST_BINDING,
  });
  engine = await demoEngine({ cache: { strategy: "reuse", background: false } });
});
afterAll(async () => {
  await engine?.dispose();
  await reference?.dispose();
});

const weightsOf = (adapter: string | null) =>
  adapter === null ? [] : [{ filePath: demo.adapters[adapter]!, scale: 1 }];

async function diffFromReference(
  session: LocalEngineSession,
  adapter: string | null,
  conv: Conversation,
): Promise<number> {
  const replay = session.cacheReplay();
  return maxAbsDiff(
    await reference.nextTokenLogProbs(weightsOf(adapter), engine.renderTokens(conv), replay),
    await session.nextTokenLogProbs(conv),
  );
}

/**
 * Tokens of the conversation's shareable prefix: what its system turn (with the function docs) shares with the whole
 * prompt.
 */
function prefixLength(conv: Conversation): number {
  const whole = engine.renderTokens(conv);
  const head = engine.renderTokens({ turns: conv.turns.slice(0, 1), functions: conv.functions });
  let n = 0;
  while (whole[n] === head[n]) n++;
  return n;
}

describe("shared prompt prefixes (reuse)", () => {
  it("a lane started from a prefix another session of its scope computed restores it, evaluates only the rest, and gives the reference's log-probs", async () => {
    const first = await engine.openSession({ promptScope: "team" });
    const second = await engine.openSession({ promptScope: "team" });
    try {
      const saved = engine.cacheStats().sharedPrefixes;
      // the first visit of plan in this scope: evaluated, and its prefix saved
      await first.switchWeights("plan", scriptedTrajectory(2));
      expect(engine.cacheStats().sharedPrefixes.saved).toBe(saved.saved + 1);
      const conv = scriptedTrajectory(3);
      const report = await second.switchWeights("plan", conv);
      const prefix = prefixLength(conv);
      expect(prefix).toBeGreaterThan(800); // the system prompt with the function docs
      expect(report.rebuild.shared).toBe(prefix);
      expect(report.rebuild.restored).toBe(prefix);
      expect(report.rebuild.tokens).toBe(engine.renderTokens(conv).length - 1 - prefix);
      expect(engine.cacheStats().sharedPrefixes.hits).toBe(saved.hits + 1);
      expect(await diffFromReference(second, "plan", conv)).toBeLessThanOrEqual(TOLERANCE);
      // the lane goes on from there like any other
      const later = scriptedTrajectory(5);
      await second.switchWeights(null, later);
      const back = await second.switchWeights("plan", scriptedTrajectory(6));
      expect(back.rebuild.reused).toBeGreaterThan(back.rebuild.tokens);
      expect(await diffFromReference(second, "plan", scriptedTrajectory(6))).toBeLessThanOrEqual(TOLERANCE);
    } finally {
      await first.close();
      await second.close();
    }
  });

  it("prefixes are kept per weight set and per scope: another adapter, or another scope, evaluates its own", async () => {
    const a = await engine.openSession({ promptScope: "alice" });
    const b = await engine.openSession({ promptScope: "bob" });
    try {
      await a.switchWeights("search", scriptedTrajectory(1));
      const hits = engine.cacheStats().sharedPrefixes.hits;
      const other = await b.switchWeights("search", scriptedTrajectory(1)); // the same text and weights, another scope
      expect(other.rebuild.shared).toBe(0);
      const write = await a.switchWeights("write", scriptedTrajectory(2)); // the same scope, other weights
      expect(write.rebuild.shared).toBe(0);
      expect(engine.cacheStats().sharedPrefixes.hits).toBe(hits);
      expect(await diffFromReference(a, "write", scriptedTrajectory(2))).toBeLessThanOrEqual(TOLERANCE);
    } finally {
      await a.close();
      await b.close();
    }
    // the states stay for the next sessions; the lanes' own spill figures do not count them
    expect(engine.cacheStats()).toMatchObject({ spilledLanes: 0, spilledBytes: 0 });
    expect(engine.cacheStats().sharedPrefixes.entries).toBeGreaterThan(0);
  });

  it("the planted bug: prefixes keyed without the adapter version start an adapter's lane from the base's prefix", async () => {
    const planted = await openPrefixKeyedWithoutVersionsSession(engine, "planted");
    try {
      await planted.prefill(scriptedTrajectory(1)); // the base lane: its prefix saved under the careless key
      const conv = scriptedTrajectory(2);
      const report = await planted.switchWeights("search", conv);
      expect(report.rebuild.shared).toBeGreaterThan(0); // it did start from the base's prefix...
      const diff = await diffFromReference(planted, "search", conv);
      console.log(`planted bug (prefix keyed without the adapter version): max |delta log-prob| vs reference ${diff}`);
      expect(diff).toBeGreaterThan(1e-2); // ...and the check catches it
    } finally {
      await planted.close();
    }
  });
});
