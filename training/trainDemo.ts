/**
 * `npm run train-demo`: the command line of the pipeline that makes the demo library that learned. Its steps are in
 * training/pipeline/: data.ts (corpora, task files, the oracle's trajectories, the vocabulary, the trainer's
 * windows) and train.ts (weact-train on those windows, then the library's manifest and training.json).
 */
import { mkdirSync } from "node:fs";
import { join, relative, resolve } from "node:path";
import { parseArgs } from "node:util";
import { createLogger } from "../src/log.js";
import { DEFAULT_CORPUS, PACKAGE_ROOT, TRAINED_DIR, trainedLibrary } from "../src/paths.js";
import { continueTraining } from "./pipeline/continueTraining.js";
import { writeTrainingData } from "./pipeline/data.js";
import type { TrainingRun } from "./pipeline/run.js";
import { train } from "./pipeline/train.js";

const DEFAULTS = {
  step: "all",
  seed: "16",
  tasks: "900",
  merges: "1200",
  threads: "2",
  out: TRAINED_DIR,
  computation: "0",
  epochs: "2",
};

const HELP = `train-demo: make the demo library that learned (base model, plan/search/write adapters, manifest, task files)

Usage:
  npm run train-demo -- [--step all|data|samples|train] [--seed N] [--tasks N] [--merges N] [--threads N] [--out DIR]
  npm run train-demo -- --step continue --train CAPABILITY[=FILE],... [--tasks N] [--computation N] [--cite] ...

  --step STEP    all (default): data, then train
                 data: the corpora and task files, the oracle's trajectories, the vocabulary and the
                       trainer's windows (DIR/work)
                 samples: data again from the traces an earlier run recorded in DIR/work/traces
                 train: weact-train on the windows in DIR/work; writes the models, manifest.json and training.json
                 continue: trains only the capabilities --train names on the library in DIR as it is (every other
                       file unchanged): fresh oracle trajectories in the library's own tokens, an existing
                       capability continued from its file, a new one (code) from B = 0; adds to training.json
  --train LIST   with --step continue: base, an alias of the manifest, or code; ALIAS=FILE writes FILE beside the
                 library instead of replacing the alias's own (a refresh to swap in with refresh_adapter)
  --computation N  with --step continue: computation trajectories (hard runs through the code stage) (default ${DEFAULTS.computation})
  --cite         with --step continue: the oracle's writer quotes the evidence sentence it answered from
  --epochs N     with --step continue: passes over an adapter's windows (default ${DEFAULTS.epochs}; the base takes one)
  --init ALIAS   with --step continue: a new capability starts from ALIAS's weights instead of B = 0
  --traces DIR   with --step continue: render the trajectories an earlier continue step recorded in DIR (same
                 --tasks, --computation and --cite) instead of recording them
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
    // repeatable: each --train adds to the list (a second one must not silently replace the first)
    train: { type: "string", multiple: true },
    computation: { type: "string", default: DEFAULTS.computation },
    cite: { type: "boolean", default: false },
    traces: { type: "string" },
    init: { type: "string" },
    epochs: { type: "string", default: DEFAULTS.epochs },
    help: { type: "boolean", short: "h" },
  },
});

async function main(): Promise<void> {
  if (values.help) {
    process.stdout.write(HELP);
    return;
  }
  const out = resolve(values.out!);
  const run: TrainingRun = {
    seed: Number(values.seed),
    tasks: Number(values.tasks),
    merges: Number(values.merges),
    threads: Number(values.threads),
    out,
    library: trainedLibrary(out),
    work: join(out, "work"),
    command:
      values.step === "continue"
        ? `npm run train-demo -- --step continue --train ${values.train?.join(",")} --seed ${values.seed} --tasks ${values.tasks} --computation ${values.computation}${values.cite ? " --cite" : ""} --epochs ${values.epochs}${values.init ? ` --init ${values.init}` : ""}${values.traces ? ` --traces ${values.traces}` : ""} --threads ${values.threads}`
        : `npm run train-demo -- --seed ${values.seed} --tasks ${values.tasks} --merges ${values.merges} --threads ${values.threads}`,
    logger: createLogger(process.env.WEACT_LOG_LEVEL ?? "warn"),
  };
  mkdirSync(run.work, { recursive: true });
  if (values.step === "continue") {
    if (!values.train?.length)
      throw new Error(
        "--step continue needs --train: the capabilities to train, e.g. --train code or --train base,write",
      );
    await continueTraining(run, {
      train: values.train.flatMap((t) => t.split(",")).map((s) => s.trim()),
      computation: Number(values.computation),
      cite: values.cite!,
      epochs: Number(values.epochs),
      ...(values.init ? { init: values.init } : {}),
      ...(values.traces ? { traces: resolve(values.traces) } : {}),
    });
    return;
  }
  const recording = values.step === "data" || values.step === "all";
  if (recording || values.step === "samples") await writeTrainingData(run, { record: recording });
  if (values.step === "train" || values.step === "all") train(run);
}

main().catch((err) => {
  process.stderr.write(`${(err as Error).stack}\n`);
  process.exit(1);
});
