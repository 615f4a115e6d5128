/**
 * `npm run train:qwen-library`: the Qwen capability library (`--library qwen`): plan, search and write LoRAs trained
 * with PEFT over the taught backbone (Qwen2.5-Coder-0.5B-Instruct with the chooser merged), on the oracle's
 * trajectories over the library's questions (training/qwen/questions/: records and prose, one hop or two, any
 * wording). Steps in training/qwen/: libraryData.ts, trainLibrary.ts. Its work folder is in the model cache, outside
 * the repository; the train step resumes from its last checkpoint there.
 */
import { existsSync, mkdirSync, rmSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { parseArgs } from "node:util";
import { createLogger } from "../src/log.js";
import { fetchModel } from "../src/modelFiles/index.js";
import { modelCacheDir } from "../src/modelFiles/cacheDir.js";
import { PACKAGE_ROOT, trainedLibrary } from "../src/paths.js";
import { CHOOSER_BACKBONE, QWEN_LIBRARY_DIR } from "./qwen/library.js";
import { writeLibraryData } from "./qwen/libraryData.js";
import { importLibrary, LIBRARY_RECIPE, libraryCheckpoints, trainLibrary } from "./qwen/trainLibrary.js";
import { continueQwen } from "./qwen/continueLibrary.js";
import { trainerRecord } from "./gemma/paths.js";
import { CODE } from "./pipeline/OracleDriver.js";
import { windowsFile, type TrainingRun } from "./pipeline/run.js";

const DEFAULTS = {
  step: "all",
  seed: "69",
  tasks: "64",
  computation: "40",
  epochs: String(LIBRARY_RECIPE.epochs),
  batch: String(LIBRARY_RECIPE.batch),
  threads: "2",
  minutes: "0",
};

const HELP = `train:qwen-library: train plan/search/write LoRAs over the taught Qwen backbone and ship them as a library

Usage:
  npm run train:qwen-library -- [--step all|data|samples|train|import|continue] [--seed N] [--tasks N]
                                [--computation N] [--epochs N] [--batch N] [--threads N] [--minutes M]
                                [--out DIR] [--work DIR]

  --step STEP    all (default): data, train, then import once training is done
                 data: the oracle's trajectories over --tasks questions drawn from training/qwen/questions (records
                       and prose, one hop or two; two thirds soft, the rest hard), each stage's samples
                 samples: the samples again from the trajectories an earlier data step recorded
                 train: train_lora.py on them (PEFT, each stage's own turns), from its last checkpoint if any
                 import: the trained LoRAs into the library folder (GGUF), manifest.json, config.json, the static
                       merges, the eval files, training.json
                 continue: on the library as it is (nothing of it changes), a new capability, code, trained on the
                       oracle's runs over --computation difference questions: DIR/code.gguf and its register_adapter
                       entry DIR/code.entry.json, the held-out eval-computation.jsonl. Resumable: a call that finds
                       the samples of an earlier one (WORK/continue/code.bin) trains on from its checkpoint
                       (delete WORK/continue to record again)
  --seed N       everything random is drawn from it (default ${DEFAULTS.seed})
  --tasks N      questions to record (default ${DEFAULTS.tasks})
  --computation N  continue: difference questions to record (default ${DEFAULTS.computation})
  --epochs N     train, continue: passes over the samples (default ${DEFAULTS.epochs})
  --batch N      train, continue: samples per optimizer step (default ${DEFAULTS.batch})
  --threads N    CPU threads of the pipeline's sessions and of torch (default ${DEFAULTS.threads})
  --minutes M    train: stop after M minutes at a checkpoint, to resume later (0: run to the end)
  --out DIR      the library's folder (default ${relative(PACKAGE_ROOT, QWEN_LIBRARY_DIR)})
  --work DIR     the work folder (default: training/qwen-library beside the model cache)
  -h, --help     this text
`;

const { values } = parseArgs({
  options: {
    step: { type: "string", default: DEFAULTS.step },
    seed: { type: "string", default: DEFAULTS.seed },
    tasks: { type: "string", default: DEFAULTS.tasks },
    computation: { type: "string", default: DEFAULTS.computation },
    epochs: { type: "string", default: DEFAULTS.epochs },
    batch: { type: "string", default: DEFAULTS.batch },
    threads: { type: "string", default: DEFAULTS.threads },
    minutes: { type: "string", default: DEFAULTS.minutes },
    out: { type: "string" },
    work: { type: "string" },
    help: { type: "boolean", short: "h" },
  },
});

async function main(): Promise<void> {
  if (values.help) {
    process.stdout.write(HELP);
    return;
  }
  const step = values.step!;
  if (!["all", "data", "samples", "train", "import", "continue"].includes(step))
    throw new Error(`--step: "${step}" is not one of all, data, samples, train, import, continue`);
  const out = values.out ?? QWEN_LIBRARY_DIR;
  const work = values.work ?? join(dirname(modelCacheDir()), "training", "qwen-library");
  mkdirSync(out, { recursive: true });
  mkdirSync(work, { recursive: true });
  const run: TrainingRun = {
    seed: Number(values.seed),
    tasks: Number(values.tasks),
    merges: 0,
    threads: Number(values.threads),
    out,
    library: trainedLibrary(out),
    work,
    command: `npm run train:qwen-library -- --seed ${values.seed} --tasks ${values.tasks} --epochs ${values.epochs} --batch ${values.batch}`,
    logger: createLogger(process.env.WEACT_LOG_LEVEL ?? "warn"),
  };
  const model = await fetchModel(CHOOSER_BACKBONE, { logger: run.logger });
  const recipe = { ...LIBRARY_RECIPE, epochs: Number(values.epochs), batch: Number(values.batch) };
  if (step === "continue") {
    const record = !existsSync(windowsFile({ ...run, work: join(work, "continue") }, CODE));
    const minutes = Number(values.minutes);
    await continueQwen(run, model, Number(values.computation), { record, recipe, minutes });
    return;
  }
  if (step === "all" || step === "data" || step === "samples") {
    // new samples: the last training's checkpoints and record belong to the old ones
    rmSync(libraryCheckpoints(run), { recursive: true, force: true });
    rmSync(trainerRecord(run), { force: true });
    await writeLibraryData(run, model, { record: step !== "samples" });
  }
  let trained = existsSync(trainerRecord(run));
  if (step === "all" || step === "train") trained = await trainLibrary(run, model, recipe, Number(values.minutes));
  if (step === "import" || (step === "all" && trained)) await importLibrary(run, model);
}

main().catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
