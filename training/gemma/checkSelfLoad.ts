/**
 * `npm run check:self-load [-- --model NAME] [--tasks FILE] [--prompt plain|"worked examples"]`: how often a frozen backbone opens `load_lora` by itself
 * (WeAct-soft needs it to), with the plain system prompt and with worked examples added to it, written in the model's
 * own call syntax. Every task runs under the soft policy, unsteered, greedy, capped at 4 turns, 256 tokens and 15 s a
 * run. Gemma 3 270M (the default) runs its shipped library; another model (qwen2.5-coder-0.5b-instruct,
 * smollm2-135m-instruct) runs test LoRAs of its shapes under models/gemma3's aliases, descriptions and texts, so what
 * is counted is the backbone's appetite, not an accuracy. Default tasks: 12 held-out tasks of models/gemma3 and the ten
 * everyday questions (training/gemma/everyday-questions.jsonl). Per prompt and task set: the self-load rate, the first
 * choice (which capability the base opened first), the mean selection accuracy over plan -> search -> write, and the
 * exact answers. Prints one JSON line per prompt and set.
 */
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { startServices } from "../../src/composition/services.js";
import { loadConfigFile, type ResolvedConfig } from "../../src/config/loadConfig.js";
import { readTaskFile, type EvalTask } from "../../src/harness/eval/TaskFile.js";
import { runTask } from "../../src/harness/runTaskUnderPolicy.js";
import { loadManifest } from "../../src/library/manifest.js";
import { createLogger } from "../../src/log.js";
import { fetchModel } from "../../src/modelFiles/index.js";
import { sha256File } from "../../src/gguf/index.js";
import { ensureRealModelAdapters, testAdapterDir } from "../../testkit/realModelAdapters.js";
import { ORACLE_WORKFLOW } from "../pipeline/OracleDriver.js";
import { GEMMA_DIR, GEMMA_MODEL, PYTHON_SOURCES } from "./library.js";
import { plainSystemPrompt, workedExamplesPrompt } from "./selfLoadPrompts.js";
import { testLibraryConfig } from "./testLibraryConfig.js";

/** The per-run caps: a backbone that never loads ends its run at one of them, and 88 runs fit 20 minutes. */
const CAPS = { turns: 4, tokens: 256, seconds: 15 };
/** A stage of a test LoRA (what a load opens on a model with no capability adapters yet). */
const STAGE = { turns: 1, tokens: 32, seconds: 15 };
/** Chat templates the engine renders with the GGUF's own Jinja template (their tool-call syntax is in it). */
const JINJA_MODELS = new Set(["qwen2.5-coder-0.5b-instruct"]);

const { values } = parseArgs({
  options: {
    model: { type: "string", default: GEMMA_MODEL },
    tasks: { type: "string" },
    prompt: { type: "string" },
    threads: { type: "string" },
  },
});
const logger = createLogger(process.env.WEACT_LOG_LEVEL ?? "warn");
const name = values.model!;
const threads = Number(values.threads ?? 2);

/**
 * The tasks: a file given, or 12 held-out tasks of models/gemma3 (every third: seen and unseen entities alike) and the
 * ten everyday questions, each set named.
 */
const taskSets: Record<string, EvalTask[]> = values.tasks
  ? { [values.tasks]: readTaskFile(values.tasks) }
  : {
      "held-out (models/gemma3)": readTaskFile(join(GEMMA_DIR, "eval-tasks.jsonl")).filter((_, i) => i % 3 === 0),
      everyday: readTaskFile(join(PYTHON_SOURCES, "everyday-questions.jsonl")),
    };

/** The config a run serves: Gemma's shipped library, or the model's test LoRAs under the library's texts. */
async function configFor(model: string): Promise<ResolvedConfig> {
  if (name === GEMMA_MODEL) {
    const base = loadConfigFile(join(GEMMA_DIR, "config.json"));
    const traceDir = mkdtempSync(join(tmpdir(), "weact-self-load-"));
    return { ...base, model: { ...base.model, gpu: false, threads }, harness: { ...base.harness, traceDir } };
  }
  const adapters = ensureRealModelAdapters(model, testAdapterDir(model), 0.03);
  const baseSha256 = await sha256File(model);
  const entries = loadManifest(join(GEMMA_DIR, "manifest.json"))
    .filter((e) => !e.merge)
    .map((e) => ({
      ...e,
      file: `${e.alias}.gguf`,
      filePath: adapters[e.alias as "plan" | "search" | "write"],
      baseSha256,
      // a test LoRA's stage says nothing: one short turn, so the run's time goes to the base's decisions
      budget: STAGE,
    }));
  return testLibraryConfig(model, entries, {
    threads,
    chatTemplate: JINJA_MODELS.has(name) ? "jinja" : "auto",
    prefix: "weact-self-load-",
  });
}

const model = await fetchModel(name, { logger });
const config = await configFor(model);
const services = await startServices(config, logger);
try {
  const prompts = { plain: plainSystemPrompt(), "worked examples": workedExamplesPrompt(JINJA_MODELS.has(name)) };
  if (values.prompt && !Object.hasOwn(prompts, values.prompt))
    throw new Error(`--prompt: "${values.prompt}" is not one of ${Object.keys(prompts).join(", ")}`);
  for (const [prompt, system] of Object.entries(prompts)) {
    if (values.prompt && prompt !== values.prompt) continue;
    for (const [set, tasks] of Object.entries(taskSets)) {
      let selfLoads = 0;
      let firstRight = 0;
      let selection = 0;
      let correct = 0;
      let writtenLoads = 0;
      const firstChoices: Record<string, number> = {};
      const started = Date.now();
      for (const task of tasks) {
        let firstTurn: string | undefined;
        const r = await runTask(
          services.harness,
          "self-load",
          { task: task.task, policy: "soft", seed: 1, expectedStages: [...ORACLE_WORKFLOW], soft: CAPS },
          {
            conversation: { system },
            onEvent: (e) => {
              if (firstTurn === undefined && e.type === "model_call" && e.adapter === "base")
                firstTurn = String(e.text ?? "");
            },
          },
        );
        // a load written out as text (the call's JSON without the template's call syntax) is no call: counted apart
        if (r.modelLoads === 0 && /"name":\s*"load_lora"/.test(firstTurn ?? "")) writtenLoads++;
        // soft loads only what the model asks for: its first stage is its first choice
        const choice = r.modelLoads > 0 ? (r.stages.find((s) => s !== "base") ?? "(none)") : "(none)";
        firstChoices[choice] = (firstChoices[choice] ?? 0) + 1;
        if (r.modelLoads > 0) selfLoads++;
        if (choice === ORACLE_WORKFLOW[0]) firstRight++;
        selection += r.selectionAccuracy ?? 0;
        if (r.answer.trim().toLowerCase() === String(task.answer).toLowerCase()) correct++;
      }
      process.stdout.write(
        `${JSON.stringify({
          model: name,
          chatWrapper: services.runtime.engine.model.chatWrapper,
          prompt,
          set,
          tasks: tasks.length,
          selfLoadRate: selfLoads / tasks.length,
          // the base's first turn wrote a load_lora call as plain text instead of the call syntax the parser reads
          loadsWrittenAsText: writtenLoads / tasks.length,
          firstChoiceAccuracy: firstRight / tasks.length,
          meanSelectionAccuracy: Number((selection / tasks.length).toFixed(4)),
          exactAnswers: correct / tasks.length,
          firstChoices,
          seconds: Math.round((Date.now() - started) / 1000),
        })}\n`,
      );
    }
  }
} finally {
  await services.dispose();
}
