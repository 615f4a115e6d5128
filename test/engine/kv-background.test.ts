import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { LocalEngine, LocalEngineSession } from "../../src/engines/local/index.js";
import type { Conversation } from "../../src/engine/index.js";
import {
  openWrongBackgroundWeightsSession,
  PlainReference,
  ROW_GROUP,
  type DecodeHold,
} from "../../src/engines/local/localTesting.js";
import { scriptedTrajectory } from "../../testkit/scriptedTrajectory.js";
import { demo, demoEngine, maxAbsDiff, TEST_BINDING, TEST_THREADS } from "../helpers/engine.js";

/**
 * Lanes caught up ahead of time: while no caller's evaluation runs, the engine extends the lanes a session said
 * it needs next, one decode at a time. Correctness is the same test as for any lane (a plain context replaying
 * the decodes); the scheduling rule is checked from the engine's lock holds (timestamps of every hold, marked
 * as a caller's or as background work).
 */
const TOLERANCE = 1e-4;
/** Background decodes of the minimum size (a 1 ms target): many of them, so a caller can arrive in the middle. */
const BATCH = 64;

let reference: PlainReference;
let engine: LocalEngine;
beforeAll(async () => {
  reference = await PlainReference.load({
    modelPath: demo.model,
    threads: TEST_THREADS,
    contextSize: 4096,
    binding: TEST_BINDING,
  });
  engine = await demoEngine({ maxContexts: 1, cache: { strategy: "reuse", background: true, backgroundDecodeMs: 1 } });
});
afterAll(async () => {
  await engine?.dispose();
  await reference?.dispose();
});

const weightsOf = (adapter: string | null) =>
  adapter === null ? [] : [{ filePath: demo.adapters[adapter]!, scale: 1 }];

/** The session's distribution after `conv` against the reference replaying its cache. */
async function diffFromReference(
  session: LocalEngineSession,
  adapter: string | null,
  conv: Conversation,
): Promise<number> {
  const got = await session.nextTokenLogProbs(conv);
  return maxAbsDiff(
    await reference.nextTokenLogProbs(weightsOf(adapter), engine.renderTokens(conv), session.cacheReplay()),
    got,
  );
}

const laneTokens = (s: LocalEngineSession, weights: string) =>
  s.laneStates().find((l) => l.weights === weights)?.tokens ?? 0;
const activeTokens = (s: LocalEngineSession) => s.laneStates().find((l) => l.active)!.tokens;

/**
 * The rule: a caller's decode never waited for more than one background decode (rounds run one at a time across
 * contexts), and only for one that had started before the caller asked. Returns the violations.
 */
function waitedForMoreThanOneDecode(holds: readonly DecodeHold[]): string[] {
  const decodes = holds.filter((h) => h.background && h.endedAt - h.startedAt > 1);
  return holds
    .filter((f) => !f.background)
    .flatMap((f) => {
      const during = decodes.filter((b) => b.startedAt < f.startedAt && b.endedAt > f.queuedAt);
      const late = during.filter((b) => b.startedAt > f.queuedAt);
      return during.length > 1 || late.length
        ? [
            `a caller queued at ${f.queuedAt.toFixed(1)} waited for ${during.length} background decodes (${late.length} started after it asked)`,
          ]
        : [];
    });
}

