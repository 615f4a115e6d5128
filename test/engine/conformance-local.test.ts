import { afterAll, beforeAll } from "vitest";
import { LocalEngine, type LocalEngineSession } from "../../src/engines/local/index.js";
import { MIN_DECODE_TOKENS, openStaleSession, PlainReference } from "../../src/engines/local/testing.js";
import { describeEngineConformance } from "../helpers/conformance.js";
import { demo, quietLogger, TEST_BINDING, TEST_THREADS } from "../helpers/engine.js";

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

describeEngineConformance<LocalEngine>("local (node-llama-cpp)", {
  async makeEngine(strategy, adapters) {
    // the sizes of test/helpers/engine.ts's demoEngine, which the moved tests ran on
    const engine = await LocalEngine.load({
      modelPath: demo.model,
      gpu: false,
      threads: TEST_THREADS,
      binding: TEST_BINDING,
      contextSize: CONTEXT_SIZE,
      sequencesPerContext: 4,
      maxContexts: 2,
      cache: { strategy },
      logger: quietLogger(),
    });
    for (const [alias, filePath] of Object.entries(adapters)) await engine.addAdapter({ alias, filePath, scale: 1 });
    return engine;
  },
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
});
