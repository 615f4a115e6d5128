/**
 * `npm run check:chooser [-- --backbones frozen,taught] [--taught FILE] [--histories N] [--histories-file FILE]
 * [--tasks N] [--threads N] [--measures decision,soft,runtime]`:
 * does Qwen2.5-Coder-0.5B-Instruct choose its own capability adapters, frozen and taught (the chooser LoRA merged
 * into it), with aliases and descriptions training never showed. Two measures per backbone, greedy and unsteered:
 *
 * - decision: on held-out histories (the data step's held-out.jsonl: held-out questions, held-out libraries), at each
 *   point where the base writes, one generated turn against the oracle's: the right capability loaded next, or the
 *   turn ended when it should;
 * - soft runs: the soft policy over the appetite set (held-out tasks of models/gemma3 and the everyday questions),
 *   the test LoRAs served under a held-out library: the share of runs where the base opened a load itself, the
 *   share of the expected capabilities it loaded itself in order, and model turns per second;
 * - runtime capability: a server (stdio) whose library has no search capability gets one by register_adapter, under
 *   an alias and a description no training listed: does the base load it after planning, by its description?
 *
 * Sampled to fit 20 minutes (`--histories`, `--tasks`: the first N of each set); prints one JSON line per backbone
 * and measure.
 */
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { startServices } from "../../src/composition/services.js";
import { SeededRandom } from "../../src/demo/random.js";
import type { ResolvedConfig } from "../../src/config/loadConfig.js";
import { readTaskFile, type EvalTask } from "../../src/harness/eval/TaskFile.js";
import { runTask } from "../../src/harness/runTaskUnderPolicy.js";
import { createLogger } from "../../src/log.js";
import { fetchModel } from "../../src/modelFiles/index.js";
import { toConversation } from "../../src/sessions/history.js";
import { LOAD_LORA, weightFunctions } from "../../src/library/weightActions.js";
import { connectClient } from "../../testkit/mcpClient.js";
import { ensureRealModelAdapters, testAdapterDir } from "../../testkit/realModelAdapters.js";
import { GEMMA_DIR, PYTHON_SOURCES } from "../gemma/library.js";
import { plainSystemPrompt } from "../gemma/selfLoadPrompts.js";
import { testLibraryConfig } from "../gemma/testLibraryConfig.js";
import { drawLibrary, type ShownCapability } from "./capabilities.js";
import type { ChooserHistory } from "./data.js";
import { CHOOSER_BACKBONE, CHOOSER_FILES, TEST_STAGE, testLibraryEntries } from "./library.js";
import { CHOOSER_MODEL } from "./train.js";

/** The soft runs' caps: room for plan, search and write and the closing turn, and a bound on a base that never ends. */
const CAPS = { turns: 6, tokens: 384, seconds: 120 };
/** The stages a question of the appetite set goes through. */
const WORKFLOW = ["plan", "search", "write"] as const;

const { values } = parseArgs({
  options: {
    backbones: { type: "string", default: "frozen,taught" },
    taught: { type: "string" },
    histories: { type: "string", default: "8" },
    "histories-file": { type: "string" },
    tasks: { type: "string", default: "3" },
    threads: { type: "string", default: "2" },
    seed: { type: "string", default: "7" },
    measures: { type: "string", default: "decision,soft,runtime" },
  },
});
const logger = createLogger(process.env.WEACT_LOG_LEVEL ?? "warn");
const threads = Number(values.threads);

/** The served library: the test LoRAs of the backbone's shape under a library's aliases and texts (by role). */
async function configFor(model: string, library: readonly ShownCapability[]): Promise<ResolvedConfig> {
  return testLibraryConfig(model, await testLibraryEntries(model, library), {
    threads,
    chatTemplate: "jinja",
    prefix: "weact-chooser-",
  });
}

