/**
 * `npm run train:qwen-library -- --step continue`: a capability the library never had, `code`, trained over the same
 * frozen backbone on the oracle's computation trajectories (the difference of two values the corpus states, computed
 * with run_code), and written beside the library with its register_adapter entry; nothing else of the library changes.
 */
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ensureDemoWeights } from "../../src/demo/ensure.js";
import { SeededRandom } from "../../src/demo/random.js";
import { readGgufHeader } from "../../src/gguf/index.js";
import { importAdapter, runTrainer, type TrainerRecipe } from "../gemma/train.js";
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
import { computationTasks, writeComputationEvalTasks } from "../pipeline/tasks.js";
import { recordTrajectories } from "../pipeline/trajectories.js";
import { writeQwenStageSamples } from "./libraryData.js";
import { libraryCheckpoints } from "./trainLibrary.js";

/**
 * The continue step: the held-out computation task files (eval-computation.jsonl, and its counterfactual twin), the
 * oracle's hard runs through plan, search, code and write over `computation` difference questions (its plan and search
 * slipping on a quarter each, so that code learns to look up what upstream missed), code's stage samples rendered for
 * the backbone as the server renders them (checked against its Jinja template), code trained with `recipe`
 * (resumable), imported as code.gguf with code.entry.json; training.json gets the step, with the library's SHA-256
 * before and after. `record: false` trains on the samples an earlier call wrote, from its last checkpoint. True when
 * training finished.
 */
export async function continueQwen(
  run: TrainingRun,
  model: string,
  computation: number,
  { record, recipe, minutes }: { record: boolean; recipe: TrainerRecipe; minutes: number },
): Promise<boolean> {
  const started = Date.now();
  const work: TrainingRun = { ...run, work: join(run.work, "continue") };
  const entries = readManifest(run.library.manifest);
  const hashesBefore = libraryHashes(run, entries, model);
  const facts = readFacts(TRAINING_ENTITIES);
  writeComputationEvalTasks(run, facts, new SeededRandom(run.seed + 3));
  // its counterfactual twin edits the trained demo's corpus, which this library's counterfactual corpus is not
  rmSync(run.library.computationCounterfactualTasks, { force: true });
  const traceDir = join(work.work, "traces");
  const recorded = join(work.work, "recorded.json");
  if (record) {
    // new samples: an earlier call's checkpoints and PEFT folder belong to the old ones
    rmSync(libraryCheckpoints(work), { recursive: true, force: true });
    rmSync(join(work.work, "peft"), { recursive: true, force: true });
    const tasks = computationTasks(facts, new SeededRandom(run.seed + 2), computation, { slips: true });
    const demo = ensureDemoWeights(run.logger);
    const recording = workManifest(work, "recording", true, (alias) => demo.adapters[alias]!);
    await recordTrajectories(work, tasks, facts, new SeededRandom(run.seed + 4), traceDir, { manifest: recording });
    // the library's own adapters carry the backbone's shapes; code renders on a copy of plan's (the oracle wrote it)
    const rendering = workManifest(work, "rendering", true, (alias) =>
      join(run.out, entries.find((e) => e.alias === alias)?.file ?? entries[0]!.file),
    );
    await writeQwenStageSamples(work, model, traceDir, rendering, [CODE]);
    writeFileSync(recorded, `${JSON.stringify({ computation })}\n`);
  }
  const [result] = await runTrainer(work, model, [CODE], recipe, [
    ...["--log-every", "1", "--checkpoints", libraryCheckpoints(work), "--checkpoint-every", "2"],
    ...["--max-minutes", String(minutes)],
  ]);
  if (!result) {
    process.stderr.write("train_lora.py stopped at a checkpoint: run the continue step again to go on\n");
    return false;
  }
  const trajectories = JSON.parse(readFileSync(recorded, "utf8")) as { computation: number };
  const file = `${CODE}.gguf`;
  const imported = await importAdapter(work, readGgufHeader(model), CODE, file, "qwen");
  writeFileSync(join(run.out, CODE_ENTRY_FILE), `${JSON.stringify(CODE_ENTRY, null, 2)}\n`);
  const step = {
    command: `${run.command} --step continue --computation ${trajectories.computation}`,
    lastCallSeconds: Math.round((Date.now() - started) / 1000),
    trajectories,
    recipe,
    sha256Before: hashesBefore,
    sha256After: libraryHashes(run, readManifest(run.library.manifest), model),
    adapters: { [CODE]: { file, ...result, imported } },
  };
  recordContinueStep(run, step);
  process.stdout.write(`${JSON.stringify(step)}\n`);
  return true;
}
