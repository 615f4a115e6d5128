import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { DEMO_DIMS, qwen3LoraFile } from "../../src/demo/qwen3.js";
import { writeGguf } from "../../src/gguf/index.js";
import { DEFAULT_MANIFEST } from "../../src/paths.js";
import { ORACLE_WORKFLOW } from "./OracleDriver.js";
import { CAPABILITIES, heldOutFile, initialModelFile, windowsFile, type TrainingRun } from "./run.js";
import { trainerBinary } from "./trainer.js";

/**
 * Per model: the learning rate and the passes over its windows. `copy` is the pretraining's first phase: copying
 * alone, until the model has learned it (held-out copy accuracy 70% after one pass, 99% after three), and only then
 * recall with copying mixed in. Started from random weights on both at once, the pretraining copied 77-84% of
 * held-out windows, by how the vocabulary and the shuffle fell, and the search stage's handoff swung with it: two
 * runs that differed only in their vocabulary scored 47% and 19% under hard. From a model that copies, recall
 * reached 89% where it had reached 72-76%. The base's own turns then take one pass (100% of held-out targets after
 * it), which pays for the copying's time: 45 minutes in all on 2 cores.
 */
export const TRAINING: Readonly<Record<string, { lr: number; epochs: number }>> = {
  copy: { lr: 3e-3, epochs: 3 },
  recall: { lr: 3e-3, epochs: 1 },
  base: { lr: 3e-3, epochs: 1 },
  plan: { lr: 3e-3, epochs: 2 },
  search: { lr: 3e-3, epochs: 2 },
  write: { lr: 3e-3, epochs: 2 },
};
const ADAPTER_RANK = 32;

/**
 * The training step, from the data step's windows: pretrains the base (copy, then recall), trains it on its own
 * turns and an adapter per stage with weact-train, each scored on its held-out windows; then writes the library's
 * manifest and training.json (the command, the training data's hash, the hyperparameters and the scores), and
 * prints that record as one JSON line.
 */
export function train(run: TrainingRun): void {
  const { out, library, work } = run;
  const { fit, score } = trainerCommands(run);
  const base = library.model;
  // every model is also scored on held-out copy windows: a stage that cannot copy cannot read its context
  const report: Record<string, { training: unknown; heldOut: unknown; copyHeldOut: unknown; bytes: number }> = {};
  const started = Date.now();
  const copier = join(work, "copier.gguf");
  const copy = fit(
    ["--model", initialModelFile(run), "--data", windowsFile(run, "copy"), "--out", copier],
    TRAINING.copy!,
  );
  const copied = score(["--model", copier], "copy");
  report.copy = { training: copy, heldOut: copied, copyHeldOut: copied, bytes: statSync(copier).size };
  const pretrained = join(work, "pretrained.gguf");
  const recall = fit(["--model", copier, "--data", windowsFile(run, "recall"), "--out", pretrained], TRAINING.recall!);
  report.recall = {
    training: recall,
    heldOut: score(["--model", pretrained], "recall"),
    copyHeldOut: score(["--model", pretrained], "copy"),
    bytes: statSync(pretrained).size,
  };
  const training = fit(["--model", pretrained, "--data", windowsFile(run, "base"), "--out", base], TRAINING.base!);
  report.base = {
    training,
    heldOut: score(["--model", base], "base"),
    copyHeldOut: score(["--model", base], "copy"),
    bytes: statSync(base).size,
  };
  for (const alias of ORACLE_WORKFLOW) {
    const init = initialAdapter(run, alias);
    const adapter = join(out, `${alias}.gguf`);
    const training = fit(
      ["--model", base, "--lora", init, "--data", windowsFile(run, alias), "--out", adapter],
      TRAINING[alias]!,
    );
    report[alias] = {
      training,
      heldOut: score(["--model", base, "--lora", adapter], alias),
      copyHeldOut: score(["--model", base, "--lora", adapter], "copy"),
      bytes: statSync(adapter).size,
    };
  }
  writeLibraryManifest(run, base);
  const data = createHash("sha256");
  for (const capability of ["copy", "recall", ...CAPABILITIES]) data.update(readFileSync(windowsFile(run, capability)));
  const record = {
    command: run.command,
    trainingDataSha256: data.digest("hex"),
    seconds: Math.round((Date.now() - started) / 1000),
    hyperparameters: { ...TRAINING, adapterRank: ADAPTER_RANK },
    models: report,
  };
  writeFileSync(library.training, `${JSON.stringify(record, null, 2)}\n`);
  process.stdout.write(`${JSON.stringify(record)}\n`);
}

/** weact-train's two uses: `fit` a model (or a LoRA on it) to windows, and `score` one on held-out windows. */
export function trainerCommands(run: TrainingRun) {
  const trainer = trainerBinary();
  const threads = ["--threads", String(run.threads)];
  const json = <T>(args: string[]) =>
    JSON.parse(
      execFileSync(trainer, [...args, ...threads], { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] })
        .trim()
        .split("\n")
        .at(-1)!,
    ) as T;
  const fit = (args: string[], hp: { lr: number; epochs: number }) =>
    json<{ steps: number; tokens: number; seconds: number }>([
      ...args,
      "--seed",
      String(run.seed),
      "--batch",
      "4",
      "--log-every",
      "25",
      "--lr",
      String(hp.lr),
      "--epochs",
      String(hp.epochs),
    ]);
  const score = (args: string[], capability: string) =>
    json<{ samples: number; targets: number; loss: number; accuracy: number }>([
      ...args,
      "--eval",
      heldOutFile(run, capability),
    ]);
  return { fit, score };
}

/** A new adapter's starting point in the work folder: B = 0, so it starts as the base itself. */
export function initialAdapter(run: TrainingRun, alias: string): string {
  const init = join(run.work, `${alias}-init.gguf`);
  const lora = qwen3LoraFile({
    name: `weact-demo-trained-${alias}`,
    dims: DEMO_DIMS,
    rank: ADAPTER_RANK,
    seed: run.seed + alias.length,
    strength: 0,
  });
  writeGguf(init, lora.metadata, lora.tensors);
  return init;
}

/**
 * A trained library's manifest: the default library's entries (the same capability texts the oracle's sessions
 * showed), on the trained files, with a stage budget for the aliases `budgets` names, each recorded for the base model
 * at `model` (its SHA-256: a server of another base refuses them).
 */
export function writeLibraryManifest(
  run: TrainingRun,
  model: string,
  budgets: Readonly<Record<string, Record<string, number>>> = {},
): void {
  const baseSha256 = createHash("sha256").update(readFileSync(model)).digest("hex");
  const defaults = JSON.parse(readFileSync(DEFAULT_MANIFEST, "utf8")) as {
    adapters: { alias: string; file: string }[];
  };
  const adapters = defaults.adapters
    .filter((a) => (ORACLE_WORKFLOW as readonly string[]).includes(a.alias))
    .map((a) => ({
      ...a,
      file: `${a.alias}.gguf`,
      ...(budgets[a.alias] ? { budget: budgets[a.alias] } : {}),
      baseSha256,
    }));
  writeFileSync(run.library.manifest, `${JSON.stringify({ adapters }, null, 2)}\n`);
}
