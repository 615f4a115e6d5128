import { beforeAll, expect, it, vi } from "vitest";
import type { CacheStrategy } from "../../src/engine/index.js";
import { LocalEngine, type LocalEngineSession } from "../../src/engines/local/index.js";
import {
  MIN_DECODE_TOKENS,
  openStaleSession,
  PlainReference,
  referenceNextTokenLogProbs,
} from "../../src/engines/local/localTesting.js";
import { readFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { join } from "node:path";
import { PACKAGE_ROOT } from "../../src/paths.js";
import { fetchModel, MODELS } from "../../src/modelFiles/index.js";
import { modelCacheDir } from "../../src/modelFiles/cacheDir.js";
import { qwenTestAdapters, realModelAdapterPaths, testAdapterDir } from "../../testkit/realModelAdapters.js";
import { describeEngineConformance, maxAbsDiff } from "../helpers/conformance.js";
import { quietLogger } from "../helpers/engine.js";

// a real 0.5B model on the machine's cores (check:qwen runs alone): a check evaluates about a thousand tokens twice
vi.setConfig({ testTimeout: 300_000, hookTimeout: 300_000 });

const CONTEXT_SIZE = 2048;
const THREADS = availableParallelism();
/**
 * Against a replay of the session's own decodes the engine is exact (0 measured on every switch of both strategies).
 * The batch-split noise floor (the same tokens in other decode splits, below: 0.40 with a one-token-at-a-time tail) is
 * thousands of times larger, so a replay that missed a split would fail.
 */
const TOLERANCE = 1e-4;

const NAME = "qwen2.5-coder-0.5b-instruct";
/** Where fetch-model puts the model (the suites need the adapters' paths before the fetch runs). */
const model = join(modelCacheDir(), MODELS[NAME]!.fileName);
const adapters = realModelAdapterPaths(testAdapterDir(model));
// before the suites' engines load: the file fetched (once per machine) and its test adapters written
beforeAll(async () => {
  expect(await fetchModel(NAME, { logger: quietLogger() })).toBe(model);
  qwenTestAdapters(model);
});

async function qwenEngine(strategy: CacheStrategy): Promise<LocalEngine> {
  const engine = await LocalEngine.load({
    modelPath: model,
    gpu: false,
    threads: THREADS,
    contextSize: CONTEXT_SIZE,
    sequencesPerContext: 2,
    maxContexts: 1,
    batchSize: 128,
    chatTemplate: "jinja",
    cache: { strategy },
    logger: quietLogger(),
  });
  for (const alias of ["plan", "search", "write"] as const)
    await engine.addAdapter({ alias, filePath: adapters[alias], scale: 1 });
  return engine;
}

/** The engine's alias for each file the suite names (write-v2 is what `write` is refreshed to). */
const aliasOf = (file: string) =>
  file === adapters.writeV2 ? "write" : (["plan", "search", "write"] as const).find((a) => adapters[a] === file)!;

// the switches on both strategies (the whole suite runs on the demo model and every family)
describeEngineConformance<LocalEngine>("local on Qwen2.5-Coder-0.5B-Instruct", {
  strategies: ["rebuild", "reuse"],
  makeEngine: (strategy) => qwenEngine(strategy),
  reference: (engine, session, weights, conversation) =>
    referenceNextTokenLogProbs(
      engine,
      weights.map((w) => aliasOf(w.filePath)),
      engine.renderTokens(conversation),
      (session as LocalEngineSession).cacheReplay(),
    ),
  adapters: { plan: adapters.plan, search: adapters.search, write: adapters.write, writeV2: adapters.writeV2 },
  openStaleSession,
  decodeFloor: MIN_DECODE_TOKENS,
  tolerance: TOLERANCE,
  scope: "switches",
});

/**
 * The noise floor the tolerance is set against: the same tokens under the same weights, evaluated whole and in two
 * other splits (a one-token-at-a-time tail as generation decodes, two parts), on the reference's fresh contexts.
 */
it("the batch-split noise floor on Qwen2.5-Coder is far above the tolerance, and an adapter moves more", async () => {
  const reference = await PlainReference.load({ modelPath: model, threads: THREADS, contextSize: CONTEXT_SIZE });
  try {
    // about 900 tokens of the default corpus's prose
    const tokens = reference.tokenize(
      ["seine.md", "danube.txt", "nile.md", "rhine.md", "amazon.md", "everest.md"]
        .map((f) => readFileSync(join(PACKAGE_ROOT, "corpus", "geography", f), "utf8"))
        .join("\n"),
    );
    expect(tokens.length).toBeGreaterThan(400);
    const length = tokens.length - 1;
    const one = (start: number, end = start + 1) => ({ start, tokens: tokens.slice(start, end) });
    const whole = await reference.nextTokenLogProbs([], tokens);
    const floors: number[] = [];
    for (const decodes of [
      [one(0, length - 24), ...Array.from({ length: 24 }, (_, i) => one(length - 24 + i))],
      [one(0, 64), one(64, length)],
    ])
      floors.push(maxAbsDiff(whole, await reference.nextTokenLogProbs([], tokens, { decodes, length })));
    const adapterMoves = maxAbsDiff(
      whole,
      await reference.nextTokenLogProbs([{ filePath: adapters.plan, scale: 1 }], tokens),
    );
    console.log(
      `Qwen2.5-Coder-0.5B-Instruct (${THREADS} threads) over ${tokens.length} tokens: batch-split noise floor ${floors.map((f) => f.toFixed(3)).join(" ")}; the plan test adapter moves ${adapterMoves.toFixed(2)}`,
    );
    // the generation-style tail (one-token decodes) is the floor; pieces of two tokens or more split anywhere measured 0
    expect(Math.max(...floors)).toBeGreaterThan(100 * TOLERANCE);
    expect(adapterMoves).toBeGreaterThan(Math.max(...floors));
  } finally {
    await reference.dispose();
  }
});
