import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { checkRunInput } from "../runInput.js";
import { runTask, type HarnessDeps, type TaskResult } from "../runTaskUnderPolicy.js";
import type { Policy } from "../types.js";
import { renderChart } from "./chart.js";
import type { EvalTask } from "./TaskFile.js";

export interface PolicySummary {
  policy: Policy;
  tasks: number;
  errors: number;
  /** Runs the context window ended (a result, not an error: the answer is the best the run had). */
  context: number;
  /** Runs whose output degenerated (no answer: they count as wrong). */
  degenerate: number;
  exact: number;
  contains: number;
  /** Share of the runs whose answer quoted its evidence sentence word for word (`TaskResult.cited`). */
  cited: number;
  meanSeconds: number;
  p95Seconds: number;
  meanSwitches: number;
  /** Share of the runs in which the model opened at least one load_lora by itself. */
  selfLoaded: number;
  meanRebuiltTokens: number;
  meanReusedTokens: number;
  selectionAccuracy: number | null;
  /** Mean share of wall time per category. */
  shares: Record<string, number>;
  /** Mean ms per category (for the chart). */
  meanMs: Record<string, number>;
}

/** The weights an eval ran on, each named by its content: two reports with the same hashes ran the same weights. */
export interface EvalWeights {
  base: { file: string; sha256: string };
  adapters: { alias: string; file: string; sha256: string; scale: number }[];
}

/** The weights of a served model and library, as an eval report names them. */
export function evalWeights(
  model: { filePath: string; sha256: string },
  library: {
    list(): readonly { entry: { alias: string }; info?: { filePath: string; sha256: string; scale: number } | null }[];
  },
): EvalWeights {
  return {
    base: { file: model.filePath, sha256: model.sha256 },
    adapters: library
      .list()
      .flatMap((a) =>
        a.info ? [{ alias: a.entry.alias, file: a.info.filePath, sha256: a.info.sha256, scale: a.info.scale }] : [],
      ),
  };
}

export interface EvalReport {
  tasksFile: string;
  weights: EvalWeights;
  policies: PolicySummary[];
  /** The same summaries over each task group of the file (tasks with a `group`), when it has any. */
  groups: { group: string; policies: PolicySummary[] }[];
  runs: { task: string; group?: string; policy: Policy; result?: TaskResult; error?: string }[];
}

const CATEGORIES = [
  "model",
  "externalTool",
  "adapterControl",
  "cacheRebuild",
  "answerExtraction",
  "orchestration",
] as const;

/** The group of the tasks that name none, in a file where others do. */
export const UNGROUPED = "(no group)";

/** Runs every task under each policy, on the same library and harness, and summarises them side by side. */
export async function runEval(
  deps: HarnessDeps,
  tasks: readonly EvalTask[],
  policies: readonly Policy[],
  opts: {
    tasksFile: string;
    weights: EvalWeights;
    seed?: number;
    onRun?: (task: string, policy: Policy, r: TaskResult | Error) => void;
  },
): Promise<EvalReport> {
  // a policy or workflow naming no adapter fails every run alike: refused before the first one
  for (const policy of policies)
    for (const task of tasks) checkRunInput({ task: task.task, policy }, deps.library, deps.config.workflow);
  const runs: EvalReport["runs"] = [];
  for (const policy of policies) {
    for (const task of tasks) {
      try {
        const result = await runTask(
          deps,
          "eval",
          { task: task.task, policy, seed: opts.seed, steering: task.steering, expectedStages: task.stages },
          { expected: task.answer },
        );
        runs.push({ task: task.id, group: task.group, policy, result });
        opts.onRun?.(task.id, policy, result);
      } catch (err) {
        runs.push({ task: task.id, group: task.group, policy, error: (err as Error).message });
        opts.onRun?.(task.id, policy, err as Error);
      }
    }
  }
  return evalReport(tasks, policies, runs, opts);
}

/**
 * The report of runs already made (by runEval, or read back from a ledger of earlier runs): each policy's summary over
 * every task, and over each task group of the file.
 */
export function evalReport(
  tasks: readonly EvalTask[],
  policies: readonly Policy[],
  runs: EvalReport["runs"],
  opts: { tasksFile: string; weights: EvalWeights },
): EvalReport {
  const summaries = (of: EvalReport["runs"]) =>
    policies.map((p) =>
      summarise(
        p,
        of.filter((r) => r.policy === p),
      ),
    );
  // once some tasks have a group, the rest are one too: each part of the file is reported apart
  const named = [...new Set(tasks.flatMap((t) => (t.group ? [t.group] : [])))];
  const groups = named.length && tasks.some((t) => !t.group) ? [...named, UNGROUPED] : named;
  return {
    tasksFile: opts.tasksFile,
    weights: opts.weights,
    policies: summaries(runs),
    groups: groups.map((group) => ({
      group,
      policies: summaries(runs.filter((r) => (r.group ?? UNGROUPED) === group)),
    })),
    runs,
  };
}

