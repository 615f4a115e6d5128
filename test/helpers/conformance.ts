import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { scriptedTrajectory } from "../../testkit/scriptedTrajectory.js";
import {
  EngineCapacityError,
  type CacheStrategy,
  type Conversation,
  type Engine,
  type EngineSession,
  type LogProbs,
  type SwitchReport,
} from "../../src/engine/index.js";

/** An adapter as a reference applies it: its own file at its scale (never the engine's idea of a version). */
export interface ReferenceWeights {
  readonly filePath: string;
  readonly scale: number;
}

/**
 * What one backend brings to the suite. The reference is the backend's own, and must not go through the
 * session under test: the local engine replays the session's decodes in a fresh llama.cpp context loaded from
 * the files; a remote one can send a fresh request with the same adapter files.
 */
export interface ConformanceOptions<E extends Engine = Engine> {
  /** The cache strategies to check (each gets its own engine); default: every one the engine has. */
  strategies?: readonly CacheStrategy[];
  /** A new engine on the demo model with `adapters` resident (alias -> file, scale 1), switching under `strategy`. */
  makeEngine(strategy: CacheStrategy, adapters: Readonly<Record<string, string>>): Promise<E>;
  /**
   * The next-token log-probs a fresh evaluation of `conversation` under `weights` gives, in the same batch split
   * as `session`'s cache where the backend's numerics depend on it.
   */
  reference(
    engine: E,
    session: EngineSession,
    weights: readonly ReferenceWeights[],
    conversation: Conversation,
  ): Promise<LogProbs>;
  /** Three adapters of the base (plan, search, write), and another file for `write` to be refreshed to. */
  adapters: { plan: string; search: string; write: string; writeV2: string };
  /**
   * A session with a planted bug that keeps the stale cache on a switch, when the backend can make one: the
   * suite then proves its correctness check fails on a broken backend.
   */
  openStaleSession?(engine: E): Promise<EngineSession>;
  /**
   * An engine like `makeEngine`'s (first strategy) with a planted bug that decodes a session's tokens under another
   * session's weights when they decode at the same time, when the backend can make one: the interleaved case must
   * fail on it.
   */
  makeCrossWeightsEngine?(strategy: CacheStrategy, adapters: Readonly<Record<string, string>>): Promise<E>;
  /** Largest |log-prob difference| accepted as the same cache (default 1e-4). */
  tolerance?: number;
  /**
   * For sessions evaluated at the same moment: an engine that batches concurrent requests into one decode computes
   * them with other float rounding than a request alone, which the reference replays (default: `tolerance`).
   */
  concurrentTolerance?: number;
  /**
   * How the engine's rounds take concurrent sessions' decodes: "shared" (the default: some rounds decode several
   * sessions together, as llama.cpp's server batches) or "alone" (each decode a round of its own: the local engine under
   * model.batchInvariant, its default).
   */
  rounds?: "shared" | "alone";
  /**
   * "switches": only the exactness after every switch of the scripted trajectory (each strategy) and the planted
   * stale switch, for a model too slow on CPU for the whole suite in `npm test` (default "all").
   */
  scope?: "all" | "switches";
  /**
   * Cached tokens the backend may evaluate again to make a short append one efficient decode (the local engine's
   * MIN_DECODE_TOKENS); default 0.
   */
  decodeFloor?: number;
}

/**
 * Four sessions interleaved (their switches, turns and log-probs at the same moments), each its own route: at every
 * step two of them share weights (an engine that batches may decode them together) and the others stand elsewhere.
 */
const INTERLEAVED: (string | null)[][] = [
  [null, "plan", null, "write"],
  [null, null, "search", "write"],
  ["search", "plan", "search", null],
  ["write", "search", null, null],
];
/** A short turn; whatever it holds, the next prompt continues the cache from what it shares with it. */
const SHORT_TURN = { maxTokens: 8 };

/** base -> plan -> base -> search -> base -> search -> base -> write, with history appended between switches. */
const SCRIPT: (string | null)[] = ["plan", null, "search", null, "search", null, "write", null];

/** Largest |a - b| over the tokens of `a` (both full distributions over the vocabulary). */
export function maxAbsDiff(a: LogProbs, b: LogProbs): number {
  let d = 0;
  for (const [token, v] of a) d = Math.max(d, Math.abs(v - (b.get(token) ?? -Infinity)));
  return d;
}

