import { execFile } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join, resolve } from "node:path";
import { parseArgs, promisify } from "node:util";
import { startExportServices } from "../../src/composition/services.js";
import { loadConfigFile } from "../../src/config/loadConfig.js";
import { invocationStart } from "../../src/engine/index.js";
import { readTraces } from "../../src/export/readTraces.js";
import { segment } from "../../src/export/segment.js";
import type { EvalReport, PolicySummary } from "../../src/harness/eval/runEval.js";
import { OFFLOAD_LORA } from "../../src/library/weightActions.js";
import { createLogger } from "../../src/log.js";
import { toConversation, type HistoryMessage } from "../../src/sessions/history.js";
import { modelFunctions } from "../../src/sessions/modelFunctions.js";
import { MAIN } from "../../testkit/mcpClient.js";
import { ORACLE_WORKFLOW } from "../pipeline/OracleDriver.js";
import { writeTaskSubset } from "../pipeline/tasks.js";
import { GEMMA_ALORA_DIR } from "./alora.js";
import { GEMMA_DIR } from "./library.js";

const HELP = `check:alora: the activated-LoRA library (models/gemma3-alora) beside the LoRA library (models/gemma3) and
the base, hard, on held-out and counterfactual tasks: accuracy, seconds, switches, the time decomposition, the tokens
re-evaluated per switch and per run, and for the aLoRAs the counted floor of those tokens

Usage:
  npm run check:alora -- [--held-out N] [--counterfactual N] [--threads N] [--binding prebuilt|source]

  --held-out N        tasks of eval-tasks.jsonl, the first N/2 of each group (seen, unseen) (default 12)
  --counterfactual N  tasks of eval-counterfactual.jsonl over the edited corpus, likewise (default 8)
  --threads N         threads of each eval's server (default 2); the evals run one after another
`;

const { values } = parseArgs({
  options: {
    "held-out": { type: "string", default: "12" },
    counterfactual: { type: "string", default: "8" },
    threads: { type: "string", default: "2" },
    binding: { type: "string", default: "prebuilt" },
    help: { type: "boolean", short: "h" },
  },
});
if (values.help) {
  process.stdout.write(HELP);
  process.exit(0);
}
const work = mkdtempSync(join(tmpdir(), "weact-check-alora-"));

/** The first `count` tasks of a task file, half from each of its two groups (held-out phrasings, unseen entities). */
const taskSubset = (file: string, count: number) =>
  writeTaskSubset(file, count, join(work, `${count}-${basename(file)}`));

/**
 * A copy of a library folder's config file (`config.json` or `counterfactual.json`) for one eval: its paths made
 * absolute against the library, this run's threads and binding, its traces in a folder of their own.
 */
function evalConfig(library: string, file: string, name: string): { config: string; traces: string } {
  const own = JSON.parse(readFileSync(join(library, file), "utf8")) as {
    model: Record<string, unknown>;
    adapters: { manifest: string };
    harness?: Record<string, unknown>;
    tools?: { search?: { corpus: string; indexFile: string } };
  };
  const dir = join(work, name);
  const traces = join(dir, "traces");
  const search = own.tools?.search;
  const config = {
    ...own,
    model: { ...own.model, gpu: false, threads: Number(values.threads), binding: values.binding },
    adapters: { ...own.adapters, manifest: resolve(library, own.adapters.manifest) },
    harness: { ...own.harness, traceDir: traces },
    ...(search
      ? { tools: { search: { corpus: resolve(library, search.corpus), indexFile: join(dir, "search-index.json") } } }
      : {}),
  };
  cpSync(join(library, file), join(dir, "source.json"));
  writeFileSync(join(dir, "config.json"), JSON.stringify(config, null, 2));
  return { config: join(dir, "config.json"), traces };
}

interface Eval {
  name: string;
  library: string;
  set: "held-out" | "counterfactual";
  policies: string;
  report?: EvalReport;
  traces?: string;
  /** The aLoRA library's counted floor: tokens a switch must evaluate, per run (mean). */
  floor?: number;
}

const heldOut = (library: string) => taskSubset(join(library, "eval-tasks.jsonl"), Number(values["held-out"]));
const counterfactual = (library: string) =>
  taskSubset(join(library, "eval-counterfactual.jsonl"), Number(values.counterfactual));

const evals: Eval[] = [
  { name: "LoRA (models/gemma3)", library: GEMMA_DIR, set: "held-out", policies: "base,hard" },
  { name: "aLoRA (models/gemma3-alora)", library: GEMMA_ALORA_DIR, set: "held-out", policies: "hard" },
  { name: "LoRA (models/gemma3)", library: GEMMA_DIR, set: "counterfactual", policies: "hard" },
  { name: "aLoRA (models/gemma3-alora)", library: GEMMA_ALORA_DIR, set: "counterfactual", policies: "hard" },
];

