import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import type { Conversation, EngineSession } from "../../src/engine/index.js";
import { LocalEngine } from "../../src/engines/local/index.js";
import { GEMMA_TEST_ADAPTERS, realModelAdapterPaths } from "../../testkit/realModelAdapters.js";
import { scriptedTrajectory } from "../../testkit/scriptedTrajectory.js";
import { gemma } from "../helpers/gemma.js";
import { quietLogger, TEST_THREADS } from "../helpers/engine.js";

vi.setConfig({ testTimeout: 300_000, hookTimeout: 300_000 });

/**
 * model.batchInvariant on Gemma 3 270M, where a different batch split moves a log-prob by up to 0.97 nats: one
 * session's greedy turn under `plan`, alone, then again while three other sessions generate under `plan` the whole
 * time (their one-token decodes share its rounds, their prompts are evaluated between its decodes). Every generated
 * token and its log-prob must be bit-identical. With the setting off (flash attention, prompt pieces batched beside
 * other sessions' decodes) the same check measured differences of tenths of a nat.
 */
type Token = { token: number; logprob: number };
/** Its position passes 320 mid-turn, where a decode batched beside other sessions' was measured 1.05 nats off. */
const MEASURED: Conversation = scriptedTrajectory(1);
/** No end of turn and no call (Gemma's call marker): every turn writes its whole length of text. */
const TEXT_ONLY = { "<end_of_turn>": -100, "<eos>": -100, "||": -100 };
/** The busy sessions' prompts: other lengths, so their prompt pieces and decodes land at other points. */
const BUSY: Conversation[] = [2, 4, 5].map((steps) => scriptedTrajectory(steps));

/** Gemma 3 270M on one context of `sequences` sequences, batch-invariant (and so with a full sliding-window cache). */
async function loadGemma(sequences: number): Promise<LocalEngine> {
  return LocalEngine.load({
    modelPath: (await gemma()).model,
    gpu: false,
    threads: TEST_THREADS,
    contextSize: 2048,
    sequencesPerContext: sequences,
    maxContexts: 1,
    batchSize: 128,
    batchInvariant: true,
    logger: quietLogger(),
  });
}

let engine: LocalEngine;
beforeAll(async () => {
  engine = await loadGemma(4);
  const paths = realModelAdapterPaths(GEMMA_TEST_ADAPTERS);
  await engine.addAdapter({ alias: "plan", filePath: paths.plan, scale: 1 });
});
afterAll(async () => {
  await engine?.dispose();
});

/** A greedy turn under `plan`: each generated token with its log-prob. */
async function turnIn(session: EngineSession, conversation: Conversation, maxTokens: number): Promise<Token[]> {
  const result = await session.generate(conversation, {
    maxTokens,
    temperature: 0,
    topLogprobs: 1,
    tokenBias: TEXT_ONLY,
  });
  return result.logprobs!.map((l) => ({ token: l.token, logprob: l.logprob }));
}

/** A new session's greedy turn under `plan`. */
async function turn(conversation: Conversation): Promise<Token[]> {
  const session = await engine.openSession({ adapter: "plan" });
  try {
    return await turnIn(session, conversation, 24);
  } finally {
    await session.close();
  }
}

/** Sessions that generate turn after turn under `plan` until stopped (each turn cuts back to its prompt). */
class Busy {
  private stopping = false;
  turns = 0;
  private readonly loops: Promise<void>[];

  constructor(prompts: readonly Conversation[]) {
    this.loops = prompts.map((prompt) => this.loop(prompt));
  }

  private async loop(prompt: Conversation): Promise<void> {
    const session = await engine.openSession({ adapter: "plan" });
    try {
      while (!this.stopping) {
        await turnIn(session, prompt, 12);
        this.turns++;
      }
    } finally {
      await session.close();
    }
  }

  async stop(): Promise<void> {
    this.stopping = true;
    await Promise.all(this.loops);
  }
}

describe("a session's tokens do not depend on the engine's load (Gemma 3 270M)", () => {
  it("a greedy turn gives bit-identical tokens and log-probs alone and beside 3 generating sessions", async () => {
    const alone = await turn(MEASURED);
    expect(alone.length).toBeGreaterThan(16);

    const before = engine.cacheStats().decodeRounds!;
    const busy = new Busy(BUSY);
    let loaded: Token[];
    try {
      // the busy sessions are past their first prompts and decoding when the measured turn starts
      await expect.poll(() => busy.turns, { timeout: 120_000 }).toBeGreaterThanOrEqual(BUSY.length);
      loaded = await turn(MEASURED);
    } finally {
      await busy.stop();
    }
    const after = engine.cacheStats().decodeRounds!;
    // the load was real: the busy sessions' decodes took rounds between the measured turn's
    expect(after.rounds - before.rounds).toBeGreaterThan(alone.length);

    const worst = Math.max(...alone.map((a, i) => Math.abs(a.logprob - (loaded[i]?.logprob ?? Infinity))));
    expect(loaded.map((l) => l.token)).toEqual(alone.map((a) => a.token));
    expect(worst, `max |delta log-prob| alone vs loaded: ${worst}`).toBe(0);
  });
});

/**
 * A session's idle lane spilled to disk while another session needs its sequence, then read back when the session
 * returns to its weights: the turn after must be what it is on an engine with room for every lane.
 */
describe("a lane spilled and read back gives the same tokens (Gemma 3 270M)", () => {
  async function trajectory(sequences: number, other: boolean): Promise<Token[]> {
    const e = await loadGemma(sequences);
    try {
      const paths = realModelAdapterPaths(GEMMA_TEST_ADAPTERS);
      for (const alias of ["plan", "search"] as const) await e.addAdapter({ alias, filePath: paths[alias], scale: 1 });
      const a = await e.openSession();
      await a.switchWeights("plan", scriptedTrajectory(2));
      await a.switchWeights("search", scriptedTrajectory(3)); // the plan lane is idle
      if (other) {
        const b = await e.openSession({ adapter: "plan" }); // needs a sequence: a's idle plan lane is spilled
        await b.prefill(scriptedTrajectory(1));
        expect(a.laneStates().find((l) => l.weights === "plan")).toMatchObject({ state: "spilled" });
        await b.close();
      }
      const back = await a.switchWeights("plan", scriptedTrajectory(4));
      if (other) expect(back.rebuild.restored).toBeGreaterThan(0);
      const result = await a.generate(scriptedTrajectory(4), {
        maxTokens: 16,
        temperature: 0,
        topLogprobs: 1,
        tokenBias: TEXT_ONLY,
      });
      await a.close();
      return result.logprobs!.map((l) => ({ token: l.token, logprob: l.logprob }));
    } finally {
      await e.dispose();
    }
  }

  it("a turn after the lane came back from disk equals the turn whose lane stayed live", async () => {
    const live = await trajectory(4, false);
    const spilled = await trajectory(2, true);
    expect(spilled).toEqual(live);
  });
});
