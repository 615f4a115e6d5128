import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Logger } from "../src/log.js";
import { ensureDemoWeights } from "../src/demo/ensure.js";
import { fetchModel } from "../src/modelFiles/index.js";
import { demoTarget, gemmaTarget, localVariants, type ConcurrencyRow, type LocalVariant } from "./concurrency.js";
import { fmt, median, table } from "./stats.js";

/**
 * `npm run bench -- --scenario invariance [--model gemma-3-270m] [--rounds N] [--threads N] [--json]`: what a
 * session's tokens independent of the server's load cost. The concurrency scenario's client-driven load (load, turn,
 * release, turn; 16 tokens a turn) at 1, 4 and 16 sessions on the local engine with model.batchInvariant true and
 * false, each setting's server twice, alternating (true, false, true, false), so a shared machine's drift falls on
 * both; each count's turns/s is the median of its two runs. Target: invariant at most 15% fewer turns/s at 16 sessions
 * (invariant / not >= 0.85).
 */

const SESSION_COUNTS = [1, 4, 16] as const;
const REPEATS = 2;
/** At most this much slower at the most sessions: the price the setting may cost. */
const TARGET_RATIO = 0.85;
const VARIANTS: readonly LocalVariant[] = [
  { label: "batchInvariant true", model: { batchInvariant: true } },
  { label: "batchInvariant false", model: { batchInvariant: false } },
];

export interface InvarianceBenchOptions {
  /** gemma-3-270m (its shipped library) instead of the random demo model. */
  model?: string;
  rounds?: number;
  threads: number;
  json: boolean;
  logger: Logger;
}

export async function invarianceBench(options: InvarianceBenchOptions): Promise<void> {
  if (options.model && options.model !== "gemma-3-270m")
    throw new Error(`--scenario invariance --model ${options.model}: only gemma-3-270m (its shipped library) is known`);
  const target = options.model
    ? gemmaTarget(await fetchModel(options.model, { logger: options.logger }))
    : demoTarget(ensureDemoWeights(options.logger));
  const rounds = options.rounds ?? (options.model ? 1 : 3);
  const started = performance.now();
  const rows = await localVariants(
    target,
    mkdtempSync(join(tmpdir(), "weact-bench-")),
    SESSION_COUNTS,
    rounds,
    options.threads,
    VARIANTS,
    REPEATS,
  );
  const summary = summarise(rows);
  const ratios = ratiosOf(summary);
  const seconds = (performance.now() - started) / 1000;
  if (options.json) {
    for (const row of [...rows, ...summary, ...ratios])
      process.stdout.write(JSON.stringify({ scenario: "invariance", model: target.label, ...row }) + "\n");
    return;
  }
  process.stdout.write(
    `\n## model.batchInvariant true vs false on ${target.label}: concurrent client-driven sessions switching adapters (load, turn, release, turn; 16 tokens a turn, ${rounds} round(s)), ${options.threads} thread(s), each setting's server ${REPEATS} times alternating\n` +
      `${table(rows)}\n\nmedians\n${table(summary)}\n\n${table(ratios)}\n(${fmt(seconds, 0)} s)\n`,
  );
}

/** Per setting and session count: the median turns/s and p50 turn latency over the repetitions. */
function summarise(rows: readonly ConcurrencyRow[]): Record<string, string | number>[] {
  return VARIANTS.flatMap((v) =>
    SESSION_COUNTS.map((n) => {
      const runs = rows.filter((r) => r.backend === v.label && r.sessions === n);
      return {
        backend: v.label,
        sessions: n,
        turnsPerS: fmt(median(runs.map((r) => Number(r.turnsPerS)))),
        turnP50Ms: fmt(median(runs.map((r) => Number(r.turnP50Ms)))),
        decodesPerRound: fmt(median(runs.map((r) => Number(r.decodesPerRound)))),
      };
    }),
  );
}

/** Invariant / not, turns per second, at each session count, with the target at the most sessions. */
function ratiosOf(summary: readonly Record<string, string | number>[]): Record<string, string>[] {
  const perS = (label: string, n: number) =>
    Number(summary.find((r) => r.backend === label && r.sessions === n)!.turnsPerS);
  const most = Math.max(...SESSION_COUNTS);
  return SESSION_COUNTS.map((n) => {
    const ratio = perS(VARIANTS[0]!.label, n) / perS(VARIANTS[1]!.label, n);
    return {
      sessions: String(n),
      "turns/s invariant / not": fmt(ratio, 3),
      target:
        n === most
          ? `${ratio >= TARGET_RATIO ? "met" : "MISSED"}: >= ${TARGET_RATIO} (at most 15% fewer turns/s)`
          : "-",
    };
  });
}
