/**
 * One replayed soft trajectory under one cache strategy, in its own process; prints its figures as JSON.
 * node dist/bench/cacheTrajectory.js rebuild|reuse MODEL '{"plan":PATH,"search":PATH,"write":PATH}'
 */
import { LocalEngine } from "../src/engines/local/index.js";
import type { CacheStrategy } from "../src/engine/index.js";
import { scriptedTrajectory } from "../testkit/scriptedTrajectory.js";
import { createLogger } from "../src/log.js";
import type { TrajectoryFigures } from "./cache.js";

/** 12 switches: the base picks plan, search twice, plan again, search, then write, releasing in between. */
const SCRIPT: (string | null)[] = [
  "plan",
  null,
  "search",
  null,
  "search",
  null,
  "plan",
  null,
  "search",
  null,
  "write",
  null,
];

async function main() {
  const [strategy, modelPath, adapters] = process.argv.slice(2) as [CacheStrategy, string, string];
  const logger = createLogger(process.env.WEACT_LOG_LEVEL ?? "warn");
  const engine = await LocalEngine.load({ modelPath, gpu: false, logger, cache: { strategy } });
  for (const [alias, filePath] of Object.entries(JSON.parse(adapters) as Record<string, string>))
    await engine.addAdapter({ alias, filePath, scale: 1 });
  const session = await engine.openSession();
  const started = performance.now();
  let steps = 1;
  await session.prefill(scriptedTrajectory(steps));
  const f: TrajectoryFigures = {
    strategy,
    switches: 0,
    historyTokens: 0,
    switchMs: 0,
    modelMs: 0,
    wallMs: 0,
    evaluated: 0,
    reused: 0,
    restored: 0,
    maxRssMB: 0,
  };
  for (const target of SCRIPT) {
    steps += 1; // the load/release exchange (or the stage's tool exchange it follows): ~240 tokens, ~4k in all
    const conv = scriptedTrajectory(steps);
    const t = performance.now();
    const r = await session.switchWeights(target, conv);
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
