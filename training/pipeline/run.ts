import { join } from "node:path";
import { BASE_CAPABILITY } from "../../src/library/manifest.js";
import type { Logger } from "../../src/log.js";
import type { trainedLibrary } from "../../src/paths.js";
import { ORACLE_WORKFLOW } from "./OracleDriver.js";

/** One run of `npm run train-demo` as its command line set it: each step reads its knobs and writes to its folders. */
export interface TrainingRun {
  /** Everything random (tasks, edits, windows, initial weights, the trainer's shuffle) is drawn from it. */
  seed: number;
  /** How many oracle trajectories the data step records. */
  tasks: number;
  /** How many BPE merges the vocabulary learns. */
  merges: number;
  /** CPU threads of the pipeline's sessions and of the trainer. */
  threads: number;
  /** The library's folder (--out), and its files. */
  out: string;
  library: ReturnType<typeof trainedLibrary>;
  /** Under `out`: traces, search indexes, edited corpora, the trainer's windows and the intermediate models. */
  work: string;
  /** The command that reproduces the run, as training.json records it. */
  command: string;
  logger: Logger;
}

/** What the pipeline trains: the base (which chooses the stages) and an adapter per stage of the oracle's workflow. */
export const CAPABILITIES = [BASE_CAPABILITY, ...ORACLE_WORKFLOW];

/**
 * The files the data step leaves in `work` for the training step: the untrained base, and each capability's windows.
 */
export const initialModelFile = (run: TrainingRun) => join(run.work, "init.gguf");
export const windowsFile = (run: TrainingRun, capability: string) => join(run.work, `${capability}.bin`);
export const heldOutFile = (run: TrainingRun, capability: string) => join(run.work, `${capability}.held.bin`);
