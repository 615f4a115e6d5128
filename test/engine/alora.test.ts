import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { LocalEngine, LocalEngineSession } from "../../src/engines/local/index.js";
import { InvalidAdapterSetError, type Conversation } from "../../src/engine/index.js";
import { openInvocationOffByOneSession, PlainReference } from "../../src/engines/local/localTesting.js";
import { DEMO_INVOCATION } from "../../src/demo/demoWeights.js";
import { scriptedTrajectory } from "../../testkit/scriptedTrajectory.js";
import { ALORA_INVOCATION_KEY, readGgufHeader } from "../../src/gguf/index.js";
import { demo, demoEngine, maxAbsDiff, TEST_BINDING, TEST_THREADS } from "../helpers/engine.js";

/**
 * Activated LoRA: the adapter applies from the start of the last occurrence of its invocation sequence in the
 * prompt on. The oracle is a replay of the cache's decodes in a plain context with the base weights before that
 * point and the adapter's from it (its state carried over through a state file); the point is found here, by
 * the test, not taken from the engine.
 */
const TOLERANCE = 1e-4;

let reference: PlainReference;
const engines: LocalEngine[] = [];
beforeAll(async () => {
  reference = await PlainReference.load({
    modelPath: demo.model,
    threads: TEST_THREADS,
    contextSize: 4096,
    binding: TEST_BINDING,
  });
});
afterAll(async () => {
  for (const e of engines) await e.dispose();
  await reference?.dispose();
});

async function engineWith(strategy: "reuse" | "rebuild"): Promise<LocalEngine> {
  const engine = await demoEngine({ adapters: ["plan", "verify"], cache: { strategy, background: false } });
  engines.push(engine);
  return engine;
}

const verify = [{ filePath: demo.adapters.verify!, scale: 1 }];

/** The history, then a tool result that invokes the verifier (its text holds the invocation sequence). */
const invoked = (steps: number, more: Conversation["turns"] = []): Conversation => {
  const conv = scriptedTrajectory(steps);
  return {
    ...conv,
    turns: [
      ...conv.turns,
      { role: "user", text: `${DEMO_INVOCATION} check the claim about the Seine against the evidence.` },
      ...more,
    ],
  };
};

/**
 * The start of the last occurrence of `sequence` in `tokens` (a plain search: the demo's invocation has no repeated
 * token).
 */
function lastOccurrence(tokens: readonly number[], sequence: readonly number[]): number {
  for (let i = tokens.length - sequence.length; i >= 0; i--)
    if (sequence.every((t, j) => tokens[i + j] === t)) return i;
  return -1;
}

