import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { judge } from "../src/harness/answer.js";
import { readTaskFile, type EvalTask } from "../src/harness/eval/TaskFile.js";
import { fetchModel } from "../src/modelFiles/index.js";
import { PACKAGE_ROOT, TRAINED_DIR, trainedLibrary } from "../src/paths.js";
import { BusySessions, GEMMA_BUSY_TURN, QWEN_BUSY_TURN, type BusyTurn, type Overlap } from "../testkit/busySessions.js";
import { connectClient, spawnHttpServer } from "../testkit/mcpClient.js";
import { firstDifference, runTaskTurns, type TaskRun } from "../testkit/taskTurns.js";
import { SESSION_LIMITS, SLOTS } from "./concurrency.js";
import { fmt, table } from "./stats.js";

/**
 * `npm run check:invariance [-- --both | --no-invariant] [--busy N] [--demo-tasks N] [--gemma-tasks N]`: does a
 * session's evaluation depend on what else the server is doing? Each held-out task runs with `run_task` (greedy, no
 * seed, no steering) alone on a fresh server, and again on one server where `--busy` other sessions (7) loop the whole
 * time (create, load an adapter, a short turn, release, a turn, close: `testkit/busySessions.ts`), so their decodes
 * meet the task's in the engine's rounds. Per task it compares the outcome (finish, answer, right or not) and every
 * model turn (text, parsed calls, tokens generated), and prints per library and policy how many changed, with each
 * changed task's first differing turn. By default (about 10 minutes on 2 cores) 12 of the trained demo's held-out
 * tasks (the first 6 of each group: seen and unseen entities) under hard and soft, and 4 of Gemma 3 270M's
 * (models/gemma3, the first 2 of each group; hard only: its base never opens a load, docs/TRAINING.md). The alone and
 * the busy server run at once, one thread each (`--threads`), the same config but for the load: model.batchInvariant
 * true (the default), false with `--no-invariant`, both one after the other with `--both`.
 */
const { values } = parseArgs({
  options: {
    both: { type: "boolean", default: false },
    "no-invariant": { type: "boolean", default: false },
    busy: { type: "string", default: "7" },
    "demo-tasks": { type: "string", default: "12" },
    "gemma-tasks": { type: "string", default: "4" },
    threads: { type: "string", default: "1" },
    parallel: { type: "string", default: "6" },
    steady: { type: "boolean", default: false },
  },
});
const busyCount = Number(values.busy);
const threads = Number(values.threads);
const parallel = Number(values.parallel);

/** A library the check serves: its config (model, manifest, harness limits), its tasks, policies and busy turn. */
interface Library {
  name: string;
  config: Record<string, Record<string, unknown>>;
  tasks: EvalTask[];
  policies: readonly string[];
  busyTurn: BusyTurn;
  /** The adapters the busy sessions cycle through (steady: each session keeps one of them or the base). */
  adapters: readonly string[];
}

/** One task under one policy: where, and what the task expects. */
interface Case {
  task: EvalTask;
  policy: string;
}

/** The first `count` tasks of each group of a held-out file (ids "seen-N", "unseen-N"), as check:continual takes them. */
function firstOfEachGroup(tasks: EvalTask[], count: number): EvalTask[] {
  const group = (t: EvalTask) => t.id.replace(/-\d+$/, "");
  const groups = [...new Set(tasks.map(group))];
  const per = Math.ceil(count / groups.length);
  return groups.flatMap((g) => tasks.filter((t) => group(t) === g).slice(0, per));
}

function demoLibrary(count: number): Library {
  const tasks = readTaskFile(trainedLibrary(TRAINED_DIR).evalTasks);
  return {
    name: "trained demo",
    // what `npm start` and `eval` serve by default: the trained demo with its own manifest
    config: { model: { demo: "trained" }, harness: {} },
    tasks: count >= tasks.length ? tasks : firstOfEachGroup(tasks, count),
    policies: ["hard", "soft"],
    busyTurn: QWEN_BUSY_TURN,
    adapters: ["plan", "search", "write"],
  };
}

async function gemmaLibrary(count: number): Promise<Library> {
  const dir = join(PACKAGE_ROOT, "models", "gemma3");
  // --library gemma3's config, its manifest's path made absolute
  const shipped = JSON.parse(readFileSync(join(dir, "config.json"), "utf8")) as { harness?: Record<string, unknown> };
  return {
    name: "Gemma 3 270M",
    config: {
      model: { path: await fetchModel("gemma-3-270m") },
      adapters: { manifest: join(dir, "manifest.json") },
      harness: shipped.harness ?? {},
    },
    tasks: firstOfEachGroup(readTaskFile(join(dir, "eval-tasks.jsonl")), count),
    policies: ["hard"],
    busyTurn: GEMMA_BUSY_TURN,
    adapters: ["plan", "search", "write"],
  };
}

