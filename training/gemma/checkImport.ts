import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { startExportServices } from "../../src/composition/services.js";
import { resolveConfig } from "../../src/config/loadConfig.js";
import type { Conversation } from "../../src/engine/index.js";
import { readTaskFile } from "../../src/harness/eval/TaskFile.js";
import { PACKAGE_ROOT, PROMPTS_DIR } from "../../src/paths.js";
import { PromptLibrary } from "../../src/prompts/PromptLibrary.js";
import { LOAD_LORA } from "../../src/library/weightActions.js";
import { modelFunctions } from "../../src/sessions/modelFunctions.js";
import { ORACLE_WORKFLOW } from "../pipeline/OracleDriver.js";
import type { TrainingRun } from "../pipeline/run.js";
import { baseConfigDir, peftDir } from "./paths.js";
import { pipelinePython } from "./venv.js";

/** How many held-out prompts each adapter is compared on, and the largest log-prob difference allowed. */
const PROMPTS = 20;
export const IMPORT_TOLERANCE = 1e-3;

export interface ImportCheck {
  prompts: number;
  tolerance: number;
  /** Per adapter: the largest |log p(ours) - log p(theirs)| over every token of every prompt's next-token distribution. */
  maxAbsDiff: Record<string, number>;
  /** Per adapter: the largest difference the adapter makes to the base's distribution (what a broken import loses). */
  adapterEffect: Record<string, number>;
}

const maxAbsDiff = (a: Map<number, number>, b: Map<number, number>) => {
  let d = 0;
  for (const [token, v] of a) d = Math.max(d, Math.abs(v - (b.get(token) ?? -Infinity)));
  return d;
};

/**
 * The importer's cross-check: llama.cpp's own convert_lora_to_gguf.py (from the source node-llama-cpp ships) converts
 * the same PEFT folders, and both GGUFs, served side by side by the local engine, give the next-token distribution
 * after each of 20 held-out prompts (an eval task, the adapter just loaded). Throws when any differs by more than
 * IMPORT_TOLERANCE: one of the two converters is wrong.
 */
export async function checkImport(run: TrainingRun): Promise<ImportCheck> {
  const python = pipelinePython(run.logger);
  const source = execFileSync("bash", [join(PACKAGE_ROOT, "scripts", "llama-cpp-build.sh"), "--source"], {
    encoding: "utf8",
    stdio: ["ignore", "pipe", "inherit"],
  })
    .trim()
    .split("\n")
    .at(-1)!;
  const theirs = (alias: string) => join(run.work, `llama-cpp-${alias}.gguf`);
  for (const alias of ORACLE_WORKFLOW)
    execFileSync(
      python,
      [
        join(source, "convert_lora_to_gguf.py"),
        ...["--base", baseConfigDir(run), "--outtype", "f16", "--outfile", theirs(alias), peftDir(run, alias)],
      ],
      // the converter's gguf-py is the one of its own source tree, not PyPI's
      { stdio: ["ignore", "ignore", "inherit"], env: { ...process.env, PYTHONPATH: join(source, "gguf-py") } },
    );
  const config = resolveConfig(
    {
      model: { path: readConfiguredModel(run), gpu: false, threads: run.threads, contextSize: 4096 },
      adapters: { manifest: run.library.manifest },
      cache: { background: false },
    },
    "import check",
    PACKAGE_ROOT,
  );
  const { runtime, toolbox, dispose } = await startExportServices(config, run.logger);
  try {
    const engine = runtime.engine;
    for (const alias of ORACLE_WORKFLOW)
      await engine.addAdapter({ alias: `${alias}-llama-cpp`, filePath: theirs(alias), scale: 1 });
    const functions = modelFunctions(runtime.library, toolbox.modelFunctions());
    const system = PromptLibrary.load(PROMPTS_DIR).render("system") ?? "";
    const tasks = readTaskFile(run.library.evalTasks).slice(0, PROMPTS);
    const session = await engine.openSession();
    const report: ImportCheck = {
      prompts: tasks.length,
      tolerance: IMPORT_TOLERANCE,
      maxAbsDiff: {},
      adapterEffect: {},
    };
    try {
      for (const alias of ORACLE_WORKFLOW) {
        const activation = runtime.library.get(alias)?.entry.activation ?? "";
        let diff = 0;
        let effect = 0;
        for (const task of tasks) {
          const conversation: Conversation = {
            functions,
            turns: [
              { role: "system", text: system },
              { role: "user", text: task.task },
              {
                role: "assistant",
                text: "",
                calls: [{ name: LOAD_LORA, arguments: { adapter: alias }, result: activation }],
              },
            ],
          };
          const under = async (weights: string[]) => {
            await session.switchWeights(weights, conversation);
            return session.nextTokenLogProbs(conversation);
          };
          const ours = await under([alias]);
          diff = Math.max(diff, maxAbsDiff(ours, await under([`${alias}-llama-cpp`])));
          effect = Math.max(effect, maxAbsDiff(ours, await under([])));
        }
        report.maxAbsDiff[alias] = diff;
        report.adapterEffect[alias] = effect;
      }
    } finally {
      await session.close();
    }
    const failed = Object.entries(report.maxAbsDiff).filter(([, d]) => d > IMPORT_TOLERANCE);
    if (failed.length)
      throw new Error(
        `the importer and convert_lora_to_gguf.py disagree beyond ${IMPORT_TOLERANCE}: ${failed.map(([a, d]) => `${a} ${d}`).join(", ")}`,
      );
    return report;
  } finally {
    await dispose();
  }
}

/** The library's base model as its config names it (models/gemma3/config.json: the fetched model's name). */
function readConfiguredModel(run: TrainingRun): string {
  const config = JSON.parse(readFileSync(join(run.out, "config.json"), "utf8")) as { model: { path: string } };
  return config.model.path;
}
