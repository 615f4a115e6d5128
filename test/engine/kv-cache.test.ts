import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { LocalEngine, LocalEngineSession } from "../../src/engines/local/index.js";
import type { Conversation } from "../../src/engine/index.js";
import { openAliasKeyedSession, PlainReference } from "../../src/engines/local/localTesting.js";
import { scriptedTrajectory } from "../../testkit/scriptedTrajectory.js";
import { demo, demoEngine, maxAbsDiff, TEST_BINDING, TEST_THREADS } from "../helpers/engine.js";

/**
 * Correctness means: the next-token log-probs that a plain node-llama-cpp context computes over the same tokens,
 * in the same batch split, with the base file and the adapter's own file at its scale (no engine code on that path).
 */
const TOLERANCE = 1e-4;

const trajectory = (steps: number) => scriptedTrajectory(steps);

let reference: PlainReference;
beforeAll(async () => {
  reference = await PlainReference.load({
    modelPath: demo.model,
    threads: TEST_THREADS,
    contextSize: 4096,
    binding: TEST_BINDING,
  });
});
afterAll(async () => reference?.dispose());

/** The file an alias should be serving: the demo adapter of that name unless the test refreshed it to another file. */
const weightsOf = (adapter: string | null, file = adapter === null ? undefined : demo.adapters[adapter]) =>
  file ? [{ filePath: file, scale: 1 }] : [];

/** The active cache gives exactly the reference's next-token distribution; returns the difference. */
async function checkExact(
  engine: LocalEngine,
  session: LocalEngineSession,
  adapter: string | null,
  conv: Conversation,
  file?: string,
): Promise<number> {
  const replay = session.cacheReplay();
  const got = await session.nextTokenLogProbs(conv);
  const want = await reference.nextTokenLogProbs(weightsOf(adapter, file), engine.renderTokens(conv), replay);
  return maxAbsDiff(want, got);
}

// The strategies' exactness after every switch, refreshes and concurrent switches: test/helpers/conformance.ts.

describe("KV lanes under pressure (reuse, one context of two sequences)", () => {
  let engine: LocalEngine;
  beforeAll(async () => {
    engine = await demoEngine({ sequencesPerContext: 2, maxContexts: 1, cache: { strategy: "reuse" } });
  });
  afterAll(async () => engine?.dispose());

  it("an idle lane evicted by another session is spilled, and a return restores it and evaluates only what is new", async () => {
    const a = await engine.openSession();
    let b: LocalEngineSession | undefined;
    try {
      await a.prefill(trajectory(1));
      await a.switchWeights("plan", trajectory(3)); // the base lane is now idle, holding the second sequence
      const before = engine.cacheStats().evictions.spilled;
      b = await engine.openSession(); // needs a sequence: a's idle base lane is spilled
      expect(engine.cacheStats().evictions.spilled).toBe(before + 1);
      expect(a.laneStates().find((l) => !l.active)).toMatchObject({ state: "spilled" });

      // every sequence is now held by an active lane: a's plan lane spills and gives its sequence to the base lane
      const conv = trajectory(5);
      const back = await a.switchWeights(null, conv);
      expect(back.rebuild.restored).toBeGreaterThan(0);
      expect(back.rebuild.tokens).toBeLessThan(back.rebuild.restored);
      expect(await checkExact(engine, a, null, conv)).toBeLessThanOrEqual(TOLERANCE);

      const conv2 = trajectory(7);
      const again = await a.switchWeights("plan", conv2);
      expect(again.rebuild.restored).toBeGreaterThan(0);
      expect(await checkExact(engine, a, "plan", conv2)).toBeLessThanOrEqual(TOLERANCE);
      await b.switchWeights("search", trajectory(2));
      expect(await checkExact(engine, b, "search", trajectory(2))).toBeLessThanOrEqual(TOLERANCE);
    } finally {
      await a.close();
      await b?.close();
    }
    expect(engine.cacheStats()).toMatchObject({ idleLanes: 0, spilledLanes: 0, spilledBytes: 0 });
  });

  it("the planted bug: lanes keyed without the adapter's content hash continue a stale cache after a refresh", async () => {
    const keyed = async (open: () => Promise<LocalEngineSession>) => {
      const s = await open();
      const other = await engine.openSession();
      try {
        await s.switchWeights("write", trajectory(2));
        await s.switchWeights(null, trajectory(3));
        await other.prefill(trajectory(1));
        await other.switchWeights("plan", trajectory(1)); // needs a sequence: s's idle write lane is spilled
        await engine.refreshAdapter({ alias: "write", filePath: demo.adapters["write-v2"]!, scale: 1 });
        const conv = trajectory(4);
        const report = await s.switchWeights("write", conv);
        return { report, diff: await checkExact(engine, s, "write", conv, demo.adapters["write-v2"]) };
      } finally {
        await s.close();
        await other.close();
        await engine.refreshAdapter({ alias: "write", filePath: demo.adapters.write!, scale: 1 });
      }
    };
    const exact = await keyed(() => engine.openSession());
    expect(exact.report.rebuild.restored).toBe(0);
    expect(exact.diff).toBeLessThanOrEqual(TOLERANCE);
    const planted = await keyed(() => openAliasKeyedSession(engine));
    expect(planted.report.rebuild.restored).toBeGreaterThan(0); // it did continue the old cache...
    expect(planted.diff).toBeGreaterThan(1e-2); // ...and the correctness check catches it
  });
});

