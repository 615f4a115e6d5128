import { createHash } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { startExportServices } from "../../src/composition/services.js";
import { checkInvocation } from "../../src/library/loadExchange.js";
import { modelCacheDir } from "../../src/modelFiles/cacheDir.js";
import { PACKAGE_ROOT } from "../../src/paths.js";
import { ORACLE_WORKFLOW } from "../pipeline/OracleDriver.js";
import { heldOutFile, windowsFile, type TrainingRun } from "../pipeline/run.js";
import { pipelineConfig } from "../pipeline/trajectories.js";
import { gemmaTestAdapters } from "../../testkit/realModelAdapters.js";

/** The shipped activated-LoRA library (`--library gemma3-alora`): the Gemma library's capabilities as aLoRAs. */
export const GEMMA_ALORA_DIR = join(PACKAGE_ROOT, "models", "gemma3-alora");

/**
 * An aLoRA's invocation text: the first sentence of its activation text ("Planning capability active."). It is what
 * the server renders right after a load of that adapter succeeds and at no other time (a refused load_lora gets an
 * error instead, and the call itself is written before the load is decided), it names one capability, and it is
 * short: the adapter applies from its start, so everything before (the prompt, the history, the call) stays the
 * base's KV, and the rest of the activation text is already the adapter's to read.
 */
export function invocationText(activation: string): string {
  const end = activation.indexOf(". ");
  return end < 0 ? activation : activation.slice(0, end + 1);
}

/** Each capability's invocation: its text and its token ids as the served model renders them in the load exchange. */
export type Invocations = Record<string, { text: string; tokens: number[] }>;

export const invocationsFile = (run: TrainingRun) => join(run.work, "invocations.json");

/**
 * Each capability's invocation sequence, taken from its load exchange as the server renders it for `model` with the
 * library the samples were rendered with (the activation texts the shipped manifest keeps): the tokens of its
 * invocation text there, checked in that exchange by the server's own registration check.
 * Written to the work folder for train_lora.py.
 */
export async function writeInvocations(run: TrainingRun, model: string): Promise<Invocations> {
  const manifest = gemmaTestAdapters(model).manifest;
  const { runtime, dispose } = await startExportServices(
    pipelineConfig(run, join(run.work, "traces"), { modelPath: model, manifest }),
    run.logger,
  );
  try {
    const invocations: Invocations = {};
    for (const alias of ORACLE_WORKFLOW) {
      const entry = runtime.library.get(alias)?.entry;
      if (!entry?.activation) throw new Error(`${manifest}: "${alias}" has no activation text`);
      const text = invocationText(entry.activation);
      const tokens = runtime.engine.tokenize(text);
      // the server's own registration check: training never makes an adapter the server would refuse
      checkInvocation(runtime.engine, entry, tokens);
      invocations[alias] = { text, tokens };
    }
    writeFileSync(invocationsFile(run), `${JSON.stringify(invocations, null, 2)}\n`);
    return invocations;
  } finally {
    await dispose();
  }
}

/** The invocation sequences as train_lora.py takes them ({capability: [token ids]}), beside the others. */
export function trainerInvocations(run: TrainingRun): string {
  const invocations = JSON.parse(readFileSync(invocationsFile(run), "utf8")) as Invocations;
  const file = join(run.work, "invocation-tokens.json");
  writeFileSync(file, JSON.stringify(Object.fromEntries(Object.entries(invocations).map(([a, i]) => [a, i.tokens]))));
  return file;
}

/**
 * Where train_lora.py keeps each capability's last checkpoint for this run's data (the samples and invocations
 * hashed): in the model cache, outside the repository, so a stopped run resumes and new data starts afresh.
 */
export function aloraCheckpoints(run: TrainingRun): string {
  const data = createHash("sha256");
  for (const alias of ORACLE_WORKFLOW) data.update(readFileSync(windowsFile(run, alias)));
  for (const alias of ORACLE_WORKFLOW) data.update(readFileSync(heldOutFile(run, alias)));
  data.update(readFileSync(invocationsFile(run)));
  return join(dirname(modelCacheDir()), "training", "gemma3-alora", data.digest("hex").slice(0, 16));
}