/**
 * The config both servers of a library share: sizes with room for every session's lanes (as the concurrency bench's),
 * session limits for the busy clients, traces and search index in `dir`.
 */
function writeConfig(dir: string, name: string, library: Library, invariant: boolean): string {
  const path = join(dir, `${name}.json`);
  writeFileSync(
    path,
    JSON.stringify({
      ...library.config,
      model: {
        gpu: false,
        threads,
        contextSize: 4096,
        maxContexts: 4,
        sequencesPerContext: SLOTS,
        ...library.config.model,
        batchInvariant: invariant,
      },
      sessions: SESSION_LIMITS,
      harness: { ...library.config.harness, traceDir: join(dir, `${name}-traces`) },
      tools: { search: { indexFile: join(dir, `${name}-search-index.json`) } },
    }),
  );
  return path;
}

/**
 * One task's cases (its policies, one after the other) on a server that does nothing else, started for them and
 * stopped after.
 */
async function alone(config: string, cases: readonly Case[]): Promise<TaskRun[]> {
  const server = await spawnHttpServer(["--config", config]);
  try {
    const { client, close } = await connectClient("http", { url: server.url });
    try {
      const runs: TaskRun[] = [];
      for (const c of cases) runs.push(await runTaskTurns(client, c.task.task, c.policy));
      return runs;
    } finally {
      await close();
    }
  } finally {
    await server.stop();
  }
}

/** Every case alone, a fresh server for each task; the runs in the order of `cases`. */
async function aloneRuns(config: string, cases: readonly Case[]): Promise<TaskRun[]> {
  const runs: TaskRun[] = [];
  for (const task of new Set(cases.map((c) => c.task))) {
    const indexes = cases.flatMap((c, i) => (c.task === task ? [i] : []));
    const done = await alone(
      config,
      indexes.map((i) => cases[i]!),
    );
    indexes.forEach((i, k) => (runs[i] = done[k]!));
  }
  return runs;
}

/** The cases on one server while the busy sessions loop beside them, `--parallel` at once (each its own client). */
class LoadedRuns {
  readonly runs: TaskRun[] = [];
  readonly overlaps: Overlap[] = [];
  private next = 0;

  constructor(
    private readonly url: string,
    private readonly busy: BusySessions,
    private readonly cases: readonly Case[],
  ) {}

  /** Runs every case, `parallel` workers taking the next one as each finishes. */
  async all(parallel: number): Promise<void> {
    await Promise.all(Array.from({ length: Math.min(parallel, this.cases.length) }, () => this.worker()));
  }

  private async worker(): Promise<void> {
    const { client, close } = await connectClient("http", { url: this.url });
    try {
      while (this.next < this.cases.length) {
        const i = this.next++;
        const c = this.cases[i]!;
        const watch = this.busy.watch();
        this.runs[i] = await runTaskTurns(client, c.task.task, c.policy);
        this.overlaps[i] = this.busy.overlap(watch);
      }
    } finally {
      await close();
    }
  }
}

/** Every case on one server where the busy sessions loop the whole time (started first, stopped after). */
async function underLoad(config: string, library: Library, cases: readonly Case[]) {
  const server = await spawnHttpServer(["--config", config]);
  try {
    const busy = await BusySessions.start({
      url: server.url,
      sessions: busyCount,
      adapters: values.steady ? [null, ...library.adapters] : library.adapters,
      turn: library.busyTurn,
      steady: values.steady,
    });
    const loaded = new LoadedRuns(server.url, busy, cases);
    try {
      await loaded.all(parallel);
    } catch (err) {
      await busy.stop().catch(() => undefined);
      throw err;
    }
    const figures = await busy.stop();
    return { runs: loaded.runs, overlaps: loaded.overlaps, busyTurns: figures.turns };
  } finally {
    await server.stop();
  }
}

