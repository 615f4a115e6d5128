import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { callTool, connectClient } from "../testkit/mcpClient.js";
import { readTaskFile } from "../src/harness/eval/TaskFile.js";
import { TRAINED_DIR, trainedLibrary } from "../src/paths.js";
import { planHandoff, searchQuery } from "./pipeline/OracleDriver.js";
import { isHeldOutQuestion, NEVER_TRAINED_GROUP, readFacts, sentence, type Fact } from "./pipeline/facts.js";
import { TRAINING_ENTITIES } from "./pipeline/paths.js";

/**
 * `npm run check:trained`: what each stage of the trained demo library does live, on the held-out tasks, in about 90
 * seconds, so a training change is judged by the served model's behaviour and not only by the trainer's
 * teacher-forced token accuracy (which scores the markup every turn repeats as well as the few tokens a stage must
 * read from its context). Each stage starts from the ideal history before it, written by prescribed calls (the
 * oracle's plan handoff; the oracle's query through the real search tool, and the evidence sentence as the
 * search stage's handoff):
 * - plan: does its plan name the task's entity and relation?
 * - search: does its first call search, with a query naming both?
 * - evidence: given the search result, does the search stage release with a handoff stating the value the corpus
 *   states? (`--counterfactual`: over the edited corpus, where only a value read from the result is right)
 * - write: does its answer hold the value?
 * The base's own choices are the eval's `self-load` and `selection` columns. Prints one JSON line: per stage the
 * share right over every task and over the never-trained group. `--library DIR` checks a library `train-demo --out DIR`
 * made instead of the shipped one.
 */
const { values } = parseArgs({
  options: {
    counterfactual: { type: "boolean", default: false },
    threads: { type: "string", default: "2" },
    library: { type: "string", default: TRAINED_DIR },
  },
});
const library = trainedLibrary(resolve(values.library!));
const taskFile = values.counterfactual ? library.counterfactualTasks : library.evalTasks;
const facts = readFacts(TRAINING_ENTITIES);
const tasks = readTaskFile(taskFile).map((task) => {
  const found = facts.find((f) => isHeldOutQuestion(f, task.task));
  if (!found) throw new Error(`${taskFile}: task ${task.id} is no held-out question of training/corpus/entities`);
  // the fact as the corpus searched states it (the task's answer: the edited value on the counterfactual set)
  return { ...task, fact: { ...found, value: [task.answer].flat()[0]! } };
});
const dir = mkdtempSync(join(tmpdir(), "weact-check-trained-"));
const config = join(dir, "config.json");
const corpus = values.counterfactual
  ? { tools: { search: { corpus: library.counterfactualCorpus, indexFile: join(dir, "search-index.json") } } }
  : {};
const model = { gpu: false, path: library.model, threads: Number(values.threads) };
const adapters = { manifest: library.manifest };
writeFileSync(config, JSON.stringify({ model, adapters, harness: { traceDir: join(dir, "traces") }, ...corpus }));
const { client, close } = await connectClient("stdio", { serverArgs: ["--config", config] });

interface Turn {
  text: string;
  tool_calls: { name: string; arguments: Record<string, unknown> }[];
}
const call = <T>(name: string, args: Record<string, unknown>) => callTool<T>(client, name, args, { timeout: 300_000 });
const names = (text: string, f: Fact) => text.includes(f.entity) && text.includes(f.relation);

/** One stage's first turn after `before` (prescribed exchanges on a new session): right or not. */
async function stage(
  task: string,
  before: (id: string) => Promise<void>,
  judge: (turn: Turn) => boolean,
): Promise<boolean> {
  const { session_id } = await call<{ session_id: string }>("create_session", { task });
  try {
    await before(session_id);
    return judge(await call<Turn>("generate", { session_id, max_tokens: 96 }));
  } finally {
    await call("close_session", { session_id });
  }
}

/** The plan stage as the oracle ends it: loaded, and released with its handoff. */
async function planned(id: string, fact: Fact): Promise<void> {
  await call("load_lora", { session_id: id, adapter: "plan" });
  await call("offload_lora", { session_id: id, handoff: planHandoff(fact) });
}

/** After the plan, the search stage loaded and its search (the oracle's query) answered by the real tool. */
async function searched(id: string, fact: Fact): Promise<void> {
  await planned(id, fact);
  await call("load_lora", { session_id: id, adapter: "search" });
  await call("search", { session_id: id, query: searchQuery(fact) });
}

const stages: Record<string, (t: (typeof tasks)[number]) => Promise<boolean>> = {
  plan: (t) =>
    stage(
      t.task,
      async (id) => void (await call("load_lora", { session_id: id, adapter: "plan" })),
      (turn) => names(turn.text, t.fact),
    ),
  search: (t) =>
    stage(
      t.task,
      async (id) => {
        await planned(id, t.fact);
        await call("load_lora", { session_id: id, adapter: "search" });
      },
      (turn) =>
        turn.tool_calls[0]?.name === "search" && names(String(turn.tool_calls[0].arguments.query ?? ""), t.fact),
    ),
  evidence: (t) =>
    stage(
      t.task,
      (id) => searched(id, t.fact),
      (turn) =>
        turn.tool_calls.some(
          (c) => c.name === "offload_lora" && String(c.arguments.handoff ?? "").includes(t.fact.value),
        ),
    ),
  write: (t) =>
    stage(
      t.task,
      async (id) => {
        await searched(id, t.fact);
        await call("offload_lora", { session_id: id, handoff: sentence(t.fact) });
        await call("load_lora", { session_id: id, adapter: "write" });
      },
      (turn) => turn.text.toLowerCase().includes(t.fact.value.toLowerCase()),
    ),
};

const share = (of: boolean[]) => Number((of.filter(Boolean).length / Math.max(1, of.length)).toFixed(3));
const report: Record<string, { all: number; neverTrained: number }> = {};
try {
  for (const [name, run] of Object.entries(stages)) {
    const right: boolean[] = [];
    for (const t of tasks) right.push(await run(t));
    report[name] = {
      all: share(right),
      neverTrained: share(right.filter((_, i) => tasks[i]!.group === NEVER_TRAINED_GROUP)),
    };
  }
} finally {
  await close();
}
process.stdout.write(
  `${JSON.stringify({ tasks: tasks.length, neverTrained: tasks.filter((t) => t.group === NEVER_TRAINED_GROUP).length, stages: report })}\n`,
);