describe("lanes caught up in the background (reuse)", () => {
  it("the base lane is brought up to an adapter stage's history while it idles, then a return evaluates only what came after", async () => {
    const s = await engine.openSession();
    try {
      await s.prefill(scriptedTrajectory(1));
      await s.switchWeights("plan", scriptedTrajectory(4)); // the base lane is ~700 tokens behind
      s.anticipate([[]]); // the release returns to the base
      await expect.poll(() => laneTokens(s, "base"), { timeout: 30_000, interval: 20 }).toBe(activeTokens(s));
      expect(s.backgroundWork()).toMatchObject({ batches: expect.any(Number) as number });
      expect(s.backgroundWork().tokens).toBeGreaterThan(500);
      const conv = scriptedTrajectory(5);
      const back = await s.switchWeights(null, conv);
      const appended = engine.renderTokens(conv).length - engine.renderTokens(scriptedTrajectory(4)).length;
      // a decode starts on the grid of row groups (DecodeLog.ROW_GROUP): up to three tokens before it again
      expect(back.rebuild.tokens).toBeLessThanOrEqual(Math.max(appended, 64) + ROW_GROUP - 1);
      expect(await diffFromReference(s, null, conv)).toBeLessThanOrEqual(TOLERANCE);
      const stats = engine.cacheStats();
      expect(stats.evaluatedTokens.background).toBeGreaterThanOrEqual(s.backgroundWork().tokens);
      expect(stats.background.batches).toBeGreaterThan(0);
    } finally {
      await s.close();
    }
  });

  it("while the model's call runs, the base lane is brought over its turn (the history so far); the return evaluates from the result on, exactly", async () => {
    const s = await engine.openSession();
    try {
      await s.prefill(scriptedTrajectory(1));
      const stage = scriptedTrajectory(5);
      await s.switchWeights("plan", stage);
      // the model's turn is recorded and its call is running: the result is not back yet
      const done = scriptedTrajectory(6);
      const turn = done.turns.at(-1)!;
      if (turn.role !== "assistant" || !turn.calls?.length) throw new Error("the scripted turn makes a call");
      const soFar = {
        conversation: { ...done, turns: [...done.turns.slice(0, -1), { ...turn, calls: [] }] },
        awaiting: turn.calls.map(({ name, arguments: args }) => ({ name, arguments: args })),
      };
      // everything before the result's text is settled (two results part there), nothing of the result is
      const result = turn.calls[0]!.result;
      const final = engine.renderTokens(done);
      const withOther = engine.renderTokens({
        ...done,
        turns: [...done.turns.slice(0, -1), { ...turn, calls: [{ ...turn.calls[0]!, result: "x" + result }] }],
      });
      let settled = 0;
      while (final[settled] === withOther[settled]) settled++;
      expect(settled).toBeGreaterThan(engine.renderTokens(stage).length);
      s.anticipate([[]], soFar);
      await expect.poll(() => laneTokens(s, "base"), { timeout: 30_000, interval: 20 }).toBe(settled);
      const back = await s.switchWeights(null, done);
      expect(back.rebuild.reused).toBeGreaterThanOrEqual(settled - 64);
      expect(back.rebuild.tokens).toBeLessThanOrEqual(Math.max(final.length - 1 - settled, 64) + ROW_GROUP - 1);
      expect(await diffFromReference(s, null, done)).toBeLessThanOrEqual(TOLERANCE);
    } finally {
      await s.close();
    }
  });

  it("an anticipated first visit gets a lane ahead, in a free sequence; the switch then finds it nearly ready", async () => {
    const s = await engine.openSession();
    try {
      const conv = scriptedTrajectory(3);
      await s.prefill(conv);
      const started = engine.cacheStats().background.lanesStarted;
      s.anticipate([["search"]]);
      await expect.poll(() => laneTokens(s, "search"), { timeout: 30_000, interval: 20 }).toBe(activeTokens(s));
      expect(engine.cacheStats().background.lanesStarted).toBe(started + 1);
      const next = scriptedTrajectory(4);
      const report = await s.switchWeights("search", next);
      expect(report.rebuild.reused).toBeGreaterThanOrEqual(engine.renderTokens(conv).length - 1 - 64);
      expect(await diffFromReference(s, "search", next)).toBeLessThanOrEqual(TOLERANCE);
    } finally {
      await s.close();
    }
  });

  it("a catch-up pre-empted by a foreground switch on the same context: the switch waits at most one decode, continues what was done, and is exact", async () => {
    const s = await engine.openSession();
    const other = await engine.openSession(); // a second caller on the same context
    try {
      await s.prefill(scriptedTrajectory(1));
      const long = scriptedTrajectory(12); // ~2.7k tokens for the base lane to catch up: dozens of decodes
      await s.switchWeights("write", long);
      await other.prefill(scriptedTrajectory(2));
      const before = s.backgroundWork().batches;
      s.anticipate([[]]);
      await expect
        .poll(() => s.backgroundWork().batches - before, { timeout: 30_000, interval: 5 })
        .toBeGreaterThanOrEqual(3);
      const [back] = await Promise.all([
        s.switchWeights(null, long),
        other.generate(scriptedTrajectory(2), { maxTokens: 2 }),
      ]);
      const total = engine.renderTokens(long).length - 1;
      expect(back.rebuild.reused).toBeGreaterThan(3 * BATCH - BATCH); // what the background did was kept...
      expect(back.rebuild.reused).toBeLessThan(total); // ...and it had not finished
      expect(await diffFromReference(s, null, long)).toBeLessThanOrEqual(TOLERANCE);
      expect(waitedForMoreThanOneDecode(engine.decodeHolds())).toEqual([]);
      expect(engine.decodeHolds().some((h) => h.background)).toBe(true);
    } finally {
      await s.close();
      await other.close();
    }
  });

  it("the planted bug: a background extension under the active lane's weights does NOT match the reference", async () => {
    const planted = await openWrongBackgroundWeightsSession(engine);
    try {
      await planted.prefill(scriptedTrajectory(1));
      await planted.switchWeights("plan", scriptedTrajectory(4));
      planted.anticipate([[]]);
      await expect
        .poll(() => laneTokens(planted, "base"), { timeout: 30_000, interval: 20 })
        .toBe(activeTokens(planted));
      const conv = scriptedTrajectory(5);
      await planted.switchWeights(null, conv);
      const diff = await diffFromReference(planted, null, conv);
      console.log(`planted bug (background under the wrong weights): max |delta log-prob| vs reference ${diff}`);
      expect(diff).toBeGreaterThan(1e-2);
    } finally {
      await planted.close();
    }
  });
});

