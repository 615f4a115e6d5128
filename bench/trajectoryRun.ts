/**
 * One run of the `trajectory` scenario on the local engine under one cache configuration, in a process of its
 * own; prints its figures as one JSON line. node dist/bench/trajectoryRun.js '<TrajectoryRunConfig as JSON>'
 */
import { LocalEngine } from "../src/engines/local/index.js";
import { nextWeights } from "../src/sessions/stateRule.js";
import { createLogger } from "../src/log.js";
import type { HistorySoFar } from "../src/engine/index.js";
import {
  openingConversation,
  runTool,
  toolTrajectory,
  type TrajectoryFigures,
  type TrajectoryRunConfig,
} from "./toolTrajectory.js";

async function main() {
  const config = JSON.parse(process.argv[2]!) as TrajectoryRunConfig;
  const logger = createLogger(process.env.WEACT_LOG_LEVEL ?? "warn");
  const engine = await LocalEngine.load({
    modelPath: config.modelPath,
    gpu: false,
    logger,
    threads: config.threads,
    cache: config.cache,
    ...(config.swaFullCache === undefined ? {} : { swaFullCache: config.swaFullCache }),
  });
  const rssMB = () => Number((process.memoryUsage().rss / 2 ** 20).toFixed(1));
  const rssLoadedMB = rssMB();
  const aliases = Object.keys(config.adapters);
  for (const [alias, filePath] of Object.entries(config.adapters))
    await engine.addAdapter({ alias, filePath, scale: 1 });
  const steps = toolTrajectory(config.switches, config.texts);
  const first = openingConversation();

  // a server that has served before: each weight set's first lane of an earlier session saved its prompt prefix
  const earlier = await engine.openSession({ promptScope: "server" });
  await earlier.prefill(first);
  for (const alias of aliases) await earlier.switchWeights(alias, first);
  await earlier.close();
  const rssWithContextsMB = rssMB(); // the contexts (KV cache, compute buffers) exist now

  const session = await engine.openSession({ promptScope: "server" });
  // the hints a server's session gives (Session.anticipateNext)
  const used = new Set<string>();
  const hint = (active: string | null, soFar?: HistorySoFar) => {
    if (active !== null) used.add(active);
    session.anticipate(
      nextWeights(active, aliases, undefined, used).map((a) => (a === null ? [] : [a])),
      soFar,
    );
  };
  let active: string | null = null;
  hint(null);
  const before = engine.cacheStats().evaluatedTokens;
  const f: TrajectoryFigures = {
    strategy: config.strategy,
    tools: config.tools,
    switches: 0,
    evaluatedTokens: 0,
    backgroundTokens: 0,
    criticalPathMs: 0,
    switchMs: 0,
    wallMs: 0,
    maxWaitForBackgroundMs: 0,
    maxBackgroundDecodeMs: 0,
    rssLoadedMB,
    rssWithContextsMB,
  };
  const debug = process.env.WEACT_BENCH_DEBUG
    ? (line: unknown) => process.stderr.write(`${JSON.stringify(line)}\n`)
    : () => undefined;
  const started = performance.now();
  for (const step of steps) {
    if (step.kind === "turn") {
      const r = await session.generate(step.conversation, { maxTokens: 16 });
      // what the caller still waited for after the switch: the lock, the weights, the prefill the switch left
      if (step.afterSwitch) f.criticalPathMs += r.timings.queueMs + r.timings.prefillMs;
      debug({
        turn: r.adapter,
        afterSwitch: step.afterSwitch,
        evaluated: r.tokens.evaluated,
        queueMs: r.timings.queueMs,
        prefillMs: r.timings.prefillMs,
        decodeMs: r.timings.decodeMs,
      });
    } else if (step.kind === "switch") {
      const t = performance.now();
      const r = await session.switchWeights(step.to, step.conversation);
      const ms = performance.now() - t;
      debug({ switch: step.to, callMs: ms, ...r.rebuild, background: session.backgroundWork() });
      f.switchMs += ms;
      f.criticalPathMs += ms;
      f.switches++;
      active = step.to;
      hint(active);
    } else {
      hint(active, step.soFar); // the session records the model's turn before its tool runs
      await runTool(step.name, step.ms, config.tools, config.work);
    }
  }
  f.wallMs = performance.now() - started;
  const after = engine.cacheStats().evaluatedTokens;
  f.backgroundTokens = after.background - before.background;
  f.evaluatedTokens = after.foreground - before.foreground + f.backgroundTokens;
  const waits = backgroundWaits(engine.decodeHolds());
  f.maxWaitForBackgroundMs = waits.maxWait;
  f.maxBackgroundDecodeMs = waits.maxDecode;
  await session.close();
  await engine.dispose();
  process.stdout.write(JSON.stringify(f) + "\n");
}

/** The longest a caller's decode waited on background decodes (one round at a time, every context), and the longest background decode. */
function backgroundWaits(holds: ReturnType<LocalEngine["decodeHolds"]>): { maxWait: number; maxDecode: number } {
  const background = holds.filter((h) => h.background);
  let maxWait = 0;
  for (const f of holds.filter((h) => !h.background)) {
    for (const b of background) {
      if (b.startedAt >= f.startedAt || b.endedAt <= f.queuedAt) continue;
      maxWait = Math.max(maxWait, Math.min(b.endedAt, f.startedAt) - Math.max(b.startedAt, f.queuedAt));
    }
  }
  const maxDecode = Math.max(0, ...background.map((b) => b.endedAt - b.startedAt));
  return { maxWait: Number(maxWait.toFixed(2)), maxDecode: Number(maxDecode.toFixed(2)) };
}

main().catch((err) => {
  process.stderr.write(`${(err as Error).stack}\n`);
  process.exit(1);
});
