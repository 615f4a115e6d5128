import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import type { Conversation, EngineSession } from "../../src/engine/index.js";
import { LocalEngine, type LocalEngineOptions } from "../../src/engines/local/index.js";
import { loadSharedOneTokenRoundsEngine } from "../../src/engines/local/localTesting.js";
import { GEMMA_TEST_ADAPTERS, realModelAdapterPaths } from "../../testkit/realModelAdapters.js";
import { scriptedTrajectory } from "../../testkit/scriptedTrajectory.js";
import { gemma } from "../helpers/gemma.js";
import { quietLogger, TEST_BINDING, TEST_THREADS } from "../helpers/engine.js";

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
function gemmaOptions(sequences: number): Promise<LocalEngineOptions> {
  return gemma().then(({ model }) => ({
    modelPath: model,
    gpu: false,
    threads: TEST_THREADS,
    binding: TEST_BINDING,
    contextSize: 2048,
    sequencesPerContext: sequences,
    maxContexts: 1,
    batchSize: 128,
    batchInvariant: true,
    logger: quietLogger(),
  }));
}

async function loadGemma(sequences: number): Promise<LocalEngine> {
  return LocalEngine.load(await gemmaOptions(sequences));
}

/** `engine` with the `plan` test LoRA resident. */
async function withPlan(engine: LocalEngine): Promise<LocalEngine> {
  const paths = realModelAdapterPaths(GEMMA_TEST_ADAPTERS);
  await engine.addAdapter({ alias: "plan", filePath: paths.plan, scale: 1 });
  return engine;
}

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
async function turn(engine: LocalEngine, conversation: Conversation): Promise<Token[]> {
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

  constructor(
    private readonly engine: LocalEngine,
    prompts: readonly Conversation[],
  ) {
    this.loops = prompts.map((prompt) => this.loop(prompt));
  }

  private async loop(prompt: Conversation): Promise<void> {
    const session = await this.engine.openSession({ adapter: "plan" });
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

/**
 * The measured turn alone, then again while the busy sessions generate; the rounds the busy sessions took between
 * the measured turn's, and the largest log-prob difference.
 */
async function aloneAndLoaded(engine: LocalEngine) {
  const alone = await turn(engine, MEASURED);
  expect(alone.length).toBeGreaterThan(16);
  const before = engine.cacheStats().decodeRounds!;
  const busy = new Busy(engine, BUSY);
  let loaded: Token[];
  try {
    // the busy sessions are past their first prompts and decoding when the measured turn starts
    await expect.poll(() => busy.turns, { timeout: 120_000 }).toBeGreaterThanOrEqual(BUSY.length);
    loaded = await turn(engine, MEASURED);
  } finally {
    await busy.stop();
  }
  const after = engine.cacheStats().decodeRounds!;
  const worst = Math.max(...alone.map((a, i) => Math.abs(a.logprob - (loaded[i]?.logprob ?? Infinity))));
  return { alone, loaded, rounds: after.rounds - before.rounds, decodes: after.decodes - before.decodes, worst };
}

describe("a session's tokens do not depend on the engine's load (Gemma 3 270M)", () => {
  let engine: LocalEngine;
  beforeAll(async () => {
    engine = await withPlan(await loadGemma(4));
  });
  afterAll(async () => {
    await engine?.dispose();
  });

  it("a greedy turn gives bit-identical tokens and log-probs alone and beside 3 generating sessions", async () => {
    const { alone, loaded, rounds, decodes, worst } = await aloneAndLoaded(engine);
    // the load was real: the busy sessions' decodes took rounds between the measured turn's, each a round of its own
    expect(rounds).toBeGreaterThan(alone.length);
    expect(decodes).toBe(rounds);
    expect(loaded.map((l) => l.token)).toEqual(alone.map((a) => a.token));
    expect(worst, `max |delta log-prob| alone vs loaded: ${worst}`).toBe(0);
  });

  /**
   * Why every decode is its own round (docs/models.md, "The same tokens under any load"): sharing only the one-token
   * decode step among sessions under the same weights, everything else as above, moved this turn's log-probs by 0.072
   * nats from its 15th token (prebuilt binding, and the source build; 0.93 from the 5th token, the tokens changed from
   * the 9th, on a build with GGML_CPU_REPACK=OFF). About 90 s: run with WEACT_MEASURE_SHARED_ROUNDS=1.
   */
  it.runIf(process.env.WEACT_MEASURE_SHARED_ROUNDS === "1")(
    "one-token decodes batched across sessions (planted) change the turn: the check above catches it",
    async () => {
      const planted = await withPlan(await loadSharedOneTokenRoundsEngine(await gemmaOptions(4)));
      try {
        const { loaded, alone, rounds, decodes, worst } = await aloneAndLoaded(planted);
        expect(decodes).toBeGreaterThan(rounds); // decodes did share rounds
        process.stdout.write(
          `one-token decodes shared: max |delta log-prob| ${worst} from token ${alone.findIndex((a, i) => a.logprob !== loaded[i]?.logprob)}\n`,
        );
        expect(worst).toBeGreaterThan(0);
      } finally {
        await planted.dispose();
      }
    },
  );
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
