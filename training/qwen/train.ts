import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { BASE_CAPABILITY } from "../../src/library/manifest.js";
import { PYTHON_SOURCES } from "../gemma/library.js";
import { pipelinePython } from "../gemma/venv.js";
import type { TrainingRun } from "../pipeline/run.js";
import { chooserSamples } from "./data.js";

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

/**
 * The train step: train_lora.py on the base's samples (PEFT, the loss on the base's own turns only), resumed from its
 * last checkpoint (in the work folder) when there is one; after `minutes` it stops at a checkpoint, to go on at the
 * next call. Progress lines go to stderr; when the pass is done, the result goes to the record.
 */
export async function trainChooser(run: TrainingRun, model: string, minutes: number): Promise<void> {
  const started = Date.now();
  const python = pipelinePython(run.logger);
  const r = CHOOSER_RECIPE;
  const args = [
    join(PYTHON_SOURCES, "train_lora.py"),
    ...["--model", model, "--work", run.work, "--out", join(run.work, "peft")],
    ...["--seed", String(run.seed), "--threads", String(run.threads), "--capabilities", BASE_CAPABILITY],
    ...["--rank", String(r.rank), "--alpha", String(r.alpha), "--lr", String(r.lr)],
    ...["--epochs", String(r.epochs), "--batch", String(r.batch), "--warmup", String(r.warmup)],
    ...["--log-every", "1", "--checkpoints", join(run.work, "checkpoints"), "--checkpoint-every", "2"],
    ...["--max-minutes", String(minutes)],
  ];
  const child = spawn(python, args, { stdio: ["ignore", "pipe", "inherit"] });
  let result: Record<string, unknown> | undefined;
  for await (const line of createInterface({ input: child.stdout })) {
    const parsed = JSON.parse(line) as { result?: Record<string, unknown> };
    if (parsed.result) result = parsed.result;
    process.stderr.write(`${line}\n`);
  }
  const code = await new Promise<number | null>((done) => child.on("close", done));
  if (code !== 0) throw new Error(`train_lora.py exited with ${code}`);
  if (!result) {
    process.stderr.write("train_lora.py stopped at a checkpoint: run the train step again to go on\n");
    return;
  }
  const files = chooserSamples(run);
  const data = createHash("sha256");
  data.update(readFileSync(files.training));
  data.update(readFileSync(files.held));
  const record = {
    command: run.command,
    trainingDataSha256: data.digest("hex"),
    lastCallSeconds: Math.round((Date.now() - started) / 1000),
    recipe: { ...r, targetModules: "q,k,v,o,gate,up,down", lossMask: "the base's own turns" },
    result,
  };
  writeFileSync(chooserRecord(run), `${JSON.stringify(record, null, 2)}\n`);
  process.stdout.write(`${JSON.stringify(record)}\n`);
}