describe("KV lanes: what a refresh, a tight spill budget and racing calls leave behind (reuse, one context of two sequences)", () => {
  let engine: LocalEngine;
  beforeAll(async () => {
    engine = await demoEngine({
      sequencesPerContext: 2,
      maxContexts: 1,
      cache: { strategy: "reuse", spillBytes: 1.5 * 2 ** 20 },
    });
  });
  afterAll(async () => engine?.dispose());

  it("a spilled lane whose adapter was refreshed is dropped, and the session still describes itself", async () => {
    const s = await engine.openSession();
    const other = await engine.openSession();
    try {
      await s.switchWeights("write", trajectory(1));
      // every sequence is held by an active lane: write's lane (~1k tokens, ~1 MiB of KV) spills to make room
      await s.switchWeights(null, trajectory(2));
      expect(s.laneStates().map((l) => [l.weights, l.state])).toContainEqual(["write", "spilled"]);
      await engine.refreshAdapter({ alias: "write", filePath: demo.adapters["write-v2"]!, scale: 1 });
      // the engine collects unused versions in the background
      await expect.poll(() => s.laneStates().map((l) => l.weights)).toEqual(["base"]);
      await expect.poll(() => engine.residentVersions().filter((v) => v.alias === "write")).toHaveLength(1);
    } finally {
      await s.close();
      await other.close();
      await engine.refreshAdapter({ alias: "write", filePath: demo.adapters.write!, scale: 1 });
    }
  });

  it("a state larger than the spill budget is dropped, never kept over budget", async () => {
    const s = await engine.openSession();
    let other: LocalEngineSession | undefined;
    try {
      await s.switchWeights("plan", trajectory(6)); // ~2.3k tokens: ~2.3 MiB of KV, over the budget
      await s.switchWeights(null, trajectory(7));
      const before = engine.cacheStats().evictions;
      other = await engine.openSession();
      expect(engine.cacheStats().evictions).toEqual({ ...before, dropped: before.dropped + 1 });
      expect(engine.cacheStats().spilledBytes).toBeLessThanOrEqual(1.5 * 2 ** 20);
    } finally {
      await s.close();
      await other?.close();
    }
  });

  it("switches racing on one session and a close in the middle leak no sequence", async () => {
    for (let round = 0; round < 3; round++) {
      const s = await engine.openSession();
      const racing = Promise.allSettled([
        s.switchWeights("plan", trajectory(1)),
        s.switchWeights("search", trajectory(1)),
        s.switchWeights(null, trajectory(2)),
      ]);
      await s.close();
      await racing;
    }
    expect(engine.cacheStats()).toMatchObject({ idleLanes: 0, spilledLanes: 0, spilledBytes: 0 });
    const both = [await engine.openSession(), await engine.openSession()]; // both sequences are free again
    await Promise.all(both.map((x) => x.close()));
  });
});