/** The base's turns of a held-out history, each replayed as the next turn to write: right when it does the oracle's. */
async function decisions(config: ResolvedConfig, histories: readonly ChooserHistory[]) {
  const services = await startServices(config, logger);
  const started = Date.now();
  const counts = { first: [0, 0], next: [0, 0], end: [0, 0] };
  // the first wrong decisions, to say what the base does instead
  const misses: { history: string; expected: string; got: string }[] = [];
  try {
    const engine = services.runtime.engine;
    for (const h of histories) {
      const functions = { ...weightFunctions(h.library), ...services.toolbox.modelFunctions() };
      const session = await engine.openSession();
      try {
        let first = true;
        for (const [i, m] of h.messages.entries()) {
          if (m.role !== "assistant" || m.adapter !== null || m.author !== "model") continue;
          const kind = m.toolCalls.length === 0 ? "end" : first ? "first" : "next";
          first = false;
          const turn = await session.generate(toConversation(h.messages.slice(0, i), functions, 1000), {
            maxTokens: 32,
            callable: [LOAD_LORA, ...Object.keys(services.toolbox.modelFunctions())],
          });
          const expected = m.toolCalls.map((c) => `${c.name}:${String(c.arguments.adapter)}`).join();
          const got = turn.calls
            .map((c) => `${c.name}:${String((c.arguments as { adapter?: unknown }).adapter)}`)
            .join();
          // ending the turn: no call (what text comes with it is not the decision)
          counts[kind][1]++;
          if (got === expected) counts[kind][0]++;
          else if (misses.length < 12) misses.push({ history: h.id, expected, got: got || JSON.stringify(turn.text) });
        }
      } finally {
        await session.close();
      }
    }
  } finally {
    await services.dispose();
  }
  const share = ([right, of]: number[]) => ({ right, of, share: Number((right / Math.max(1, of)).toFixed(3)) });
  const all = Object.values(counts).reduce((a, b) => [a[0]! + b[0]!, a[1]! + b[1]!], [0, 0]);
  return {
    histories: histories.length,
    decisions: share(all),
    firstLoad: share(counts.first),
    laterLoads: share(counts.next),
    endTurn: share(counts.end),
    misses,
    seconds: Math.round((Date.now() - started) / 1000),
  };
}

/** Soft runs of `tasks` under a served library: who opened which loads, and how fast the model's turns went. */
async function softRuns(config: ResolvedConfig, library: readonly ShownCapability[], tasks: readonly EvalTask[]) {
  const services = await startServices(config, logger);
  const aliasOf = (role: string) => library.find((c) => c.role === role)!.alias;
  const expected = WORKFLOW.map(aliasOf);
  let selfLoads = 0;
  let right = 0;
  let turns = 0;
  const started = Date.now();
  const opened: string[][] = [];
  try {
    for (const task of tasks) {
      const loads: string[] = [];
      await runTask(
        services.harness,
        "check-chooser",
        { task: task.task, policy: "soft", seed: 1, expectedStages: expected, soft: CAPS },
        {
          conversation: { system: plainSystemPrompt() },
          onEvent: (e) => {
            if (e.type === "model_call") turns++;
            if (e.type === "adapter_control" && e.action === "load" && e.author === "model")
              loads.push(String(e.active ?? (e.ok ? "?" : "(refused)")));
          },
        },
      );
      opened.push(loads);
      if (loads.length) selfLoads++;
      right += expected.filter((a, i) => loads[i] === a).length / expected.length;
    }
  } finally {
    await services.dispose();
  }
  const seconds = (Date.now() - started) / 1000;
  return {
    tasks: tasks.length,
    selfLoadShare: Number((selfLoads / tasks.length).toFixed(3)),
    rightCapabilityShare: Number((right / tasks.length).toFixed(3)),
    turnsPerSecond: Number((turns / seconds).toFixed(3)),
    expected,
    opened,
    seconds: Math.round(seconds),
  };
}

/**
 * A capability training never listed, registered on a live server (stdio, register_adapter) whose library lacks any
 * other search capability: does the taught base load it, by its description, where the task needs evidence?
 */
const ATLAS = {
  alias: "atlas",
  description:
    "Atlas lookup: consults the reference documents with the search and read tools to find facts about places, people and works, and reports the sentence that states them.",
  activation: 'Capability "atlas" is active. Find the fact in the documents, then release with offload_lora.',
  release: 'Capability "atlas" released. The base model continues.',
};