/**
 * What every engine backend must do, checked on the demo model: after every switch the next-token log-probs
 * equal the backend's reference (for each cache strategy it has), generation and its accounting, log-probs,
 * cache figures that add up, adapter versions and refresh, capacity refusals.
 */
export function describeEngineConformance<E extends Engine>(name: string, opts: ConformanceOptions<E>): void {
  const tolerance = opts.tolerance ?? 1e-4;
  const files: Record<string, string> = {
    plan: opts.adapters.plan,
    search: opts.adapters.search,
    write: opts.adapters.write,
  };
  const weightsOf = (
    adapter: string | null,
    file = adapter === null ? undefined : files[adapter],
  ): ReferenceWeights[] => (file ? [{ filePath: file, scale: 1 }] : []);
  const trajectory = (steps: number) => scriptedTrajectory(steps);

  describe(`engine conformance: ${name}`, () => {
    const strategies = opts.strategies ?? (["rebuild", "reuse"] as const);
    /** One engine per strategy for the whole suite; the checks that do not depend on the strategy use the first. */
    const engines = new Map<CacheStrategy, E>();
    beforeAll(async () => {
      for (const strategy of strategies) {
        const engine = await opts.makeEngine(strategy, files);
        engines.set(strategy, engine);
        expect(engine.features.cacheStrategies).toContain(strategy);
        expect(engine.cacheStrategy).toBe(strategy);
      }
    });
    afterAll(async () => {
      for (const engine of engines.values()) await engine.dispose();
    });

    describe.each(strategies)("cache strategy %s", (strategy) => {
      let engine: E;
      const exactness = async (session: EngineSession, adapter: string | null, conv: Conversation, file?: string) =>
        maxAbsDiff(
          await opts.reference(engine, session, weightsOf(adapter, file), conv),
          await session.nextTokenLogProbs(conv),
        );
      beforeAll(() => {
        engine = engines.get(strategy)!;
      });

      it("after every switch of a scripted trajectory, the cache gives the reference's log-probs, and the switch's figures add up", async () => {
        const session = await engine.openSession();
        try {
          let steps = 1;
          await session.prefill(trajectory(steps));
          const reports: SwitchReport[] = [];
          const diffs: number[] = [];
          for (const adapter of SCRIPT) {
            steps += 1;
            const conv = trajectory(steps);
            const report = await session.switchWeights(adapter, conv);
            reports.push(report);
            expect(report.to).toBe(adapter);
            expect(session.activeAdapter).toBe(adapter);
            const total = engine.renderTokens(conv).length - 1;
            expect(report.rebuild.tokens + report.rebuild.reused).toBe(total);
            expect(report.rebuild.restored).toBeLessThanOrEqual(report.rebuild.reused);
            diffs.push(await exactness(session, adapter, conv));
            expect(diffs.at(-1)).toBeLessThanOrEqual(tolerance);
          }
          const returns = reports.filter((r, i) => [null, ...SCRIPT.slice(0, i)].includes(r.to));
          expect(returns.map((r) => r.to)).toEqual([null, null, "search", null, null]);
          if (strategy === "rebuild") {
            for (const r of reports) expect(r.rebuild.reused).toBe(0);
          } else {
            // a return evaluates only what was appended since that weight set last ran; a first visit evaluates
            // everything
            for (const r of returns) expect(r.rebuild.reused).toBeGreaterThan(r.rebuild.tokens);
            for (const r of reports.filter((r) => !returns.includes(r))) expect(r.rebuild.reused).toBe(0);
          }
          console.log(
            `${name} ${strategy}: tokens evaluated by the 8 switches`,
            reports.map((r) => r.rebuild.tokens).join(" "),
            `; max |delta log-prob| vs reference ${Math.max(...diffs)}`,
          );
        } finally {
          await session.close();
        }
      });

      if (opts.scope !== "switches") describeFullSuite();
      function describeFullSuite() {
        it("a hint of the weights to come changes only the work done ahead: with idle time between calls, every switch stays exact and its figures add up", async () => {
          const session = await engine.openSession();
          try {
            let steps = 1;
            await session.prefill(trajectory(steps));
            for (const adapter of ["plan", null, "search", null]) {
              session.anticipate(adapter === null ? [[], ["search"]] : [["plan"], ["search"]]);
              await new Promise((resolve) => setTimeout(resolve, 300)); // as while a tool runs
              steps += 1;
              const conv = trajectory(steps);
              const report = await session.switchWeights(adapter, conv);
              expect(report.rebuild.tokens + report.rebuild.reused).toBe(engine.renderTokens(conv).length - 1);
              expect(await exactness(session, adapter, conv)).toBeLessThanOrEqual(tolerance);
            }
            // rebuild keeps no other cache to work on; a backend may also ignore the hint (and report nothing)
            if (strategy === "rebuild") expect(session.backgroundWork()).toEqual({ tokens: 0, batches: 0, ms: 0 });
          } finally {
            await session.close();
          }
        });

        it("a refreshed adapter is a new version: never continued from the cache built under the old bytes or scale, and the old one is freed once released", async () => {
          const session = await engine.openSession();
          try {
            await session.switchWeights("write", trajectory(2));
            const old = engine.adapter("write");
            expect(session.activeVersions.map(String)).toEqual([old.id]);
            await session.switchWeights(null, trajectory(3));
            const { previous, current } = await engine.refreshAdapter({
              alias: "write",
              filePath: opts.adapters.writeV2,
              scale: 1,
            });
            expect(previous.version.equals(old.version)).toBe(true);
            expect(current.version.equals(previous.version)).toBe(false);
            expect(current.sha256).not.toBe(previous.sha256);
            expect(engine.adapter("write").id).toBe(current.id);
            const conv = trajectory(4);
            const report = await session.switchWeights("write", conv);
            expect(report.rebuild.reused).toBe(0);
            expect(session.activeVersions.map(String)).toEqual([current.id]);
            expect(await exactness(session, "write", conv, opts.adapters.writeV2)).toBeLessThanOrEqual(tolerance);
            // nothing holds the old version any more: collected, only the current one stays resident for the alias
            await engine.collect();
            await expect
              .poll(() =>
                engine
                  .residentVersions()
                  .filter((v) => v.alias === "write")
                  .map((v) => v.id),
              )
              .toEqual([current.id]);
            // the same bytes at another scale are other weights: a new version, never the lane built at the old scale
            await session.switchWeights(null, trajectory(5));
            const halved = await engine.refreshAdapter({ alias: "write", filePath: opts.adapters.writeV2, scale: 0.5 });
            expect(halved.current.sha256).toBe(current.sha256);
            expect(halved.current.version.equals(current.version)).toBe(false);
            const scaled = trajectory(6);
            expect((await session.switchWeights("write", scaled)).rebuild.reused).toBe(0);
            expect(
              maxAbsDiff(
                await opts.reference(engine, session, [{ filePath: opts.adapters.writeV2, scale: 0.5 }], scaled),
                await session.nextTokenLogProbs(scaled),
              ),
            ).toBeLessThanOrEqual(tolerance);
          } finally {
            await session.close();
            await engine.refreshAdapter({ alias: "write", filePath: opts.adapters.write, scale: 1 });
          }
        });

        it("concurrent sessions switching at once each keep a cache exact for their own weights", async () => {
          const sessions = await Promise.all([engine.openSession(), engine.openSession()]);
          try {
            const routes: (string | null)[][] = [
              ["plan", null, "search", null],
              ["search", null, "plan", "write"],
            ];
            for (let step = 0; step < 4; step++) {
              const convs = sessions.map((_, i) => trajectory(2 + step * 2 + i));
              await Promise.all(sessions.map((s, i) => s.switchWeights(routes[i]![step]!, convs[i]!)));
              // measured one after the other, so only the switches ran batched
              for (const [i, s] of sessions.entries())
                expect(await exactness(s, routes[i]![step]!, convs[i]!)).toBeLessThanOrEqual(
                  opts.concurrentTolerance ?? tolerance,
                );
            }
          } finally {
            await Promise.all(sessions.map((s) => s.close()));
          }
        });
      }
    });

    describe(`on the first strategy (${strategies[0]})`, () => {
      let engine: E;
      const conv = trajectory(1);
      beforeAll(() => {
        engine = engines.get(strategies[0]!)!;
      });

      /**
       * Runs the four INTERLEAVED routes on `on` at once: every step, all switch together, all generate a turn together
       * (decoded batched where the engine batches), then all read their next-token log-probs together; each session's
       * against its reference (its own weights, its own cache's decodes replayed alone). The worst difference per step.
       */
      const interleaved = async (on: E): Promise<number[]> => {
        const sessions: EngineSession[] = [];
        const worst: number[] = [];
        try {
          for (const _ of INTERLEAVED) sessions.push(await on.openSession());
          let convs = sessions.map((_, i) => trajectory(1 + i));
          for (let step = 0; step < 4; step++) {
            const weights = INTERLEAVED.map((route) => route[step]!);
            await Promise.all(sessions.map((s, i) => s.switchWeights(weights[i]!, convs[i]!)));
            const turns = await Promise.all(sessions.map((s, i) => s.generate(convs[i]!, SHORT_TURN)));
            convs = convs.map((c, i) => ({
              ...c,
              turns: [
                ...c.turns,
                { role: "assistant" as const, text: turns[i]!.text },
                { role: "user" as const, text: `Step ${step + 1}: go on.` },
              ],
            }));
            const got = await Promise.all(sessions.map((s, i) => s.nextTokenLogProbs(convs[i]!)));
            const diffs: number[] = [];
            for (const [i, s] of sessions.entries())
              diffs.push(maxAbsDiff(await opts.reference(on, s, weightsOf(weights[i]!), convs[i]!), got[i]!));
            worst.push(Math.max(...diffs));
          }
        } finally {
          await Promise.all(sessions.map((s) => s.close()));
        }
        return worst;
      };

      if (opts.scope !== "switches") describeInterleaved();
      function describeInterleaved() {
        it("four sessions over three weight sets at a time, interleaved (switches, turns and log-probs at the same moments): each one's next-token log-probs after every step are its own weights' reference's", async () => {
          const before = engine.cacheStats().decodeRounds;
          const worst = await interleaved(engine);
          console.log(`${name}: interleaved sessions, max |delta log-prob| vs reference per step`, worst.join(" "));
          for (const d of worst) expect(d).toBeLessThanOrEqual(opts.concurrentTolerance ?? tolerance);
          const after = engine.cacheStats().decodeRounds;
          if (before && after) {
            const rounds = after.rounds - before.rounds;
            const decodes = after.decodes - before.decodes;
            console.log(
              `${name}: ${decodes} decodes in ${rounds} rounds, ${after.weightChanges - before.weightChanges} weight changes`,
            );
            if (opts.rounds === "alone") expect(decodes).toBe(rounds);
            else expect(decodes).toBeGreaterThan(rounds); // some rounds decoded several sessions together
          }
        });

        if (opts.makeCrossWeightsEngine) {
          it("the interleaved check can fail: a planted engine that decodes sessions together under one session's weights does NOT match the reference", async () => {
            const planted = await opts.makeCrossWeightsEngine!(strategies[0]!, files);
            try {
              const worst = await interleaved(planted);
              console.log(`${name}: planted cross-weights rounds, max |delta log-prob| per step`, worst.join(" "));
              expect(Math.max(...worst)).toBeGreaterThan(1e-2);
            } finally {
              await planted.dispose();
            }
          });
        }
      }

      if (opts.openStaleSession) {
        it("the correctness check can fail: a planted stale-cache switch does NOT match the reference", async () => {
          const stale = await opts.openStaleSession!(engine);
          try {
            await stale.nextTokenLogProbs(conv);
            await stale.switchWeights("write", conv);
            expect(
              maxAbsDiff(
                await opts.reference(engine, stale, weightsOf("write"), conv),
                await stale.nextTokenLogProbs(conv),
              ),
            ).toBeGreaterThan(1e-2);
          } finally {
            await stale.close();
          }
        });
      }

      if (opts.scope !== "switches") describeFirstStrategySuite();
      function describeFirstStrategySuite() {
        it("log-probs: the base's and each adapter's own, and back on the base exactly the base's again", async () => {
          const session = await engine.openSession();
          try {
            const base = await session.nextTokenLogProbs(conv);
            expect(maxAbsDiff(await opts.reference(engine, session, [], conv), base)).toBeLessThanOrEqual(tolerance);
            await session.switchWeights("search", conv);
            expect(maxAbsDiff(base, await session.nextTokenLogProbs(conv))).toBeGreaterThan(0.1);
            await session.switchWeights(null, conv);
            expect(maxAbsDiff(base, await session.nextTokenLogProbs(conv))).toBe(0);
          } finally {
            await session.close();
          }
        });

        it("a history taken back and written otherwise continues exactly from what the two share: nothing of the abandoned branch stays cached", async () => {
          const fork = trajectory(2);
          // each branch longer than the decode floor, so the new one is evaluated from where the two part
          const branch = (question: string): Conversation => ({
            ...fork,
            turns: [...fork.turns, { role: "user", text: `${question} ${"Name every town on its banks. ".repeat(8)}` }],
          });
          const taken = branch("Which seas does it reach?");
          const written = branch("How deep is it at Paris?");
          const session = await engine.openSession();
          try {
            await session.switchWeights("search", taken);
            await session.nextTokenLogProbs(taken);
            // the cache may keep what the two prompts share (a backend may also evaluate the new one from the start)
            const [a, b] = [engine.renderTokens(taken), engine.renderTokens(written)];
            let shared = 0;
            while (a[shared] === b[shared]) shared++;
            expect((await session.prefill(written)).reused).toBeLessThanOrEqual(shared);
            expect(
              maxAbsDiff(
                await opts.reference(engine, session, weightsOf("search"), written),
                await session.nextTokenLogProbs(written),
              ),
            ).toBeLessThanOrEqual(tolerance);
          } finally {
            await session.close();
          }
        });

        it("generates with token accounting that adds up, reuses the cached prefix across turns, and reports top log-probs of the distribution", async () => {
          const session = await engine.openSession();
          try {
            const first = await session.generate(conv, { maxTokens: 6, topLogprobs: 3 });
            expect(first.adapter).toBeNull();
            expect(first.tokens.cached).toBe(0);
            expect(first.tokens.evaluated).toBe(first.tokens.prompt);
            expect(first.tokens.prompt).toBe(engine.renderTokens(conv).length);
            expect(first.tokens.generated).toBeGreaterThan(0);
            expect(first.tokens.generated).toBeLessThanOrEqual(6);
            expect(first.contextRemaining).toBe(session.contextSize - first.tokens.prompt - first.tokens.generated);
            expect(first.logprobs).toHaveLength(first.tokens.generated);
            const dist = await session.nextTokenLogProbs(conv);
            const lp = first.logprobs![0]!;
            expect(Math.abs(lp.logprob - dist.get(lp.token)!)).toBeLessThanOrEqual(tolerance);
            expect(lp.top).toHaveLength(3);
            expect(lp.top[0]!.logprob).toBeGreaterThanOrEqual(lp.top[1]!.logprob);
            const next: Conversation = {
              ...conv,
              turns: [
                ...conv.turns,
                { role: "assistant", text: "The Seine." },
                { role: "user", text: "And its length?" },
              ],
            };
            const second = await session.generate(next, { maxTokens: 4 });
            expect(second.tokens.cached + second.tokens.evaluated).toBe(second.tokens.prompt);
            expect(second.tokens.cached).toBeGreaterThan(first.tokens.prompt - 2 - (opts.decodeFloor ?? 0));
            expect(second.tokens.evaluated).toBeLessThan(second.tokens.prompt / 2);
          } finally {
            await session.close();
          }
        });

        it("cache figures add up: every sequence counted, nothing idle or spilled once its sessions closed", async () => {
          const a = await engine.openSession();
          try {
            await a.switchWeights("plan", conv);
            await a.switchWeights(null, conv);
            const stats = engine.cacheStats();
            expect(stats.strategy).toBe(engine.cacheStrategy);
            expect(stats.contexts).toBeLessThanOrEqual(engine.capacity.contexts);
            expect(stats.sequences).toBeLessThanOrEqual(engine.capacity.sessions);
            expect(stats.idleLanes + stats.spilledLanes).toBe(a.laneStates().filter((l) => !l.active).length);
            expect(a.laneStates().filter((l) => l.active)).toEqual([
              { weights: "base", active: true, state: "live", tokens: a.cachedTokens },
            ]);
          } finally {
            await a.close();
          }
          expect(engine.cacheStats()).toMatchObject({ idleLanes: 0, spilledLanes: 0, spilledBytes: 0 });
        });

        it("refuses sessions beyond its capacity with a clear error, and frees the slot on close", async () => {
          const open: EngineSession[] = [];
          try {
            for (let i = 0; i < engine.capacity.sessions; i++) open.push(await engine.openSession());
            const refused = await engine.openSession().catch((e: unknown) => e);
            expect(refused).toBeInstanceOf(EngineCapacityError);
            expect(refused).toMatchObject({ code: "engine_capacity" });
            await open.pop()!.close();
            open.push(await engine.openSession());
          } finally {
            await Promise.all(open.map((s) => s.close()));
          }
        });
      }
    });
  });
}
