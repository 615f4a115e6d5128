/**
 * One replayed soft trajectory under one cache strategy, in its own process; prints its figures as JSON.
 * node dist/bench/cacheTrajectory.js rebuild|reuse EVIDENCE [MODEL]
 */
import { Engine, type CacheStrategy } from "../native/index.js";
import { ensureDemoWeights } from "../src/demo/ensure.js";
import { demoWeightPaths } from "../src/demo/generate.js";
import { scriptedTrajectory } from "../src/demo/trajectory.js";
import { createLogger } from "../src/log.js";
import { PACKAGE_ROOT } from "../src/paths.js";
import type { TrajectoryFigures } from "./cache.js";

/** 12 switches: the base picks plan, search twice, plan again, search, then write, releasing in between. */
const SCRIPT: (string | null)[] = ["plan", null, "search", null, "search", null, "plan", null, "search", null, "write", null];

async function main() {
  const [strategy, evidence, modelArg] = process.argv.slice(2) as [CacheStrategy, string, string | undefined];
  const logger = createLogger(process.env.WEACT_LOG_LEVEL ?? "warn");
  const big = modelArg === "big";
  const paths = big ? demoWeightPaths(PACKAGE_ROOT, true) : ensureDemoWeights(logger);
  const modelPath = big || !modelArg ? paths.model : modelArg;
  const engine = await Engine.load({ modelPath, gpu: false, logger, cache: { strategy } });
  for (const alias of ["plan", "search", "write"]) await engine.addAdapter({ alias, filePath: paths.adapters[alias]!, scale: 1 });
  const session = await engine.openSession();
  const started = performance.now();
  let steps = 1;
  await session.prefill(scriptedTrajectory(steps, Number(evidence)));
  const f: TrajectoryFigures = { strategy, switches: 0, historyTokens: 0, switchMs: 0, modelMs: 0, wallMs: 0, evaluated: 0, reused: 0, restored: 0, maxRssMB: 0 };
  for (const target of SCRIPT) {
    steps += 2; // the stage's tool exchange and the load/release exchange
    const conv = scriptedTrajectory(steps, Number(evidence));
    const t = performance.now();
    const r = await session.switchAdapter(target, conv);
    f.switchMs += performance.now() - t;
    f.switches++;
    f.evaluated += r.rebuild.tokens;
    f.reused += r.rebuild.reused;
    f.restored += r.rebuild.restored;
    const g = performance.now();
    await session.generate(conv, { maxTokens: 16 }); // the adapter acts
    f.modelMs += performance.now() - g;
    f.historyTokens = engine.renderTokens(conv).length;
  }
  f.wallMs = performance.now() - started;
  await session.close();
  await engine.dispose();
  f.maxRssMB = process.resourceUsage().maxRSS / 1024;
  process.stdout.write(JSON.stringify(f) + "\n");
}

main().catch((err) => {
  process.stderr.write(`${(err as Error).stack}\n`);
  process.exit(1);
});