describe("activated LoRA (aLoRA)", () => {
  let engine: LocalEngine;
  let invocation: number[];
  beforeAll(async () => {
    engine = await engineWith("reuse");
    invocation = engine.tokenize(DEMO_INVOCATION);
  });

  /**
   * The engine's distribution after `conv` (its cache brought to it first), against the reference replaying that cache.
   */
  const check = async (session: LocalEngineSession, conv: Conversation, activatedFrom: number | undefined) => {
    const got = await session.nextTokenLogProbs(conv);
    const want = await reference.nextTokenLogProbs(
      activatedFrom === undefined ? [] : verify,
      engine.renderTokens(conv),
      session.cacheReplay(),
      activatedFrom,
    );
    return maxAbsDiff(want, got);
  };

  it("the demo adapter carries llama.cpp's key, and the engine reads it", () => {
    const header = readGgufHeader(demo.adapters.verify!);
    expect(header.metadata.get(ALORA_INVOCATION_KEY)).toMatchObject({ items: invocation });
    expect(engine.adapter("verify").invocationTokens).toEqual(invocation);
    expect(engine.adapter("plan").invocationTokens).toBeUndefined();
    expect(engine.features.alora).toBe(true);
  });

  it("a switch from the base evaluates only the tokens from the invocation point; they and the turns after it are the adapter's, and the return is the base's", async () => {
    const session = await engine.openSession();
    try {
      const conv = invoked(2);
      const tokens = engine.renderTokens(conv);
      const point = lastOccurrence(tokens, invocation);
      expect(point).toBeGreaterThan(0);
      await session.prefill(conv); // the base lane holds the whole prompt
      const baseLogProbs = await session.nextTokenLogProbs(conv);
      const report = await session.switchWeights("verify", conv);
      expect(report.rebuild).toMatchObject({ reused: point, tokens: tokens.length - 1 - point });
      expect(session.activeAdapter).toBe("verify");
      expect(await check(session, conv, point)).toBeLessThanOrEqual(TOLERANCE);
      expect(maxAbsDiff(baseLogProbs, await session.nextTokenLogProbs(conv))).toBeGreaterThan(0.1); // it does apply
      // a turn of the adapter, then more history: still the adapter's from the same point
      const turn = await session.generate(conv, { maxTokens: 4 });
      const next = invoked(2, [
        { role: "assistant", text: `Checked. ${turn.text.length} characters.` },
        { role: "user", text: "And which seas does it reach?" },
      ]);
      expect(lastOccurrence(engine.renderTokens(next), invocation)).toBe(point);
      expect(await check(session, next, point)).toBeLessThanOrEqual(TOLERANCE);
      // back to the base: the adapter's part is evaluated again under the base, nothing before the point
      const back = await session.switchWeights(null, next);
      expect(back.rebuild.reused).toBeGreaterThanOrEqual(point - 64);
      expect(await check(session, next, undefined)).toBeLessThanOrEqual(TOLERANCE);
      expect(session.laneStates().map((l) => l.weights)).toEqual(["base"]);
    } finally {
      await session.close();
    }
  });

  it("a later invocation moves the point: what the adapter computed before it is evaluated again under the base", async () => {
    const session = await engine.openSession({ adapter: "verify" });
    try {
      const conv = invoked(1);
      await session.prefill(conv);
      expect(await check(session, conv, lastOccurrence(engine.renderTokens(conv), invocation))).toBeLessThanOrEqual(
        TOLERANCE,
      );
      const later: Conversation = {
        ...conv,
        turns: [
          ...conv.turns,
          { role: "assistant", text: "Looking." },
          { role: "user", text: `${DEMO_INVOCATION} and its length?` },
        ],
      };
      const point = lastOccurrence(engine.renderTokens(later), invocation);
      expect(point).toBeGreaterThan(lastOccurrence(engine.renderTokens(conv), invocation));
      expect(await check(session, later, point)).toBeLessThanOrEqual(TOLERANCE);
    } finally {
      await session.close();
    }
  });

  it("an adapter whose invocation sequence is absent contributes nothing: the base's log-probs, nothing evaluated", async () => {
    const session = await engine.openSession();
    try {
      const conv = scriptedTrajectory(2);
      await session.prefill(conv);
      const base = await session.nextTokenLogProbs(conv);
      const report = await session.switchWeights("verify", conv);
      expect(report.rebuild.tokens).toBe(0);
      expect(session.activeAdapter).toBe("verify");
      expect(maxAbsDiff(base, await session.nextTokenLogProbs(conv))).toBe(0);
      expect(await check(session, conv, undefined)).toBeLessThanOrEqual(TOLERANCE);
      // the invocation arrives later in the history: from then on the adapter applies
      const conv2 = invoked(2);
      expect(await check(session, conv2, lastOccurrence(engine.renderTokens(conv2), invocation))).toBeLessThanOrEqual(
        TOLERANCE,
      );
    } finally {
      await session.close();
    }
  });

  it("from another adapter, and back: the base lane serves the aLoRA, the other adapter's lane stays", async () => {
    const session = await engine.openSession();
    try {
      await session.switchWeights("plan", scriptedTrajectory(1));
      const conv = invoked(2);
      await session.switchWeights("verify", conv);
      expect(await check(session, conv, lastOccurrence(engine.renderTokens(conv), invocation))).toBeLessThanOrEqual(
        TOLERANCE,
      );
      const conv3 = invoked(3);
      const plan = await session.switchWeights("plan", conv3);
      expect(plan.rebuild.reused).toBeGreaterThan(0);
      expect(
        maxAbsDiff(
          await reference.nextTokenLogProbs(
            [{ filePath: demo.adapters.plan!, scale: 1 }],
            engine.renderTokens(conv3),
            session.cacheReplay(),
          ),
          await session.nextTokenLogProbs(conv3),
        ),
      ).toBeLessThanOrEqual(TOLERANCE);
      expect(
        session
          .laneStates()
          .map((l) => l.weights)
          .sort(),
      ).toEqual(["base", "plan"]);
    } finally {
      await session.close();
    }
  });

  it("applies alone: a set with another adapter is refused, and nothing changes", async () => {
    const session = await engine.openSession();
    try {
      await expect(session.switchWeights(["verify", "plan"], scriptedTrajectory(1))).rejects.toBeInstanceOf(
        InvalidAdapterSetError,
      );
      expect(session.activeAdapter).toBeNull();
    } finally {
      await session.close();
    }
  });

  it("the planted bug: an invocation point off by one does NOT match the reference", async () => {
    const planted = await openInvocationOffByOneSession(engine);
    try {
      const conv = invoked(2);
      await planted.prefill(conv);
      await planted.switchWeights("verify", conv);
      const diff = await check(planted, conv, lastOccurrence(engine.renderTokens(conv), invocation));
      console.log(`planted bug (invocation point off by one): max |delta log-prob| vs reference ${diff}`);
      expect(diff).toBeGreaterThan(1e-3);
    } finally {
      await planted.close();
    }
  });

  it("under rebuild: the history is evaluated under the base up to the point, then under the adapter", async () => {
    const rebuild = await engineWith("rebuild");
    const session = await rebuild.openSession();
    try {
      const conv = invoked(2);
      const report = await session.switchWeights("verify", conv);
      expect(report.rebuild.reused).toBe(0);
      const tokens = rebuild.renderTokens(conv);
      const want = await reference.nextTokenLogProbs(
        verify,
        tokens,
        session.cacheReplay(),
        lastOccurrence(tokens, invocation),
      );
      expect(maxAbsDiff(want, await session.nextTokenLogProbs(conv))).toBeLessThanOrEqual(TOLERANCE);
    } finally {
      await session.close();
    }
  });
});
