/**
 * The train and import steps of the Qwen capability library: each stage's PEFT LoRA over the frozen taught backbone
 * (resumable from its last checkpoint in the work folder), then the library folder (`--library qwen`) the server
 * serves: the GGUF LoRAs, manifest, config, the static merges and the training record.
 */
import { createHash } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { readGgufHeader } from "../../src/gguf/index.js";
import {
  importAdapter,
  runTrainer,
  writeStaticMerges,
  type CapabilityResult,
  type TrainerRecipe,
} from "../gemma/train.js";
import { trainerRecord } from "../gemma/paths.js";
import { ORACLE_WORKFLOW } from "../pipeline/OracleDriver.js";
import { heldOutFile, windowsFile, type TrainingRun } from "../pipeline/run.js";
import { writeLibraryManifest } from "../pipeline/train.js";
import { sha256File } from "../../src/gguf/index.js";
import { CHOOSER_BACKBONE, QWEN_HARNESS } from "./library.js";
import { CHOOSER_RECIPE } from "./train.js";
import { writeCounterfactual } from "./counterfactual.js";
import { evalTasks, HELD_OUT_SHA256, readQuestions } from "./questions.js";

/**
 * The chooser's rank and rate (rank 4 over the seven projections: about 4.4 MB a LoRA in F16, under the 5 MiB a
 * committed file may weigh), each capability on its own stages' turns and exit calls, over two passes in batches of 2
 * (61 steps a capability). `--epochs` and `--batch` change it.
 */
export const LIBRARY_RECIPE: TrainerRecipe = { ...CHOOSER_RECIPE, epochs: 2, batch: 2 };

/** Where train_lora.py keeps each capability's last checkpoint. */
export const libraryCheckpoints = (run: TrainingRun) => join(run.work, "checkpoints");

/** The SHA-256 of every capability's samples, training then held out, in the workflow's order. */
export function libraryDataSha256(run: TrainingRun): string {
  const data = createHash("sha256");
  for (const alias of ORACLE_WORKFLOW)
    data.update(readFileSync(windowsFile(run, alias))).update(readFileSync(heldOutFile(run, alias)));
  return data.digest("hex");
}

/**
 * The train step: train_lora.py on each stage's samples, from its last checkpoint when there is one; after `minutes`
 * (0: no limit) it stops at a checkpoint, to go on at the next call. True when every capability finished and the
 * record is written.
 */
export async function trainLibrary(
  run: TrainingRun,
  model: string,
  recipe: TrainerRecipe,
  minutes: number,
): Promise<boolean> {
  const started = Date.now();
  const results = await runTrainer(run, model, ORACLE_WORKFLOW, recipe, [
    ...["--log-every", "1", "--checkpoints", libraryCheckpoints(run), "--checkpoint-every", "2"],
    ...["--max-minutes", String(minutes)],
  ]);
  if (results.length < ORACLE_WORKFLOW.length) {
    process.stderr.write("train_lora.py stopped at a checkpoint: run the train step again to go on\n");
    return false;
  }
  const seconds = Math.round((Date.now() - started) / 1000);
  writeFileSync(trainerRecord(run), `${JSON.stringify({ lastCallSeconds: seconds, recipe, results }, null, 2)}\n`);
  return true;
}

/**
 * The library's eval files: the held-out set (eval-tasks.jsonl), and the counterfactual set: its edited corpus
 * (counterfactual-corpus/), its questions (eval-counterfactual.jsonl) and the config that serves it
 * (counterfactual.json: `weact-mcp eval models/qwen/eval-counterfactual.jsonl --config models/qwen/counterfactual.json`).
 */
function writeEvalFiles(run: TrainingRun, config: object): void {
  const heldOut = readQuestions("held-out.jsonl");
  const lines = (rows: readonly object[]) => rows.map((r) => `${JSON.stringify(r)}\n`).join("");
  writeFileSync(run.library.evalTasks, lines(evalTasks(heldOut)));
  const tasks = writeCounterfactual(heldOut, run.library.counterfactualCorpus);
  writeFileSync(run.library.counterfactualTasks, lines(tasks));
  const counterfactual = {
    ...config,
    tools: {
      search: {
        corpus: relative(run.out, run.library.counterfactualCorpus),
        indexFile: join("work", "search-index-counterfactual.json"),
      },
    },
  };
  writeFileSync(run.library.counterfactualConfig, `${JSON.stringify(counterfactual, null, 2)}\n`);
}

/**
 * The import step: each PEFT folder becomes a GGUF LoRA in the library's folder through the TypeScript importer, with
 * the manifest (the default library's texts, which the oracle's sessions showed), config.json (the taught backbone by
 * name, its own Jinja template, the harness limits), the static merges, the eval files, and training.json: the command, the held-out
 * set's and the data's SHA-256, the recipe, and per capability the trainer's losses, seconds and held-out target-token
 * accuracy.
 */
export async function importLibrary(run: TrainingRun, model: string): Promise<void> {
  const trained = JSON.parse(readFileSync(trainerRecord(run), "utf8")) as {
    recipe?: TrainerRecipe;
    results: CapabilityResult[];
  };
  const base = readGgufHeader(model);
  const imported: Record<string, unknown> = {};
  for (const alias of ORACLE_WORKFLOW) imported[alias] = await importAdapter(run, base, alias, `${alias}.gguf`, "qwen");
  writeLibraryManifest(run, model);
  const config = {
    model: { path: CHOOSER_BACKBONE, chatTemplate: "jinja" },
    adapters: { manifest: relative(run.out, run.library.manifest) },
    harness: QWEN_HARNESS,
  };
  writeFileSync(join(run.out, "config.json"), `${JSON.stringify(config, null, 2)}\n`);
  writeStaticMerges(run);
  writeEvalFiles(run, config);
  const training = {
    command: run.command,
    base: `${CHOOSER_BACKBONE} (Qwen2.5-Coder-0.5B-Instruct with the chooser merged, Q8_0 GGUF, dequantized to F32 by transformers; frozen)`,
    baseSha256: await sha256File(model),
    heldOutSha256: HELD_OUT_SHA256,
    trainingDataSha256: libraryDataSha256(run),
    tasks: run.tasks,
    recipe: {
      // a record from before --epochs and --batch trained with the default recipe
      ...(trained.recipe ?? LIBRARY_RECIPE),
      targetModules: "q,k,v,o,gate,up,down",
      lossMask: "the stage's own turns and exit calls",
    },
    adapters: Object.fromEntries(
      trained.results.map((t) => [
        t.capability,
        {
          ...t,
          secondsPerStep: Math.round((Number(t.seconds) / Number(t.steps)) * 10) / 10,
          imported: imported[t.capability],
        },
      ]),
    ),
  };
  writeFileSync(run.library.training, `${JSON.stringify(training, null, 2)}\n`);
  process.stdout.write(`${JSON.stringify({ imported })}\n`);
}
