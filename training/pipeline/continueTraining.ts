import { createHash } from "node:crypto";
import { copyFileSync, mkdirSync, renameSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { basename, join } from "node:path";
import { ensureDemoWeights } from "../../src/demo/ensure.js";
import { SeededRandom } from "../../src/demo/random.js";
import { BASE_CAPABILITY } from "../../src/library/manifest.js";
import { DEFAULT_MANIFEST } from "../../src/paths.js";
import { readFacts } from "./facts.js";
import { CODE } from "./OracleDriver.js";
import { TRAINING_ENTITIES } from "./paths.js";
import { windowsFile, type TrainingRun } from "./run.js";
import { computationTasks, trainingTasks, writeComputationEvalTasks } from "./tasks.js";
import { initialAdapter, TRAINING, trainerCommands } from "./train.js";
import { recordTrajectories, renderTraces } from "./trajectories.js";
import { vocabularyId } from "./vocabulary.js";
import { pretrainingWindows, writeWindows } from "./windows.js";

/**
 * The code capability's manifest entry: what `register_adapter` is given to insert it (the library keeps it beside
 * the adapter, `code.entry.json`), and what the oracle's sessions listed while recording its stages.
 */
export const CODE_ENTRY = {
  alias: CODE,
  description:
    "Computation: write a short program over the values the evidence in the history states, run it with run_code, and hand off its result.",
  file: "code.gguf",
  scale: 1,
  activation:
    "Code capability active. Compute what the task asks from the values found so far (look up one that is missing), run it with run_code, and release with offload_lora, putting the result in handoff.",
  release: "Code capability released. The computed result is in the handoff.",
};

/** What `--step continue` trains: each capability, the library file it writes, and the file it continues from. */
export interface Continuation {
  /** `capability` (its own file) or `capability=file.gguf` (written beside it: a refresh to swap in later). */
  train: readonly string[];
  /** Computation trajectories (hard runs through the code stage) recorded beside the `--tasks` fact ones. */
  computation: number;
  /** The oracle's writer quotes the evidence sentence it answered from (the write++ refresh). */
  cite: boolean;
  /**
   * Trajectories an earlier continue step recorded with the same --tasks, --computation and --cite (recording does not
   * depend on the library's weights: the oracle writes every turn), rendered instead of recording them again.
   */
  traces?: string;
  /** Passes over an adapter's windows (the base takes one). */
  epochs: number;
  /**
   * An alias of the library whose weights a new capability starts from instead of B = 0 (warm start: its file is only
   * read): a library's adapters train on 2 passes over 900 trajectories, a continuation on a few dozen.
   */
  init?: string;
}

/** The code capability's entry beside the library, as `register_adapter` takes it. */
export const CODE_ENTRY_FILE = "code.entry.json";

interface Target {
  capability: string;
  /** The file it continues from, when the library has one; a new capability starts from B = 0. */
  from?: string;
  out: string;
}

/**
 * `--step continue`: trains only the capabilities it names on top of the library as it is (no other file of the
 * library changes; no replay of the first run's trajectories): a new alias (code) from B = 0, an existing one (write,
 * the base) continued from its own file, on fresh oracle trajectories rendered with the library's own tokenizer.
 * Appends what it did (hashes before and after, time, held-out scores) to training.json.
 */
export async function continueTraining(run: TrainingRun, c: Continuation): Promise<void> {
  const started = Date.now();
  const { library, work } = run;
  const entries = readManifest(library.manifest);
  const targets = c.train.map((spec): Target => {
    const [capability, file] = spec.split("=") as [string, string | undefined];
    if (capability === BASE_CAPABILITY) return { capability, from: library.model, out: library.model };
    const entry = entries.find((e) => e.alias === capability);
    if (!entry && capability !== CODE)
      throw new Error(
        `--train ${spec}: "${capability}" is neither the base, an alias of ${library.manifest} nor ${CODE}: name one of ${[BASE_CAPABILITY, ...entries.map((e) => e.alias), CODE].join(", ")}`,
      );
    const own = entry ? join(run.out, entry.file) : join(run.out, CODE_ENTRY.file);
    const warm = c.init === undefined ? undefined : entries.find((e) => e.alias === c.init);
    if (c.init !== undefined && !warm)
      throw new Error(
        `--init ${c.init}: not an alias of ${library.manifest} (${entries.map((e) => e.alias).join(", ")})`,
      );
    const from = entry ? own : warm && join(run.out, warm.file);
    return { capability, ...(from ? { from } : {}), out: file ? join(run.out, file) : own };
  });
  // the slips that teach the code stage to look up what upstream missed would teach plan and search to miss it
  const slips = targets.some((t) => t.capability === CODE);
  const upstream = targets.filter((t) => slips && (t.capability === "plan" || t.capability === "search"));
  if (upstream.length)
    throw new Error(
      `--train: train ${CODE} in a step of its own, not with ${upstream.map((t) => t.capability).join(", ")}: its trajectories make plan and search slip on purpose`,
    );
  const hashesBefore = libraryHashes(run, entries);
  const facts = readFacts(TRAINING_ENTITIES);
  // streams of their own: the first run's data and held-out files stay as they were
  writeComputationEvalTasks(run, facts, new SeededRandom(run.seed + 3));
  const rng = new SeededRandom(run.seed + 2);
  const tasks = [...trainingTasks(facts, rng, run.tasks), ...computationTasks(facts, rng, c.computation, { slips })];
  const withCode = c.computation > 0;
  // the sessions that record list code only when its stage is recorded: the base and the writer's own trajectories
  // then show the prompt they were first trained with
  const demo = ensureDemoWeights(run.logger);
  const recording = workManifest(run, "recording", withCode, (alias) => demo.adapters[alias]!);
  const traceDir = c.traces ?? join(work, "continue-traces");
  if (!c.traces)
    await recordTrajectories(run, tasks, facts, new SeededRandom(run.seed + 4), traceDir, {
      manifest: recording,
      style: { cite: c.cite },
    });
  const rendering = workManifest(run, "rendering", withCode, (alias) =>
    join(run.out, entries.find((e) => e.alias === alias)?.file ?? entries[0]!.file),
  );
  const { samples } = await renderTraces(
    run,
    traceDir,
    {
      path: library.model,
      endOfTurn: endOfTurnToken(library.model),
      manifest: rendering,
      windows: pretrainingWindows(facts, rng),
    },
    targets.map((t) => t.capability),
  );
  // as many windows replayed as the stage has samples: enough to keep reading and copying, few enough that a
  // continuation takes minutes
  const stageSamples = Math.max(...targets.map((t) => samples[t.capability]?.length ?? 0));
  writeWindows(run, samples, { recall: stageSamples, copy: stageSamples, perAdapter: stageSamples });
  const { fit, score } = trainerCommands(run);
  const report: Record<string, unknown> = {};
  for (const t of targets) {
    // the base moves at a third of its first rate: the resident adapters were trained on it as it was
    const lr = (TRAINING[t.capability]?.lr ?? TRAINING.write!.lr) / (t.capability === BASE_CAPABILITY ? 3 : 1);
    const hp = { lr, epochs: t.capability === BASE_CAPABILITY ? 1 : c.epochs };
    const next = join(work, `${t.capability}-continued.gguf`);
    const model =
      t.capability === BASE_CAPABILITY
        ? ["--model", t.from!]
        : ["--model", library.model, "--lora", t.from ?? initialAdapter(run, t.capability)];
    const training = fit([...model, "--data", windowsFile(run, t.capability), "--out", next], hp);
    renameSync(next, t.out);
    const scored = t.capability === BASE_CAPABILITY ? ["--model", t.out] : ["--model", library.model, "--lora", t.out];
    report[t.capability] = {
      from: t.from ? relativeToOut(run, t.from) : "B = 0",
      file: relativeToOut(run, t.out),
      hyperparameters: hp,
      training,
      heldOut: score(scored, t.capability),
      copyHeldOut: score(scored, "copy"),
      bytes: statSync(t.out).size,
    };
  }
  const record = JSON.parse(readFileSync(library.training, "utf8")) as { continuations?: unknown[] };
  const step = {
    command: run.command,
    seconds: Math.round((Date.now() - started) / 1000),
    trajectories: { facts: run.tasks, computation: c.computation, cite: c.cite },
    sha256Before: hashesBefore,
    sha256After: libraryHashes(run, readManifest(library.manifest)),
    models: report,
  };
  record.continuations = [...(record.continuations ?? []), step];
  writeFileSync(library.training, `${JSON.stringify(record, null, 2)}\n`);
  if (targets.some((t) => t.capability === CODE))
    writeFileSync(join(run.out, CODE_ENTRY_FILE), `${JSON.stringify(CODE_ENTRY, null, 2)}\n`);
  process.stdout.write(`${JSON.stringify(step)}\n`);
}

interface Entry {
  alias: string;
  file: string;
}

export const readManifest = (path: string) =>
  (JSON.parse(readFileSync(path, "utf8")) as { adapters: Entry[] }).adapters;

const relativeToOut = (run: TrainingRun, path: string) =>
  path.startsWith(run.out) ? path.slice(run.out.length + 1) : path;

/** The SHA-256 of the library's base (`model`: the demo library's own, unless named) and of every file its manifest lists. */
export function libraryHashes(
  run: TrainingRun,
  entries: readonly Entry[],
  model = run.library.model,
): Record<string, string> {
  const hash = (f: string) => createHash("sha256").update(readFileSync(f)).digest("hex");
  return Object.fromEntries([
    [basename(model), hash(model)],
    ...entries.map((e) => [e.file, hash(join(run.out, e.file))]),
  ]);
}

/**
 * A library in a folder of the work folder: the default library's entries (the texts the first run's sessions
 * showed), with the code entry when `withCode`, on copies of the files `fileOf` names (the random demo adapters to
 * record on, the library's own to render with: only their shapes matter, the oracle writes every turn).
 */
export function workManifest(
  run: TrainingRun,
  name: string,
  withCode: boolean,
  fileOf: (alias: string) => string,
): string {
  const dir = join(run.work, name);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const adapters = [...readManifest(DEFAULT_MANIFEST), ...(withCode ? [CODE_ENTRY] : [])].map((e) => {
    copyFileSync(fileOf(e.alias), join(dir, `${e.alias}.gguf`));
    return { ...e, file: `${e.alias}.gguf` };
  });
  const path = join(dir, "manifest.json");
  writeFileSync(path, `${JSON.stringify({ adapters }, null, 2)}\n`);
  return path;
}

/** The chat template's end-of-turn token in the library's own vocabulary. */
const endOfTurnToken = (model: string) =>
  vocabularyId(model, "<|im_end|>", "--step continue trains a library train-demo made");

/**
 * Appends a continue step to the library's training.json; a step run again (`--step continue`) replaces its earlier
 * record, since the files it describes were written again.
 */
export function recordContinueStep(run: TrainingRun, step: Record<string, unknown>): void {
  const previous = JSON.parse(readFileSync(run.library.training, "utf8")) as { continuations?: unknown[] };
  const continuations = (previous.continuations ?? []).filter(
    (c) => (c as { command?: string }).command?.includes("--step continue") !== true,
  );
  writeFileSync(
    run.library.training,
    `${JSON.stringify({ ...previous, continuations: [...continuations, step] }, null, 2)}\n`,
  );
}
