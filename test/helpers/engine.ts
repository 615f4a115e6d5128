import { LocalEngine, type BindingSetting, type CacheOptions } from "../../src/engines/local/index.js";
import type { Conversation } from "../../src/engine/index.js";
import { demoWeightPaths } from "../../src/demo/demoWeights.js";
import { WEIGHT_FUNCTIONS } from "../../testkit/scriptedTrajectory.js";
import { createLogger } from "../../src/log.js";
import { PACKAGE_ROOT } from "../../src/paths.js";

export const demo = demoWeightPaths(PACKAGE_ROOT);
/** One llama.cpp thread per test process: vitest runs two files at once on the two cores CI has. */
export const TEST_THREADS = 1;
/**
 * The same weights computed in another decode split (a batch shared with other sessions, a sequence laid out by its
 * history) on the demo model: about three times its batch-split noise floor (1.6e-3 to 3.0e-3, measured on every run
 * by test/engine/conformance-local.test.ts), far below what other weights move (more than 0.1).
 */
export const DEMO_BATCH_SPLIT_TOLERANCE = 1e-2;
/**
 * node-llama-cpp's binding the engine suites run on: "prebuilt" in `npm test`; `npm run check:binding` runs them on the
 * source build (WEACT_TEST_BINDING=source). Engines and references of one process share it: a process loads one binding.
 */
export const TEST_BINDING: BindingSetting = testBinding(process.env.WEACT_TEST_BINDING);
function testBinding(value: string | undefined): BindingSetting {
  if (value === undefined || value === "") return "prebuilt";
  if (value === "prebuilt" || value === "source" || value === "auto") return value;
  throw new Error(`WEACT_TEST_BINDING=${value}: use prebuilt, source or auto`);
}
export const quietLogger = () => createLogger(process.env.WEACT_LOG_LEVEL ?? "warn");

/** The real engine on the demo model, CPU only, with the default library resident. */
export async function demoEngine(
  opts: {
    adapters?: string[];
    sequencesPerContext?: number;
    maxContexts?: number;
    batchSize?: number;
    cache?: CacheOptions;
  } = {},
): Promise<LocalEngine> {
  const engine = await LocalEngine.load({
    modelPath: demo.model,
    gpu: false,
    threads: TEST_THREADS,
    binding: TEST_BINDING,
    contextSize: 4096,
    sequencesPerContext: opts.sequencesPerContext ?? 4,
    maxContexts: opts.maxContexts,
    batchSize: opts.batchSize,
    cache: opts.cache,
    logger: quietLogger(),
  });
  for (const alias of opts.adapters ?? ["plan", "search", "write"]) {
    await engine.addAdapter({ alias, filePath: demo.adapters[alias]!, scale: 1 });
  }
  return engine;
}

export { WEIGHT_FUNCTIONS };

export function conversation(user: string, extra: Conversation["turns"] = []): Conversation {
  return {
    turns: [{ role: "system", text: "You are a research agent." }, { role: "user", text: user }, ...extra],
    functions: WEIGHT_FUNCTIONS,
  };
}

/** Largest |a - b| over the tokens of `a` (both full distributions over the vocabulary). */
export function maxAbsDiff(a: Map<number, number>, b: Map<number, number>): number {
  let d = 0;
  for (const [token, v] of a) d = Math.max(d, Math.abs(v - (b.get(token) ?? -Infinity)));
  return d;
}
