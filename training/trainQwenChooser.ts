/**
 * `npm run train:qwen-chooser`: teaches Qwen2.5-Coder-0.5B-Instruct the WeAct interface, a LoRA trained with PEFT on
 * the base's own turns only (which capability to load next, from the history and the listed descriptions, and when
 * to end the turn). Steps in training/qwen/: data.ts (the oracle's soft trajectories read through random libraries,
 * rendered as the server renders them), train.ts (train_lora.py, resumable from its last checkpoint). Its work folder
 * is in the model cache, outside the repository.
 */
import { existsSync, mkdirSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { parseArgs } from "node:util";
import { createLogger } from "../src/log.js";
import { fetchModel } from "../src/modelFiles/index.js";
import { modelCacheDir } from "../src/modelFiles/cacheDir.js";
import { trainedLibrary } from "../src/paths.js";
import type { TrainingRun } from "./pipeline/run.js";
import { writeChooserData } from "./qwen/data.js";
import { CHOOSER_MODEL, chooserCheckpoints, chooserRecord, importChooser, trainChooser } from "./qwen/train.js";

const DEFAULTS = { step: "all", seed: "66", tasks: "150", held: "30", threads: "2", minutes: "0" };

const HELP = `train:qwen-chooser: teach Qwen2.5-Coder-0.5B-Instruct to choose its own capability adapters

Usage:
  npm run train:qwen-chooser -- [--step all|data|samples|train|import] [--seed N] [--tasks N] [--held N] [--threads N]
                                [--minutes M] [--work DIR]

  --step STEP    all (default): data, train, then import once training is done
                 data: the oracle's soft trajectories over --tasks training and --held held-out questions, each
                       read through random capability libraries: base.bin and base.held.bin in the work folder
                 samples: the samples again from the trajectories an earlier data step recorded
                 train: train_lora.py on them (PEFT, the base's turns only), from its last checkpoint if any
                 import: the trained LoRA into models/qwen-chooser (chooser.gguf, training.json, held-out.jsonl)
  --seed N       everything random is drawn from it (default ${DEFAULTS.seed})
  --tasks N      training trajectories to record (default ${DEFAULTS.tasks})
  --held N       held-out trajectories (default ${DEFAULTS.held})
  --threads N    CPU threads of torch (default ${DEFAULTS.threads})
  --minutes M    train: stop after M minutes at a checkpoint, to resume later (0: run to the end)
  --work DIR     the work folder (default: training/qwen-chooser beside the model cache)
  -h, --help     this text
`;

const { values } = parseArgs({
  options: {
    step: { type: "string", default: DEFAULTS.step },
    seed: { type: "string", default: DEFAULTS.seed },
    tasks: { type: "string", default: DEFAULTS.tasks },
    held: { type: "string", default: DEFAULTS.held },
    threads: { type: "string", default: DEFAULTS.threads },
    minutes: { type: "string", default: DEFAULTS.minutes },
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
  if (!["all", "data", "samples", "train", "import"].includes(step))
    throw new Error(`--step: "${step}" is not one of all, data, samples, train, import`);
  const work = values.work ?? join(dirname(modelCacheDir()), "training", "qwen-chooser");
  mkdirSync(work, { recursive: true });
  const logger = createLogger(process.env.WEACT_LOG_LEVEL ?? "warn");
  const run: TrainingRun = {
    seed: Number(values.seed),
    tasks: Number(values.tasks),
    merges: 0,
    threads: Number(values.threads),
    out: work,
    library: trainedLibrary(work),
    work,
    command: `npm run train:qwen-chooser -- --seed ${values.seed} --tasks ${values.tasks} --held ${values.held}`,
    logger,
  };
  const model = await fetchModel(CHOOSER_MODEL, { logger });
  if (step === "all" || step === "data" || step === "samples") {
    // new samples: the last training's checkpoints and record belong to the old ones
    rmSync(chooserCheckpoints(run), { recursive: true, force: true });
    rmSync(chooserRecord(run), { force: true });
    const data = await writeChooserData(run, model, Number(values.held), { record: step !== "samples" });
    process.stdout.write(`${JSON.stringify({ step: "data", ...data })}\n`);
  }
  if (step === "all" || step === "train") await trainChooser(run, model, Number(values.minutes));
  if (step === "import" || (step === "all" && existsSync(chooserRecord(run)))) await importChooser(run, model);
}

main().catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
