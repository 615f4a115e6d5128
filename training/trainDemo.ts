/**
 * `npm run train-demo`: the command line of the pipeline that makes the demo library that learned. Its steps are in
 * training/pipeline/: data.ts (corpora, task files, the oracle's trajectories, the vocabulary, the trainer's
 * windows) and train.ts (weact-train on those windows, then the library's manifest and training.json).
 */
import { mkdirSync } from "node:fs";
import { join, relative } from "node:path";
import { parseArgs } from "node:util";
import { createLogger } from "../src/log.js";
import { DEFAULT_CORPUS, PACKAGE_ROOT, TRAINED_DIR, trainedLibrary } from "../src/paths.js";
import { writeTrainingData } from "./pipeline/data.js";
import type { TrainingRun } from "./pipeline/run.js";
import { train } from "./pipeline/train.js";

const DEFAULTS = { step: "all", seed: "16", tasks: "900", merges: "1200", threads: "2", out: TRAINED_DIR };

const HELP = `train-demo: make the demo library that learned (base model, plan/search/write adapters, manifest, task files)

Usage:
  npm run train-demo -- [--step all|data|samples|train] [--seed N] [--tasks N] [--merges N] [--threads N] [--out DIR]

  --step STEP    all (default): data, then train
                 data: the corpora and task files, the oracle's trajectories, the vocabulary and the
                       trainer's windows (DIR/work)
                 samples: data again from the traces an earlier run recorded in DIR/work/traces
                 train: weact-train on the windows in DIR/work; writes the models, manifest.json and training.json
  --seed N       everything random is drawn from it: the run is deterministic (default ${DEFAULTS.seed})
  --tasks N      oracle trajectories to record (default ${DEFAULTS.tasks})
  --merges N     BPE merges the vocabulary learns (default ${DEFAULTS.merges})
  --threads N    CPU threads of the pipeline's sessions and of the trainer (default ${DEFAULTS.threads})
  --out DIR      the library's folder (default ${relative(PACKAGE_ROOT, DEFAULTS.out)})
  -h, --help     this text

The data and samples steps also rewrite the shipped corpus's entity files (${relative(PACKAGE_ROOT, join(DEFAULT_CORPUS, "entities"))}).
`;

const { values } = parseArgs({
  options: {
    step: { type: "string", default: DEFAULTS.step },
    seed: { type: "string", default: DEFAULTS.seed },
    tasks: { type: "string", default: DEFAULTS.tasks },
    merges: { type: "string", default: DEFAULTS.merges },
    threads: { type: "string", default: DEFAULTS.threads },
    out: { type: "string", default: DEFAULTS.out },
    help: { type: "boolean", short: "h" },
  },
});

async function main(): Promise<void> {
  if (values.help) {
    process.stdout.write(HELP);
    return;
  }
  const out = values.out!;
  const run: TrainingRun = {
    seed: Number(values.seed),
    tasks: Number(values.tasks),
    merges: Number(values.merges),
    threads: Number(values.threads),
    out,
    library: trainedLibrary(out),
    work: join(out, "work"),
    command: `npm run train-demo -- --seed ${values.seed} --tasks ${values.tasks} --merges ${values.merges} --threads ${values.threads}`,
    logger: createLogger(process.env.WEACT_LOG_LEVEL ?? "warn"),
  };
  mkdirSync(run.work, { recursive: true });
  const recording = values.step === "data" || values.step === "all";
  if (recording || values.step === "samples") await writeTrainingData(run, { record: recording });
  if (values.step === "train" || values.step === "all") train(run);
}

main().catch((err) => {
  process.stderr.write(`${(err as Error).stack}\n`);
  process.exit(1);
});
