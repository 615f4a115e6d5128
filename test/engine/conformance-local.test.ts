import { afterAll, beforeAll, expect, it } from "vitest";
import { scriptedTrajectory } from "../../testkit/scriptedTrajectory.js";
import type { CacheStrategy } from "../../src/engine/index.js";
import { LocalEngine, type LocalEngineSession } from "../../src/engines/local/index.js";
import {
  loadWeightBlindRoundsEngine,
  MIN_DECODE_TOKENS,
  openStaleSession,
  PlainReference,
} from "../../src/engines/local/localTesting.js";
import { describeEngineConformance, maxAbsDiff } from "../helpers/conformance.js";
import { demo, DEMO_BATCH_SPLIT_TOLERANCE, quietLogger, TEST_BINDING, TEST_THREADS } from "../helpers/engine.js";

const CONTEXT_SIZE = 4096;
let reference: PlainReference;
beforeAll(async () => {
  reference = await PlainReference.load({
    modelPath: demo.model,
    threads: TEST_THREADS,
    contextSize: CONTEXT_SIZE,
    binding: TEST_BINDING,
  });
});
afterAll(async () => reference?.dispose());

/** The sizes of test/helpers/engine.ts's demoEngine, which the moved tests ran on. */
const options = (strategy: CacheStrategy) => ({
  modelPath: demo.model,
  gpu: false as const,
  threads: TEST_THREADS,
  binding: TEST_BINDING,
  contextSize: CONTEXT_SIZE,
  sequencesPerContext: 4,
  maxContexts: 2,
  cache: { strategy },
  logger: quietLogger(),
});

async function withAdapters(engine: LocalEngine, adapters: Readonly<Record<string, string>>): Promise<LocalEngine> {
  for (const [alias, filePath] of Object.entries(adapters)) await engine.addAdapter({ alias, filePath, scale: 1 });
  return engine;
}

describeEngineConformance<LocalEngine>("local (node-llama-cpp)", {
  makeEngine: async (strategy, adapters) => withAdapters(await LocalEngine.load(options(strategy)), adapters),
  makeCrossWeightsEngine: async (strategy, adapters) =>
    withAdapters(await loadWeightBlindRoundsEngine(options(strategy)), adapters),
  // a fresh context from the files, replaying the session's decodes (llama.cpp's numerics depend on the batch split)
  reference: (engine, session, weights, conversation) =>
    reference.nextTokenLogProbs(
      weights,
      engine.renderTokens(conversation),
      (session as LocalEngineSession).cacheReplay(),
    ),
  adapters: {
    plan: demo.adapters.plan!,
    search: demo.adapters.search!,
    write: demo.adapters.write!,
    writeV2: demo.adapters["write-v2"]!,
  },
  openStaleSession,
  decodeFloor: MIN_DECODE_TOKENS,
  concurrentTolerance: DEMO_BATCH_SPLIT_TOLERANCE,
  // model.batchInvariant (the default): a session's decodes never share a batch; the planted cross-weights engine shares
  rounds: "alone",
});

/**
 * The batch-split noise floor the interleaved case's tolerance rests on: the same tokens under the same weights,
 * decoded in other splits (whole, with a one-token-at-a-time tail as generation decodes, in two parts), give next-token
 * log-probs this far apart on the demo model (1.6e-3 to 3.0e-3 over three history lengths: this test prints them). A session
 * decoded in one batch with other sessions gets such other splits; the reference replays its own decodes alone.
 */
it("the batch-split noise floor on the demo model stays under half the interleaved case's tolerance", async () => {
  const engine = await LocalEngine.load(options("rebuild"));
  try {
    const floors: number[] = [];
    for (const steps of [1, 3, 6]) {
      const tokens = engine.renderTokens(scriptedTrajectory(steps));
      const length = tokens.length - 1;
      const one = (start: number, end = start + 1) => ({ start, tokens: tokens.slice(start, end) });
      const splits = [
        [one(0, length - 40), ...Array.from({ length: 40 }, (_, i) => one(length - 40 + i))],
        [one(0, 100), one(100, length)],
      ];
      const whole = await reference.nextTokenLogProbs([], tokens);
      for (const decodes of splits)
        floors.push(maxAbsDiff(whole, await reference.nextTokenLogProbs([], tokens, { decodes, length })));
    }
    console.log("batch-split noise floor (max |delta log-prob|):", floors.map((f) => f.toExponential(1)).join(" "));
    expect(Math.max(...floors)).toBeLessThanOrEqual(DEMO_BATCH_SPLIT_TOLERANCE / 2);
  } finally {
    await engine.dispose();
  }
});
