/**
 * `npm run check:self-load [-- TASKS.jsonl]`: how often the frozen Gemma 3 270M opens `load_lora` by itself (WeAct-soft needs it to),
 * with the plain system prompt and with worked examples added to it. Every held-out task of models/gemma3 runs under
 * the soft policy, unsteered, greedy, on the shipped library; per prompt: the self-load rate (runs whose base opened a
 * load), the first choice's accuracy (it loaded plan, the workflow's first stage), the mean selection accuracy over
 * plan -> search -> write, and the answers. Prints one JSON line per prompt.
 */
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startServices } from "../../src/composition/services.js";
import { loadConfigFile } from "../../src/config/loadConfig.js";
import { readTaskFile } from "../../src/harness/eval/TaskFile.js";
import { runTask } from "../../src/harness/runTaskUnderPolicy.js";
import { createLogger } from "../../src/log.js";
import { PROMPTS_DIR } from "../../src/paths.js";
import { PromptLibrary } from "../../src/prompts/PromptLibrary.js";
import { ORACLE_WORKFLOW } from "../pipeline/OracleDriver.js";
import { GEMMA_DIR, PYTHON_SOURCES } from "./library.js";

const logger = createLogger(process.env.WEACT_LOG_LEVEL ?? "warn");
// the system prompt a session gets by default, as the server renders it
const plain = PromptLibrary.load(PROMPTS_DIR).render("system") ?? "";
const PROMPTS = {
  plain,
  "worked examples": `${plain.trimEnd()}\n${readFileSync(join(PYTHON_SOURCES, "self-load-examples.md"), "utf8")}`,
};

const base = loadConfigFile(join(GEMMA_DIR, "config.json"));
const config = {
  ...base,
  model: { ...base.model, gpu: false as const, threads: 2 },
  harness: { ...base.harness, traceDir: mkdtempSync(join(tmpdir(), "weact-self-load-")) },
};
// a task file as the first argument (default: the library's held-out tasks)
const tasks = readTaskFile(process.argv[2] ?? join(GEMMA_DIR, "eval-tasks.jsonl"));
const services = await startServices(config, logger);
try {
  for (const [name, system] of Object.entries(PROMPTS)) {
    let selfLoads = 0;
    let firstRight = 0;
    let selection = 0;
    let correct = 0;
    const firstChoices: Record<string, number> = {};
    const started = Date.now();
    for (const task of tasks) {
      const r = await runTask(
        services.harness,
        "self-load",
        { task: task.task, policy: "soft", seed: 1, expectedStages: [...ORACLE_WORKFLOW] },
        { conversation: { system } },
      );
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
        prompt: name,
        tasks: tasks.length,
        selfLoadRate: selfLoads / tasks.length,
        firstChoiceAccuracy: firstRight / tasks.length,
        meanSelectionAccuracy: Number((selection / tasks.length).toFixed(4)),
        exactAnswers: correct / tasks.length,
        firstChoices,
        seconds: Math.round((Date.now() - started) / 1000),
      })}\n`,
    );
  }
} finally {
  await services.dispose();
}
