import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { LocalEngine } from "../../src/engines/local/index.js";
import { Session } from "../../src/sessions/Session.js";
import type { HistoryMessage } from "../../src/sessions/history.js";
import { demoEngine, maxAbsDiff, WEIGHT_FUNCTIONS } from "../helpers/engine.js";
import { referenceNextTokenLogProbs } from "../../src/engines/local/localTesting.js";

/**
 * Eliding older tool results to make room in the window changes the middle of the prompt: the cache must
 * still give exactly what a fresh context computes over the new tokens (the same check as every switch).
 */
const TOLERANCE = 1e-4;
const FUNCTIONS = {
  ...WEIGHT_FUNCTIONS,
  search: {
    description: "Search the corpus.",
    parameters: { type: "object", properties: { query: { type: "string" } } },
  },
};
let engine: LocalEngine;

beforeAll(async () => {
  engine = await demoEngine({ cache: { strategy: "reuse" } });
});
afterAll(async () => engine?.dispose());

function exchange(i: number): HistoryMessage[] {
  const call = { id: `call_${i}`, name: "search", arguments: { query: `seine fact ${i}` } };
  return [
    { role: "assistant", content: `Step ${i}: I look it up.`, adapter: "search", author: "model", toolCalls: [call] },
    {
      role: "tool",
      callId: call.id,
      name: "search",
      content: `result ${i}: ${"The Seine crosses Paris and reaches the English Channel. ".repeat(6)}`,
      isError: false,
      internal: false,
    },
  ];
}

describe("elision for room in the window", () => {
  it("the oldest results become the marker, the prompt shrinks, and the next-token log-probs equal the replayed reference", async () => {
    const engineSession = await engine.openSession();
    const session = new Session(
      "s_test",
      "test",
      "Which river flows through Paris?",
      engineSession,
      FUNCTIONS,
      ["search"],
      { keepToolResults: 5, weightActions: true },
      "You are a research agent.",
    );
    try {
      session.append(...exchange(1), ...exchange(2), ...exchange(3));
      await engineSession.switchWeights("search", session.conversation());
      const before = engineSession.promptTokens(session.conversation());
      const first = await engineSession.nextTokenLogProbs(session.conversation());
      expect(
        maxAbsDiff(
          await referenceNextTokenLogProbs(
            engine,
            "search",
            engine.renderTokens(session.conversation()),
            engineSession.cacheReplay(),
          ),
          first,
        ),
      ).toBeLessThan(TOLERANCE);

      for (const expected of ["call_1", "call_2"]) {
        const oldest = session.oldestVerbatimResult()!;
        expect(oldest.callId).toBe(expected);
        session.elide(oldest);
        const conv = session.conversation();
        const got = await engineSession.nextTokenLogProbs(conv);
        const want = await referenceNextTokenLogProbs(
          engine,
          "search",
          engine.renderTokens(conv),
          engineSession.cacheReplay(),
        );
        expect(maxAbsDiff(want, got)).toBeLessThan(TOLERANCE);
      }
      const after = engineSession.promptTokens(session.conversation());
      expect(after).toBeLessThan(before - 400);
      const results = session
        .conversation()
        .turns.flatMap((t) => (t.role === "assistant" ? (t.calls ?? []).map((c) => c.result) : []));
      expect(results[0]).toMatch(/^\[result of search elided \(\d+ characters\)/);
      expect(results[1]).toMatch(/^\[result of search elided/);
      expect(results[2]).toMatch(/^result 3: /);
      // the history itself keeps every result in full
      expect(session.history.filter((m) => m.role === "tool").every((m) => m.content.startsWith("result "))).toBe(true);
    } finally {
      await engineSession.close();
    }
  });
});
