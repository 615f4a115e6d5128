import { join } from "node:path";
import type { ResolvedConfig } from "../config/config.js";
import { formatTable, runEval, writeReport } from "../harness/eval/runEval.js";
import { readTaskFile } from "../harness/eval/TaskFile.js";
import { runTask } from "../harness/runTask.js";
import { PolicySchema, type Policy } from "../harness/types.js";
import type { Logger } from "../log.js";
import { STATE_DIR } from "../paths.js";
import { startServices } from "./services.js";

export class UsageError extends Error {}

function policies(list: string): Policy[] {
  return list.split(",").map((p) => {
    const parsed = PolicySchema.safeParse(p.trim());
    if (!parsed.success) throw new UsageError(`--policy: "${p}" is not hard, soft, base, static or single:<alias>`);
    return parsed.data;
  });
}

/** `weact-mcp run "task"`: one trajectory in-process; progress on stderr, the answer on stdout. */
export async function runCommand(config: ResolvedConfig, logger: Logger, task: string, opts: { policy?: string; workflow?: string; seed?: number }) {
  const [policy] = policies(opts.policy ?? "hard");
  const services = await startServices(config, logger);
  try {
    const r = await runTask(services.harness, "cli", { task, policy, seed: opts.seed, workflow: opts.workflow?.split(",") }, { onProgress: (p) => process.stderr.write(`[${p.turn}] ${p.message}\n`) });
    const t = r.time;
    process.stderr.write(`stages: ${r.stages.join(" -> ")}; ${r.switches} switches; ${(t.wallMs / 1000).toFixed(2)} s (model ${Object.entries(t.model).map(([k, v]) => `${k} ${(v / 1000).toFixed(2)}`).join(", ")}; tools ${(t.externalTool / 1000).toFixed(2)}; control ${(t.adapterControl / 1000).toFixed(3)}; cache ${(t.cacheRebuild / 1000).toFixed(2)}; unattributed ${(t.unattributedShare * 100).toFixed(2)}%)\ntrace: ${r.traceFile}\n`);
    process.stdout.write(`${r.answer}\n`);
  } finally {
    await services.dispose();
  }
}

/** `weact-mcp eval tasks.jsonl`: every task under each policy; a table, report.json and chart.svg. */
export async function evalCommand(config: ResolvedConfig, logger: Logger, file: string, opts: { policy?: string; out?: string; seed?: number }) {
  const list = policies(opts.policy ?? "hard,soft,static,base");
  const tasks = readTaskFile(file);
  const services = await startServices(config, logger);
  try {
    const report = await runEval(services.harness, tasks, list, {
      tasksFile: file,
      seed: opts.seed,
      onRun: (task, policy, r) => process.stderr.write(`${policy} ${task}: ${r instanceof Error ? `error: ${r.message}` : `${(r.time.wallMs / 1000).toFixed(2)} s, ${r.correct?.contains ? "correct" : "wrong"}`}\n`),
    });
    const out = writeReport(report, opts.out ?? join(STATE_DIR, "eval", new Date().toISOString().replace(/[:.]/g, "-")));
    process.stdout.write(`${formatTable(report)}\n\nreport: ${out.json}\nchart:  ${out.chart}\n`);
  } finally {
    await services.dispose();
  }
}