for (const [i, e] of evals.entries()) {
  const started = Date.now();
  const { config, traces } = evalConfig(
    e.library,
    e.set === "held-out" ? "config.json" : "counterfactual.json",
    `eval-${i}`,
  );
  const tasks = e.set === "held-out" ? heldOut(e.library) : counterfactual(e.library);
  const out = join(work, `eval-${i}`, "report");
  await promisify(execFile)(
    process.execPath,
    [MAIN, "eval", tasks, "--policy", e.policies, "--config", config, "--out", out],
    { maxBuffer: 64 * 1024 * 1024 },
  );
  e.report = JSON.parse(readFileSync(join(out, "report.json"), "utf8")) as EvalReport;
  e.traces = traces;
  if (e.library === GEMMA_ALORA_DIR) e.floor = await countedFloor(config, traces);
  process.stderr.write(`${e.name}, ${e.set}: ${Math.round((Date.now() - started) / 1000)} s\n`);
}

/**
 * The fewest tokens any engine must evaluate at the switches of an aLoRA library's runs (mean per run), counted on
 * the traces as the server renders them: at each load, the load exchange from the adapter's invocation point on
 * (nothing of it was evaluated before); at each return to the base, everything from that point through the release
 * exchange (the stage's own turns and tool results, evaluated under the adapter, are not the base's KV).
 */
async function countedFloor(configFile: string, traces: string): Promise<number> {
  const config = loadConfigFile(configFile);
  const { runtime, toolbox, dispose } = await startExportServices(config, createLogger("warn"));
  try {
    const { trajectories } = readTraces(traces);
    let total = 0;
    for (const t of trajectories) {
      const functions = modelFunctions(runtime.library, toolbox.modelFunctions(), t.capabilities);
      const rendered = (messages: readonly HistoryMessage[]) =>
        runtime.engine.renderTokens(toConversation(messages, functions, t.keepToolResult));
      for (const alias of ORACLE_WORKFLOW) {
        const invocation = runtime.library.get(alias)?.info?.invocationTokens;
        if (!invocation) throw new Error(`${alias} is not an activated LoRA in ${configFile}`);
        for (const stage of segment(t, alias)) {
          const evaluatedFrom = (tokens: number[]) => tokens.length - (invocationStart(tokens, invocation) ?? 0);
          total += evaluatedFrom(rendered(t.messages.slice(0, stage.contextLength)));
          const release = t.messages.findIndex(
            (m, k) =>
              k >= stage.targets.at(-1)! && m.role === "assistant" && m.toolCalls.some((c) => c.name === OFFLOAD_LORA),
          );
          if (release < 0) continue;
          let end = release + 1;
          while (t.messages[end]?.role === "tool") end++;
          total += evaluatedFrom(rendered(t.messages.slice(0, end)));
        }
      }
    }
    return total / Math.max(1, trajectories.length);
  } finally {
    await dispose();
  }
}

const pct = (x: number) => `${(x * 100).toFixed(1)}%`;
const hard = (e: Eval | undefined, policy = "hard"): PolicySummary | undefined =>
  e?.report?.policies.find((p) => p.policy === policy);
const row = (name: string, p: PolicySummary | undefined, cf: PolicySummary | undefined, floor?: number) => {
  if (!p) return `| ${name} | – |`;
  const control = p.shares.adapterControl! + p.shares.cacheRebuild!;
  return `| ${[
    name,
    `${pct(p.exact)} / ${pct(p.contains)}`,
    cf ? pct(cf.exact) : "–",
    p.meanSeconds.toFixed(2),
    p.meanSwitches.toFixed(1),
    pct(p.shares.model!),
    pct(p.shares.externalTool!),
    pct(p.shares.adapterControl!),
    pct(p.shares.cacheRebuild!),
    pct(control),
    Math.round(p.meanRebuiltTokens).toString(),
    p.meanSwitches ? Math.round(p.meanRebuiltTokens / p.meanSwitches).toString() : "–",
    floor === undefined ? "–" : Math.round(floor).toString(),
  ].join(" | ")} |`;
};
const [loraHeld, aloraHeld, loraCf, aloraCf] = evals;
const header = [
  "library, hard",
  "held-out exact / contains",
  "counterfactual exact",
  "mean s",
  "switches",
  "model",
  "tools",
  "control",
  "cache",
  "control + cache",
  "re-evaluated tok / run",
  "/ switch",
  "counted floor / run",
];
process.stdout.write(
  [
    `check:alora (${values.threads} thread(s), ${values.binding} binding; ${values["held-out"]} held-out and ${values.counterfactual} counterfactual tasks; reports in ${work})`,
    "",
    `| ${header.join(" | ")} |`,
    `| ${header.map(() => "---").join(" | ")} |`,
    row("base", hard(loraHeld, "base"), undefined),
    row("LoRA (models/gemma3)", hard(loraHeld), hard(loraCf)),
    row("aLoRA (models/gemma3-alora)", hard(aloraHeld), hard(aloraCf), aloraHeld!.floor),
    "",
    "weights (SHA-256):",
    ...[loraHeld, aloraHeld].map((e) => {
      const w = e!.report!.weights;
      return `  ${e!.name}: base ${w.base.sha256}; ${w.adapters.map((a) => `${a.alias} ${a.sha256}`).join("; ")}`;
    }),
    "",
  ].join("\n"),
);
