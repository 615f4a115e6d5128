import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import type { CacheStrategy, Conversation, Engine, EngineSession } from "../src/engine/index.js";
import { conversationOf } from "./engine.js";
import { fmt, median } from "./stats.js";

export const STRATEGIES: readonly CacheStrategy[] = ["rebuild", "reuse"];

/** `conv` with one more user turn of about `tokens` tokens: what a stage appends between two switches. */
function appended(engine: Engine, conv: Conversation, tokens: number): Conversation {
  const withText = (repeats: number): Conversation => ({
    ...conv,
    turns: [...conv.turns, { role: "user", text: "and more evidence ".repeat(repeats) }],
  });
  const length = (repeats: number) => engine.renderTokens(withText(repeats)).length;
  const perRepeat = length(11) - length(10);
  return withText(Math.max(1, Math.round((tokens - (length(0) - engine.renderTokens(conv).length)) / perRepeat)));
}

const cost = (r: { switchMs: number; queueMs: number; rebuild: { ms: number } }) =>
  r.switchMs + r.queueMs + r.rebuild.ms;

/**
 * S2: A -> B -> A with a long history and a few tokens appended while B was active. The first switch
 * evaluates the whole history under B; the second, under `reuse`, only what A has not seen.
 */
export async function returnSwitch(engine: Engine, historyTokens: number, newTokens: number, reps: number) {
  const conv = conversationOf(engine, historyTokens);
  const first: number[] = [];
  const second: number[] = [];
  let tokens = { first: 0, second: 0 };
  for (let i = -1; i < reps; i++) {
    const s: EngineSession = await engine.openSession({ adapter: "plan" });
    try {
      await s.prefill(conv); // A holds the history
      const a = await s.switchWeights("search", conv);
      const later = appended(engine, conv, newTokens);
      const b = await s.switchWeights("plan", later);
      if (i >= 0) {
        first.push(cost(a));
        second.push(cost(b));
      }
      tokens = { first: a.rebuild.tokens, second: b.rebuild.tokens };
    } finally {
      await s.close();
    }
  }
  return { firstMs: median(first), secondMs: median(second), tokens };
}

export interface TrajectoryFigures {
  strategy: CacheStrategy;
  switches: number;
  historyTokens: number;
  switchMs: number;
  modelMs: number;
  wallMs: number;
  evaluated: number;
  reused: number;
  restored: number;
  maxRssMB: number;
}

/**
 * S3 and S4: a replayed soft trajectory in a process of its own (so its peak RSS is its own), under one
 * strategy with its default budget.
 */
export async function trajectoryInChild(
  strategy: CacheStrategy,
  modelPath: string,
  adapters: Record<string, string>,
): Promise<TrajectoryFigures> {
  const child = fileURLToPath(new URL("./cacheTrajectory.js", import.meta.url));
  const args = [child, strategy, modelPath, JSON.stringify(adapters)];
  const { stdout } = await promisify(execFile)(process.execPath, args, { maxBuffer: 1 << 20, env: process.env });
  return JSON.parse(stdout.trim().split("\n").at(-1)!) as TrajectoryFigures;
}

/** S3/S4 side by side: alternating runs of both strategies, medians. */
export async function trajectoryComparison(modelPath: string, adapters: Record<string, string>, reps: number) {
  const runs: Record<CacheStrategy, TrajectoryFigures[]> = { rebuild: [], reuse: [] };
  for (let i = 0; i < reps; i++)
    for (const s of STRATEGIES) runs[s].push(await trajectoryInChild(s, modelPath, adapters));
  const med = (s: CacheStrategy, k: keyof TrajectoryFigures) => median(runs[s].map((r) => r[k] as number));
  const rows = STRATEGIES.map((s) => ({
    strategy: s,
    switches: runs[s][0]!.switches,
    historyTok: runs[s][0]!.historyTokens,
    evaluatedTok: runs[s][0]!.evaluated,
    reusedTok: runs[s][0]!.reused,
    restoredTok: runs[s][0]!.restored,
    switchMs: fmt(med(s, "switchMs")),
    modelMs: fmt(med(s, "modelMs")),
    wallMs: fmt(med(s, "wallMs")),
    peakRssMB: fmt(med(s, "maxRssMB"), 1),
  }));
  const ratios = {
    switchTime_rebuild_over_reuse: fmt(med("rebuild", "switchMs") / med("reuse", "switchMs"), 2),
    wallTime_rebuild_over_reuse: fmt(med("rebuild", "wallMs") / med("reuse", "wallMs"), 2),
    peakRss_reuse_over_rebuild: fmt(med("reuse", "maxRssMB") / med("rebuild", "maxRssMB"), 3),
  };
  return { rows, ratios };
}
