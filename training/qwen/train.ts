import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { readGgufHeader } from "../../src/gguf/index.js";
import { BASE_CAPABILITY } from "../../src/library/manifest.js";
import { importPeft } from "../../src/library/peft/index.js";
import { runTrainer } from "../gemma/train.js";
import type { TrainingRun } from "../pipeline/run.js";
import { chooserDataSha256, chooserSamples } from "./data.js";
import { CHOOSER_FILES } from "./library.js";

/** The backbone the chooser is trained on (`weact-mcp fetch-model qwen2.5-coder-0.5b-instruct`). */
export const CHOOSER_MODEL = "qwen2.5-coder-0.5b-instruct";

/**
 * The recipe: rank 4 over the seven projections keeps the adapter at about 4.4 MB in F16 (under the 5 MiB a committed
 * file may weigh); torch trains the 0.5B model at about 35 tokens/s on 2 cores, and a sample is a whole trajectory
 * (1-2k tokens, most of them the system prompt and the function docs), so one pass over the samples, in batches of 4.
 */
export const CHOOSER_RECIPE = { rank: 4, alpha: 8, lr: 1e-3, epochs: 1, batch: 4, warmup: 4 } as const;

/** The train step's record: the trainer's result line, the data's SHA-256, the seconds. */
export const chooserRecord = (run: TrainingRun) => join(run.work, "peft", "results.json");
/** Where train_lora.py keeps its last checkpoint: samples written anew start a new training. */
export const chooserCheckpoints = (run: TrainingRun) => join(run.work, "checkpoints");

/**
 * The train step: train_lora.py on the base's samples (PEFT, the loss on the base's own turns only), resumed from its
 * last checkpoint (in the work folder) when there is one; after `minutes` it stops at a checkpoint, to go on at the
 * next call. Progress lines go to stderr; when the pass is done, the result goes to the record.
 */
export async function trainChooser(run: TrainingRun, model: string, minutes: number): Promise<void> {
  const started = Date.now();
  const [result] = await runTrainer(run, model, [BASE_CAPABILITY], CHOOSER_RECIPE, [
    ...["--log-every", "1", "--checkpoints", chooserCheckpoints(run), "--checkpoint-every", "2"],
    ...["--max-minutes", String(minutes)],
  ]);
  if (!result) {
    process.stderr.write("train_lora.py stopped at a checkpoint: run the train step again to go on\n");
    return;
  }
  const record = {
    command: run.command,
    trainingDataSha256: chooserDataSha256(run),
    lastCallSeconds: Math.round((Date.now() - started) / 1000),
    recipe: { ...CHOOSER_RECIPE, targetModules: "q,k,v,o,gate,up,down", lossMask: "the base's own turns" },
    result,
  };
  writeFileSync(chooserRecord(run), `${JSON.stringify(record, null, 2)}\n`);
  process.stdout.write(`${JSON.stringify(record)}\n`);
}

/**
 * The import step: the PEFT folder becomes the chooser LoRA GGUF (F16) through the TypeScript importer, committed in
 * models/qwen-chooser with its training record (the trainer's result, the data's SHA-256, the recipe, the LoRA's
 * SHA-256) and the held-out histories the decision check replays.
 */
export async function importChooser(run: TrainingRun, model: string): Promise<void> {
  const trained = JSON.parse(readFileSync(chooserRecord(run), "utf8")) as Record<string, unknown>;
  mkdirSync(dirname(CHOOSER_FILES.lora), { recursive: true });
  const imported = await importPeft({
    dir: join(run.work, "peft", BASE_CAPABILITY),
    base: readGgufHeader(model),
    alias: "chooser",
    name: "weact-qwen2.5-coder-0.5b-chooser",
    outFile: CHOOSER_FILES.lora,
    overwrite: true,
  });
  copyFileSync(chooserSamples(run).histories, CHOOSER_FILES.histories);
  const record = {
    ...trained,
    base: `${CHOOSER_MODEL} (Q4_K_M GGUF, dequantized to F32 by transformers; frozen)`,
    lora: { file: "chooser.gguf", rank: imported.rank, alpha: imported.alpha, sha256: imported.sha256 },
  };
  writeFileSync(CHOOSER_FILES.training, `${JSON.stringify(record, null, 2)}\n`);
  process.stdout.write(`${JSON.stringify(record.lora)}\n`);
}