function summarise(policy: Policy, runs: EvalReport["runs"]): PolicySummary {
  const ok = runs.flatMap((r) => (r.result ? [r.result] : []));
  const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0);
  const seconds = ok.map((r) => r.time.wallMs / 1000).sort((a, b) => a - b);
  const categoryMs = (r: TaskResult, c: (typeof CATEGORIES)[number]) =>
    c === "model" ? Object.values(r.time.model).reduce((a, b) => a + b, 0) : r.time[c];
  const meanMs = Object.fromEntries(CATEGORIES.map((c) => [c, round(mean(ok.map((r) => categoryMs(r, c))))]));
  const shares = Object.fromEntries(
    CATEGORIES.map((c) => [c, round(mean(ok.map((r) => categoryMs(r, c) / Math.max(r.time.wallMs, 1e-9))), 4)]),
  );
  const selection = ok.filter((r) => r.selectionAccuracy !== undefined).map((r) => r.selectionAccuracy!);
  return {
    policy,
    tasks: runs.length,
    errors: runs.length - ok.length,
    context: ok.filter((r) => r.finish === "context").length,
    degenerate: ok.filter((r) => r.finish === "degenerate").length,
    exact: round(ok.filter((r) => r.correct?.exact).length / Math.max(runs.length, 1), 4),
    contains: round(ok.filter((r) => r.correct?.contains).length / Math.max(runs.length, 1), 4),
    cited: round(ok.filter((r) => r.cited).length / Math.max(runs.length, 1), 4),
    meanSeconds: round(mean(seconds)),
    p95Seconds: round(seconds[Math.min(seconds.length - 1, Math.ceil(0.95 * seconds.length) - 1)] ?? 0),
    meanSwitches: round(mean(ok.map((r) => r.switches))),
    selfLoaded: round(ok.filter((r) => r.modelLoads > 0).length / Math.max(runs.length, 1), 4),
    meanRebuiltTokens: round(mean(ok.map((r) => r.rebuiltTokens))),
    meanReusedTokens: round(mean(ok.map((r) => r.reusedTokens))),
    selectionAccuracy: selection.length ? round(mean(selection), 4) : null,
    shares,
    meanMs,
  };
}

/** The comparison table as text: every task, then each task group on its own, then the weights by SHA-256. */
export function formatTable(report: EvalReport): string {
  const { base, adapters } = report.weights;
  const weights = [
    "weights (SHA-256):",
    `  base  ${base.sha256}  ${base.file}`,
    ...adapters.map((a) => `  ${a.alias}  ${a.sha256}  ${a.file}${a.scale === 1 ? "" : ` x${a.scale}`}`),
  ].join("\n");
  return [
    policyTable(report.policies),
    ...report.groups.map((g) => `${g.group}:\n${policyTable(g.policies)}`),
    weights,
  ].join("\n\n");
}

function policyTable(policies: readonly PolicySummary[]): string {
  const rows = policies.map((p) => [
    p.policy,
    String(p.tasks),
    String(p.errors),
    String(p.context),
    String(p.degenerate),
    pct(p.exact),
    pct(p.contains),
    pct(p.cited),
    p.meanSeconds.toFixed(2),
    p.p95Seconds.toFixed(2),
    p.meanSwitches.toFixed(1),
    pct(p.selfLoaded),
    p.meanRebuiltTokens.toFixed(0),
    p.meanReusedTokens.toFixed(0),
    p.selectionAccuracy === null ? "-" : pct(p.selectionAccuracy),
    pct(p.shares.model!),
    pct(p.shares.externalTool!),
    pct(p.shares.adapterControl!),
    pct(p.shares.cacheRebuild!),
  ]);
  const head = [
    "policy",
    "tasks",
    "errors",
    "context",
    "degenerate",
    "exact",
    "contains",
    "cited",
    "mean s",
    "p95 s",
    "switches",
    "self-load",
    "rebuilt tok",
    "reused tok",
    "selection",
    "model",
    "tools",
    "control",
    "cache",
  ];
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padEnd(widths[i]!)).join("  ");
  return [line(head), line(widths.map((w) => "-".repeat(w))), ...rows.map(line)].join("\n");
}

/** Writes report.json and chart.svg into `dir`. */
export function writeReport(report: EvalReport, dir: string): { json: string; chart: string } {
  mkdirSync(dir, { recursive: true });
  const json = join(dir, "report.json");
  const chart = join(dir, "chart.svg");
  writeFileSync(json, JSON.stringify(report, null, 2));
  writeFileSync(chart, renderChart(report.policies));
  return { json, chart };
}

const pct = (x: number) => `${(x * 100).toFixed(1)}%`;
const round = (x: number, d = 3) => Number(x.toFixed(d));