async function runtimeCapability(model: string, tasks: readonly EvalTask[]) {
  const library = drawLibrary(new SeededRandom(Number(values.seed) + 1), ["plan", "write"], "held-out");
  const config = await configFor(model, library);
  const dir = mkdtempSync(join(tmpdir(), "weact-chooser-live-"));
  const configFile = join(dir, "config.json");
  writeFileSync(
    configFile,
    JSON.stringify({
      model: { path: model, gpu: false, threads, chatTemplate: "jinja" },
      adapters: { manifest: config.manifestPath, allowedDirs: [testAdapterDir(model)] },
      // the registered capability's stage too: short, as the test LoRAs' are
      harness: { traceDir: join(dir, "traces"), stage: TEST_STAGE },
    }),
  );
  const c = await connectClient("stdio", { serverArgs: ["--config", configFile] });
  const started = Date.now();
  const picked: string[][] = [];
  try {
    const adapters = ensureRealModelAdapters(model, testAdapterDir(model), 0.03);
    await call(c.client, "register_adapter", { ...ATLAS, file: adapters.search, scale: 1 });
    for (const task of tasks) {
      // with no "write" alias the soft policy forces no stage: every stage is one the base opened
      const r = await call<{ stages: string[] }>(c.client, "run_task", {
        task: task.task,
        policy: "soft",
        soft: CAPS,
      });
      picked.push(r.stages.filter((s) => s !== "base"));
    }
  } finally {
    await c.close();
  }
  const plan = library.find((l) => l.role === "plan")!.alias;
  return {
    registered: ATLAS.alias,
    listed: [...library.map((l) => l.alias), ATLAS.alias],
    tasks: tasks.length,
    loadedAtlas: picked.filter((p) => p.includes(ATLAS.alias)).length,
    atlasRightAfterPlan: picked.filter((p) => p[0] === plan && p[1] === ATLAS.alias).length,
    stages: picked,
    seconds: Math.round((Date.now() - started) / 1000),
  };
}

/** A tool's structured result over MCP, or its error as an exception. */
async function call<T = unknown>(client: Client, name: string, args: Record<string, unknown>): Promise<T> {
  const r = await client.callTool({ name, arguments: args }, undefined, { timeout: 1_200_000 });
  if (r.isError) throw new Error(`${name}: ${JSON.stringify(r.content)}`);
  return r.structuredContent as T;
}

const histories = readFileSync(values["histories-file"] ?? CHOOSER_FILES.histories, "utf8")
  .split("\n")
  .filter((l) => l.trim())
  .slice(0, Number(values.histories))
  .map((l) => JSON.parse(l) as ChooserHistory);
const n = Number(values.tasks);
const tasks = [
  ...readTaskFile(join(GEMMA_DIR, "eval-tasks.jsonl"))
    .filter((_, i) => i % 3 === 0)
    .slice(0, n),
  ...readTaskFile(join(PYTHON_SOURCES, "everyday-questions.jsonl")).slice(0, n),
];
// a library training never showed: held-out aliases and descriptions, in random order, with distractors
const library = drawLibrary(new SeededRandom(Number(values.seed)), WORKFLOW, "held-out");

const measures = new Set(values.measures!.split(","));
for (const m of measures)
  if (!["decision", "soft", "runtime"].includes(m))
    throw new Error(`--measures: "${m}" is not one of decision, soft, runtime`);
for (const backbone of values.backbones!.split(",")) {
  if (backbone !== "frozen" && backbone !== "taught")
    throw new Error(`--backbones: "${backbone}" is not frozen or taught`);
  const model =
    backbone === "frozen"
      ? await fetchModel(CHOOSER_MODEL, { logger })
      : (values.taught ?? (await fetchModel(CHOOSER_BACKBONE, { logger })));
  const line = (measure: string, result: object) =>
    process.stdout.write(`${JSON.stringify({ backbone, model, measure, ...result })}\n`);
  if (measures.has("decision")) line("decision", await decisions(await configFor(model, library), histories));
  if (measures.has("soft")) line("soft", await softRuns(await configFor(model, library), library, tasks));
  if (measures.has("runtime")) line("runtime capability", await runtimeCapability(model, tasks.slice(0, n)));
}