describe("a lane started ahead of time is a guess: it never costs another session", () => {
  let small: LocalEngine;
  beforeAll(async () => {
    // three sequences: a session's base and plan lanes, and one free for work ahead of time
    small = await demoEngine({
      maxContexts: 1,
      sequencesPerContext: 3,
      cache: { strategy: "reuse", background: true, backgroundDecodeMs: 1 },
    });
  });
  afterAll(async () => small?.dispose());

  it("another session's sequence comes from the unused guess first (dropped, not spilled), then from a lane a session left (spilled)", async () => {
    const a = await small.openSession();
    const opened: LocalEngineSession[] = [];
    try {
      await a.prefill(scriptedTrajectory(2));
      await a.switchWeights("plan", scriptedTrajectory(3)); // the base lane idles, older than anything after it
      a.anticipate([["search"]]);
      await expect.poll(() => laneTokens(a, "search"), { timeout: 30_000, interval: 20 }).toBe(activeTokens(a));
      const before = small.cacheStats().evictions;

      opened.push(await small.openSession()); // no free sequence: the guess goes, though the base lane is older
      expect(small.cacheStats().evictions).toEqual({ spilled: before.spilled, dropped: before.dropped + 1 });
      expect(laneTokens(a, "search")).toBe(0);
      expect(laneTokens(a, "base")).toBeGreaterThan(0);

      opened.push(await small.openSession()); // then the lane the session left, saved to the spill store
      expect(small.cacheStats().evictions).toEqual({ spilled: before.spilled + 1, dropped: before.dropped + 1 });
      const back = await a.switchWeights(null, scriptedTrajectory(3));
      expect(back.rebuild.restored).toBeGreaterThan(0);
    } finally {
      await Promise.all([a, ...opened].map((s) => s.close()));
    }
  });
});