/** One library under one setting: the alone and the busy server at once, then the comparison, per policy. */
async function check(library: Library, invariant: boolean) {
  const dir = mkdtempSync(join(tmpdir(), "weact-check-invariance-"));
  const cases: Case[] = library.policies.flatMap((policy) => library.tasks.map((task) => ({ task, policy })));
  const started = performance.now();
  const aloneConfig = writeConfig(dir, "alone", library, invariant);
  const timed = async <T>(run: Promise<T>) => {
    const value = await run;
    return { value, seconds: (performance.now() - started) / 1000 };
  };
  const [alonePass, busyPass] = await Promise.all([
    timed(aloneRuns(aloneConfig, cases)),
    timed(underLoad(writeConfig(dir, "busy", library, invariant), library, cases)),
  ]);
  const aloneRunsDone = alonePass.value;
  const loaded = busyPass.value;
  const seconds = (performance.now() - started) / 1000;
  const rows: Record<string, string | number>[] = [];
  const changes: Record<string, string | number>[] = [];
  for (const policy of library.policies) {
    const indexes = cases.flatMap((c, i) => (c.policy === policy ? [i] : []));
    let outcomes = 0;
    let paths = 0;
    let right = 0;
    let rightLoaded = 0;
    for (const i of indexes) {
      const c = cases[i]!;
      const a = aloneRunsDone[i]!;
      const b = loaded.runs[i]!;
      const correct = (r: TaskRun) => judge(r.answer, c.task.answer).exact;
      if (correct(a)) right++;
      if (correct(b)) rightLoaded++;
      const outcome = a.finish !== b.finish || a.answer !== b.answer || correct(a) !== correct(b);
      const difference = firstDifference(a, b);
      if (outcome) outcomes++;
      if (difference) paths++;
      if (outcome || difference)
        changes.push({
          library: library.name,
          batchInvariant: String(invariant),
          policy,
          task: c.task.id,
          outcome: outcome ? `${a.finish} "${a.answer}" -> ${b.finish} "${b.answer}"` : "same",
          firstDifferingTurn: difference ? `${difference.turn} (${difference.stage}) ${difference.detail}` : "-",
        });
    }
    const shares = indexes.map((i) => loaded.overlaps[i]!.share);
    rows.push({
      library: library.name,
      batchInvariant: String(invariant),
      policy,
      tasks: indexes.length,
      changedOutcomes: outcomes,
      changedTokenPaths: paths,
      exactAlone: right,
      exactBusy: rightLoaded,
      meanSAlone: fmt(indexes.reduce((s, i) => s + aloneRunsDone[i]!.seconds, 0) / indexes.length, 1),
      meanSBusy: fmt(indexes.reduce((s, i) => s + loaded.runs[i]!.seconds, 0) / indexes.length, 1),
      busyOverlapMin: fmt(Math.min(...shares)),
      busyTurnsPerRun: fmt(indexes.reduce((s, i) => s + loaded.overlaps[i]!.turns, 0) / indexes.length, 1),
    });
  }
  return {
    rows,
    changes,
    seconds,
    aloneSeconds: alonePass.seconds,
    busySeconds: busyPass.seconds,
    busyTurns: loaded.busyTurns,
  };
}

async function main() {
  const settings = values.both ? [true, false] : [!values["no-invariant"]];
  const libraries = [
    ...(Number(values["demo-tasks"]) > 0 ? [demoLibrary(Number(values["demo-tasks"]))] : []),
    ...(Number(values["gemma-tasks"]) > 0 ? [await gemmaLibrary(Number(values["gemma-tasks"]))] : []),
  ];
  const started = performance.now();
  const rows: Record<string, string | number>[] = [];
  const changes: Record<string, string | number>[] = [];
  const times: Record<string, string | number>[] = [];
  for (const invariant of settings)
    for (const library of libraries) {
      process.stderr.write(
        `${library.name}, batchInvariant ${invariant}: ${library.tasks.length} tasks x ${library.policies.join(", ")}, alone and beside ${busyCount} busy sessions...\n`,
      );
      const r = await check(library, invariant);
      rows.push(...r.rows);
      changes.push(...r.changes);
      times.push({
        library: library.name,
        batchInvariant: String(invariant),
        seconds: fmt(r.seconds, 0),
        aloneServersS: fmt(r.aloneSeconds, 0),
        busyServerS: fmt(r.busySeconds, 0),
        busyTurns: r.busyTurns,
      });
      process.stdout.write(`${table(r.rows)}\n\n`);
    }
  process.stdout.write(
    `\n## the same task alone and beside ${busyCount} busy sessions (greedy, ${threads} thread(s) per server)\n${table(rows)}\n`,
  );
  if (changes.length) process.stdout.write(`\n## changed runs: first differing model turn\n${table(changes)}\n`);
  process.stdout.write(`\n## time\n${table(times)}\ntotal ${fmt((performance.now() - started) / 1000, 0)} s\n`);
}

main().catch((err) => {
  process.stderr.write(`check:invariance failed: ${(err as Error).stack}\n`);
  process.exit(1);
});
