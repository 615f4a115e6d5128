/**
 * `npm run train:gemma`: plan, search and write LoRAs for the real Gemma 3 270M, trained with PEFT over the frozen
 * base and shipped in models/gemma3. Steps in training/gemma/: data.ts (task files, the oracle's trajectories, each
 * stage's samples in Gemma's rendering), train.ts (train_lora.py in the pipeline's virtual environment, then the
 * TypeScript importer, the manifest and training.json).
 */
import { mkdirSync } from "node:fs";
import { join, relative } from "node:path";
import { parseArgs } from "node:util";
import { createLogger } from "../src/log.js";
import { fetchModel } from "../src/modelFiles/index.js";
import { PACKAGE_ROOT, trainedLibrary } from "../src/paths.js";
import { continueGemma } from "./gemma/continue.js";
import { writeGemmaData } from "./gemma/data.js";
import { GEMMA_DIR, GEMMA_MODEL } from "./gemma/library.js";
import { GEMMA_ALORA_DIR, writeInvocations } from "./gemma/alora.js";
import { importAdapters, trainAdapters } from "./gemma/train.js";
import type { TrainingRun } from "./pipeline/run.js";

const DEFAULTS = { step: "all", seed: "16", tasks: "168", computation: "60", threads: "2", minutes: "0" };

const HELP = `train:gemma: train plan/search/write LoRAs for Gemma 3 270M with PEFT and ship them as a library

Usage:
  npm run train:gemma -- [--step all|data|samples|train|import|continue] [--seed N] [--tasks N] [--computation N]
                         [--threads N] [--out DIR] [--alora [--minutes M]]

  --step STEP    all (default): data, train, import
                 data: the task files, the oracle's trajectories, each stage's samples (DIR/work)
                 samples: the samples again from the traces an earlier run recorded in DIR/work/traces
                 train: train_lora.py (PEFT) on the samples: PEFT folders in DIR/work/peft, then import
                 import: the PEFT folders into the library (GGUF LoRAs), manifest.json, training.json, and
                       the cross-check against llama.cpp's convert_lora_to_gguf.py (next-token log-probs)
                 continue: on the library as it is (nothing of it changes), one recording of --tasks fact and
                       --computation difference questions trains a new capability, code (DIR/code.gguf and the
                       register_adapter entry DIR/code.entry.json), and the writer that cites its evidence
                       (DIR/write-plus.gguf, for refresh_adapter); work in DIR/work/continue
  --seed N       everything random is drawn from it: the run is deterministic (default ${DEFAULTS.seed})
  --tasks N      oracle trajectories to record (default ${DEFAULTS.tasks}); continue: its fact questions
  --computation N  continue: its computation questions (default ${DEFAULTS.computation})
  --threads N    CPU threads of the pipeline's sessions and of torch (default ${DEFAULTS.threads})
  --out DIR      the library's folder (default ${relative(PACKAGE_ROOT, GEMMA_DIR)}, with --alora ${relative(PACKAGE_ROOT, GEMMA_ALORA_DIR)})
  --alora        the same data, oracle, held-out split and recipe, each capability trained as an activated LoRA
                 (PEFT's aLoRA) on its invocation sequence: the first sentence of its activation text as the server
                 renders it when the adapter is loaded (work/invocations.json); no static merges. Resumable: the
                 train step goes on from each capability's last checkpoint (in the model cache)
  --minutes M    with --alora, the train step stops at a checkpoint after M minutes (default 0: no limit)
  -h, --help     this text

Python (torch, transformers, peft, gguf; pinned in training/gemma/requirements.txt) is installed from PyPI into a
virtual environment cached in ~/.cache/weact-mcp/venv the first time; the server never needs it.
`;

const { values } = parseArgs({
  options: {
    step: { type: "string", default: DEFAULTS.step },
    seed: { type: "string", default: DEFAULTS.seed },
    tasks: { type: "string", default: DEFAULTS.tasks },
    computation: { type: "string", default: DEFAULTS.computation },
    threads: { type: "string", default: DEFAULTS.threads },
    out: { type: "string" },
    alora: { type: "boolean", default: false },
    minutes: { type: "string", default: DEFAULTS.minutes },
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
  const alora = values.alora!;
  if (alora && step === "continue") throw new Error("--alora: the continue step trains ordinary LoRAs only");
  const out = values.out ?? (alora ? GEMMA_ALORA_DIR : GEMMA_DIR);
  const logger = createLogger(process.env.WEACT_LOG_LEVEL ?? "warn");
  const run: TrainingRun = {
    seed: Number(values.seed),
    tasks: Number(values.tasks),
    merges: 0,
    threads: Number(values.threads),
    out,
    library: trainedLibrary(out),
    work: step === "continue" ? join(out, "work", "continue") : join(out, "work"),
    command:
      step === "continue"
        ? `npm run train:gemma -- --step continue --seed ${values.seed} --tasks ${values.tasks} --computation ${values.computation} --threads ${values.threads}`
        : `npm run train:gemma -- --seed ${values.seed} --tasks ${values.tasks} --threads ${values.threads}${alora ? " --alora" : ""}`,
    logger,
  };
  mkdirSync(run.work, { recursive: true });
  const model = await fetchModel(GEMMA_MODEL, { logger });
  if (step === "continue") {
    await continueGemma(run, model, Number(values.computation));
    return;
  }
  if (step === "all" || step === "data" || step === "samples") {
    await writeGemmaData(run, model, { record: step !== "samples" });
    if (alora) await writeInvocations(run, model);
  }
  if (step === "all" || step === "train") {
    // a train step that stopped at a checkpoint leaves no record: the import waits for the call that finishes
    if (!(await trainAdapters(run, model, undefined, { alora, minutes: Number(values.minutes) }))) return;
  }
  if (step === "all" || step === "train" || step === "import") await importAdapters(run, model, { alora });
}

main().catch((err) => {
  process.stderr.write(`${(err as Error).stack}\n`);
  process.exit(1);
});
