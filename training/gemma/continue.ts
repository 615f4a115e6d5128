import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ensureDemoWeights } from "../../src/demo/ensure.js";
import { SeededRandom } from "../../src/demo/random.js";
import { readGgufHeader } from "../../src/gguf/index.js";
import {
  CODE_ENTRY,
  CODE_ENTRY_FILE,
  libraryHashes,
  readManifest,
  recordContinueStep,
  workManifest,
} from "../pipeline/continueTraining.js";
import { readFacts } from "../pipeline/facts.js";
import { CODE } from "../pipeline/OracleDriver.js";
import { TRAINING_ENTITIES } from "../pipeline/paths.js";
import type { TrainingRun } from "../pipeline/run.js";
import { computationTasks, trainingTasks, writeComputationEvalTasks } from "../pipeline/tasks.js";
import { recordTrajectories, renderTraces } from "../pipeline/trajectories.js";
import { gemmaRendering, writeStageSamples } from "./data.js";
import { trainerRecord } from "./paths.js";
import { importAdapter, RECIPE, trainAdapters } from "./train.js";

/** What the continue step adds beside the library: the new capability, and the refreshed writer to swap in. */
const OUTPUTS = { [CODE]: `${CODE}.gguf`, write: "write-plus.gguf" } as const;

/**
 * `npm run train:gemma -- --step continue`: the paper's continual adaptation on the real model. One recording of the
 * oracle (`run.tasks` fact questions and `computation` difference questions, its writer quoting its evidence, its
 * plan and search slipping on a quarter of the computation questions each, as the demo's code step has them) gives
 * both new adapters their stages: `code` (a new capability, a fresh LoRA) and `write++` (the writer that cites its
 * evidence and hands its answer off in the exit call, a fresh LoRA trained on the write stages only). Both are
 * written beside the library (code.gguf with its register_adapter entry, write-plus.gguf for refresh_adapter); the
 * manifest, the base and plan/search/write are not touched. Appends the step to training.json with the SHA-256 of
 * the library before and after.
 */
export async function continueGemma(run: TrainingRun, model: string, computation: number): Promise<void> {
  const started = Date.now();
  const entries = readManifest(run.library.manifest);
  const hashesBefore = libraryHashes(run, entries, model);
  const facts = readFacts(TRAINING_ENTITIES);
  // the trained demo's streams: the same computation task files, the same questions
  writeComputationEvalTasks(run, facts, new SeededRandom(run.seed + 3));
  const rng = new SeededRandom(run.seed + 2);
  const tasks = [
    ...trainingTasks(facts, rng, run.tasks),
    ...computationTasks(facts, rng, computation, { slips: true }),
  ];
  const traceDir = join(run.work, "traces");
  const demo = ensureDemoWeights(run.logger);
  const recording = workManifest(run, "recording", true, (alias) => demo.adapters[alias]!);
  await recordTrajectories(run, tasks, facts, new SeededRandom(run.seed + 4), traceDir, {
    manifest: recording,
    style: { cite: true },
  });
  // the library's own adapters carry Gemma's shapes; code renders on a copy of plan's (the oracle wrote every turn)
  const rendering = workManifest(run, "rendering", true, (alias) =>
    join(run.out, entries.find((e) => e.alias === alias)?.file ?? entries[0]!.file),
  );
  const capabilities = Object.keys(OUTPUTS);
  const { samples } = await renderTraces(run, traceDir, gemmaRendering(model, rendering), capabilities);
  writeStageSamples(run, samples, capabilities);
  await trainAdapters(run, model, capabilities);
  const trained = JSON.parse(readFileSync(trainerRecord(run), "utf8")) as {
    seconds: number;
    results: { capability: string }[];
  };
  const base = readGgufHeader(model);
  const adapters: Record<string, unknown> = {};
  for (const [capability, file] of Object.entries(OUTPUTS))
    adapters[capability] = {
      file,
      ...trained.results.find((r) => r.capability === capability),
      imported: await importAdapter(run, base, capability, file),
    };
  writeFileSync(join(run.out, CODE_ENTRY_FILE), `${JSON.stringify(CODE_ENTRY, null, 2)}\n`);
  const step = {
    command: run.command,
    seconds: Math.round((Date.now() - started) / 1000),
    trainingSeconds: trained.seconds,
    trajectories: { facts: run.tasks, computation, cite: true },
    recipe: RECIPE,
    sha256Before: hashesBefore,
    sha256After: libraryHashes(run, readManifest(run.library.manifest), model),
    adapters,
  };
  recordContinueStep(run, step);
  process.stdout.write(`${JSON.stringify(step)}\n`);
}
