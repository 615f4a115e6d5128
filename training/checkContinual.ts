import { execFile } from "node:child_process";
import { cpSync, existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { promisify } from "node:util";
import type { EvalReport, PolicySummary } from "../src/harness/eval/runEval.js";
import { TRAINED_DIR, trainedLibrary } from "../src/paths.js";
import { callTool, connectClient, MAIN } from "../testkit/mcpClient.js";
import { CODE_ENTRY_FILE } from "./pipeline/continueTraining.js";
import { COMPUTATION_WORKFLOW } from "./pipeline/OracleDriver.js";
import { writeTaskSubset } from "./pipeline/tasks.js";

/**
 * `npm run check:continual [-- --library models/gemma3 --policies hard --held-out 12 --computation 10]`: the paper's
 * modular continual adaptation measured on a library (the trained demo's by default), exactly as
 * README "Adding and refreshing a capability" does it: each step an admin call on a live server of a copy of the
 * library (register_adapter code, refresh_adapter write -> write++, then, when the library has a plan-plus.gguf, the
 * plan refresh the frozen plan's failure on computation questions calls for), which writes the manifest back; then
 * `weact-mcp eval` of the folder as the call left it, on the original held-out tasks (--policies: hard, soft) and the
 * computation tasks (hard; through code once it is in), all of each file or the first N of each group of it.
 * The "before" state is evaluated a second time at another thread count, whose different float sums are the
 * run-to-run noise a change must exceed. Prints a Markdown table: accuracy per state and task set, the tasks whose
 * outcome changed against "before", and the SHA-256 of every weight file each eval ran on.
 */
const { values } = parseArgs({
  options: {
    threads: { type: "string", default: "1" },
    binding: { type: "string", default: "prebuilt" },
    jobs: { type: "string", default: "2" },
    library: { type: "string", default: TRAINED_DIR },
    policies: { type: "string", default: "hard,soft" },
    "held-out": { type: "string" },
    computation: { type: "string" },
  },
});
const source = resolve(values.library!);
const threads = Number(values.threads);
const work = mkdtempSync(join(tmpdir(), "weact-check-continual-"));
const files = trainedLibrary(source);

interface State {
  name: string;
  dir: string;
  /** hard's stages on the computation tasks */
  workflow: readonly string[];
}

/**
 * A copy of `from` (or of the library) with its config (its model, its harness limits) on this run's threads and
 * binding, on the CPU.
 */
function folder(name: string, from = source, threadCount = threads): string {
  const dir = join(work, name);
  // a training --out folder's work files are not the library's
  cpSync(from, dir, { recursive: true, filter: (f) => !f.startsWith(join(from, "work")) });
  const own = JSON.parse(readFileSync(join(from, "config.json"), "utf8")) as {
    model: Record<string, unknown>;
    harness?: Record<string, unknown>;
  };
  const config = {
    ...own,
    model: { ...own.model, gpu: false, threads: threadCount, binding: values.binding },
    harness: { ...own.harness, traceDir: join(dir, "traces") },
  };
  writeFileSync(join(dir, "config.json"), JSON.stringify(config, null, 2));
  return dir;
}

/**
 * The first `count` tasks of a task file (all without a count), the held-out files' two groups (ids "seen-N",
 * "unseen-N") taken half each: a smaller run that still shows both.
 */
function taskSubset(file: string, count: string | undefined): string {
  return count === undefined ? file : writeTaskSubset(file, Number(count), join(work, basename(file)));
}
const heldOutTasks = taskSubset(files.evalTasks, values["held-out"]);
const computationTasks = taskSubset(files.computationTasks, values.computation);

/** The admin calls of one step, on a live stdio server of `dir` (no token over stdio): they write its manifest. */
async function admin(dir: string, calls: [string, Record<string, unknown>][]): Promise<void> {
  const { client, close } = await connectClient("stdio", { serverArgs: ["--library", dir] });
  try {
    for (const [name, args] of calls) await callTool(client, name, args, { timeout: 120_000 });
  } finally {
    await close();
  }
}

const before: State = { name: "before", dir: folder("before"), workflow: ["plan", "search", "write"] };
const noise: State = { ...before, name: "before, another thread count", dir: folder("noise", source, threads + 1) };
const code: State = { name: "code inserted", dir: folder("code", before.dir), workflow: COMPUTATION_WORKFLOW };
await admin(code.dir, [["register_adapter", JSON.parse(readFileSync(join(source, CODE_ENTRY_FILE), "utf8"))]]);
const writePlus: State = { ...code, name: "write refreshed to write++", dir: folder("write-plus", code.dir) };
await admin(writePlus.dir, [["refresh_adapter", { alias: "write", file: "write-plus.gguf" }]]);
const states = [before, noise, code, writePlus];
// the plan refresh, for a library whose frozen plan cannot route computation questions (the trained demo's)
if (existsSync(join(source, "plan-plus.gguf"))) {
  const planPlus: State = { ...writePlus, name: "plan refreshed to plan++", dir: folder("plan-plus", writePlus.dir) };
  await admin(planPlus.dir, [["refresh_adapter", { alias: "plan", file: "plan-plus.gguf" }]]);
  states.push(planPlus);
}

interface Job {
  state: State;
  set: "held-out" | "computation";
}
const jobs: Job[] = states.flatMap((state) => [
  { state, set: "held-out" as const },
  ...(state === noise ? [] : [{ state, set: "computation" as const }]),
]);
const reports = new Map<Job, EvalReport>();

async function evaluate(job: Job): Promise<void> {
  const { state, set } = job;
  const out = join(state.dir, `eval-${set}`);
  const args =
    set === "held-out"
      ? [heldOutTasks, "--policy", values.policies!]
      : [computationTasks, "--policy", "hard", "--workflow", state.workflow.join(",")];
  const started = Date.now();
  await promisify(execFile)(process.execPath, [MAIN, "eval", ...args, "--library", state.dir, "--out", out], {
    maxBuffer: 64 * 1024 * 1024,
  });
  reports.set(job, JSON.parse(readFileSync(join(out, "report.json"), "utf8")) as EvalReport);
  process.stderr.write(`${state.name}, ${set}: ${Math.round((Date.now() - started) / 1000)} s\n`);
}

// a pool of `jobs` evals at a time: each runs on its own threads
const queue = [...jobs];
await Promise.all(
  Array.from({ length: Number(values.jobs) }, async () => {
    for (let job = queue.shift(); job; job = queue.shift()) await evaluate(job);
  }),
);

const pct = (x: number) => `${(x * 100).toFixed(1)}%`;
const cell = (p: PolicySummary | undefined) =>
  p ? `${pct(p.exact)} / ${pct(p.contains)} / ${pct(p.cited)} (${p.degenerate})` : "–";
const outcome = (r: EvalReport["runs"][number]) => Boolean(r.result?.correct?.exact);
/** The runs whose exact-match outcome differs from the same task and policy in `base`. */
const changed = (report: EvalReport, base: EvalReport) =>
  report.runs.filter((r) => {
    const other = base.runs.find((b) => b.task === r.task && b.policy === r.policy);
    return other !== undefined && outcome(other) !== outcome(r);
  }).length;
const reportOf = (state: State, set: Job["set"]) => reports.get(jobs.find((j) => j.state === state && j.set === set)!);
const short = (sha: string | undefined) => (sha ? `\`${sha.slice(0, 8)}\`` : "–");

const rows = states.map((state) => {
  const held = reportOf(state, "held-out")!;
  const comp = reportOf(state, "computation");
  const of = (r: EvalReport | undefined, policy: string) => r?.policies.find((p) => p.policy === policy);
  const hash = (alias: string) => held.weights.adapters.find((a) => a.alias === alias)?.sha256;
  return [
    state.name,
    short(held.weights.base.sha256),
    ...["plan", "search", "write", "code"].map((a) => short(hash(a))),
    cell(of(held, "hard")),
    cell(of(held, "soft")),
    String(changed(held, reportOf(before, "held-out")!)),
    cell(of(comp, "hard")),
    comp && state !== before ? String(changed(comp, reportOf(before, "computation")!)) : "–",
  ];
});
const header = [
  "state",
  "base",
  "plan",
  "search",
  "write",
  "code",
  "held-out hard",
  "held-out soft",
  "changed",
  "computation hard",
  "changed",
];
const line = (cells: readonly string[]) => `| ${cells.join(" | ")} |`;
process.stdout.write(
  [
    `check:continual on ${source} (${threads} thread(s), ${values.binding} binding; reports in ${work})`,
    "cells: exact / contains / cited (degenerate runs); changed: runs whose exact outcome differs from before's",
    "",
    line(header),
    line(header.map(() => "---")),
    ...rows.map(line),
    "",
    "weights (SHA-256), per state:",
    ...states.map((s) => {
      const w = reportOf(s, "held-out")!.weights;
      return `  ${s.name}: base ${w.base.sha256}; ${w.adapters.map((a) => `${a.alias} ${a.sha256}`).join("; ")}`;
    }),
    "",
  ].join("\n"),
);