describe("KV lanes without a spill store", () => {
  it("an evicted lane is dropped, and the return re-evaluates the whole history exactly", async () => {
    const engine = await demoEngine({
      sequencesPerContext: 2,
      maxContexts: 1,
      cache: { strategy: "reuse", spillDir: null },
    });
    const a = await engine.openSession();
    try {
      await a.prefill(trajectory(1));
      await a.switchWeights("search", trajectory(3));
      const b = await engine.openSession();
      expect(engine.cacheStats().evictions.dropped).toBe(1);
      const conv = trajectory(5);
      const back = await a.switchWeights(null, conv);
      expect(back.rebuild).toMatchObject({ reused: 0, restored: 0, tokens: engine.renderTokens(conv).length - 1 });
      expect(await checkExact(engine, a, null, conv)).toBeLessThanOrEqual(TOLERANCE);
      await b.close();
    } finally {
      await a.close();
      await engine.dispose();
    }
  });
});

describe("adapters are told apart", () => {
  it("two different adapters give different next-token log-probs at the same point, each its own file's", async () => {
    const engine = await demoEngine();
    try {
      const conv = trajectory(2);
      const tokens = engine.renderTokens(conv);
      const dists = new Map<string | null, Map<number, number>>();
      for (const adapter of [null, "plan", "search", "write"]) {
        const session = await engine.openSession({ adapter });
        try {
          const got = await session.nextTokenLogProbs(conv);
          expect(
            maxAbsDiff(await reference.nextTokenLogProbs(weightsOf(adapter), tokens), got),
            String(adapter),
          ).toBeLessThanOrEqual(TOLERANCE);
          dists.set(adapter, got);
        } finally {
          await session.close();
        }
      }
      const weights = [...dists.keys()];
      for (const [i, a] of weights.entries()) {
        for (const b of weights.slice(i + 1))
          expect(maxAbsDiff(dists.get(a)!, dists.get(b)!), `${a} vs ${b}`).toBeGreaterThan(0.1);
      }
      // the same file at another scale is other weights too
      const half = await reference.nextTokenLogProbs([{ filePath: demo.adapters.plan!, scale: 0.5 }], tokens);
      expect(maxAbsDiff(half, dists.get("plan")!)).toBeGreaterThan(0.1);
    } finally {
      await engine.dispose();
    }
  });
});

describe("how an append is split into decodes", () => {
  it("an append a little longer than a batch goes in even decodes, not a full batch and a short (per token dear) remainder; the cache stays exact", async () => {
    const engine = await demoEngine({
      maxContexts: 1,
      batchSize: 256,
      cache: { strategy: "reuse", background: false, sharedPrefixes: false },
    });
    const s = await engine.openSession();
    try {
      // two points of the scripted trajectory between which 257..319 tokens are appended (a remainder of 1..63)
      const lengths = Array.from({ length: 20 }, (_, k) => engine.renderTokens(trajectory(k)).length);
      const pair = lengths
        .flatMap((a, i) => lengths.slice(i + 1).map((b, j) => [i, i + 1 + j, b - a] as const))
        .find(([, , d]) => d % 256 > 1 && d % 256 < 64 && d > 256 && d < 512);
      if (!pair) throw new Error("no pair of trajectory points appends 257..319 tokens");
      const [from, to, appended] = pair;
      await s.prefill(trajectory(from));
      await s.prefill(trajectory(to));
      const decodes = s.cacheReplay().decodes.filter((d) => d.start >= lengths[from]! - 1);
      expect(decodes.map((d) => d.tokens.length)).toEqual([Math.ceil(appended / 2), Math.floor(appended / 2)]);
      expect(await checkExact(engine, s, null, trajectory(to))).toBeLessThanOrEqual(TOLERANCE);
    } finally {
      await s.close();
      await engine.dispose();
    }
  });
});
