import { join } from "node:path";
import { SeededRandom } from "../../src/demo/random.js";
import { writeCorpora } from "./corpora.js";
import { readFacts } from "./facts.js";
import { TRAINING_ENTITIES } from "./paths.js";
import type { TrainingRun } from "./run.js";
import { trainingTasks, writeEvalTasks } from "./tasks.js";
import { recordTrajectories, renderTraces } from "./trajectories.js";
import { writeInitialModel } from "./vocabulary.js";
import { pretrainingWindows, writeWindows } from "./windows.js";

/**
 * The data step: the corpora and the held-out task files of the library, the oracle's trajectories over the
 * training tasks, the vocabulary learned from them and the untrained model on it, and every capability's windows
 * in that model's tokens. `record: false` (--step samples) renders the traces an earlier run recorded instead.
 */
export async function writeTrainingData(run: TrainingRun, { record }: { record: boolean }): Promise<void> {
  // one generator through the task files, the training tasks and the pretraining windows, in that order
  const rng = new SeededRandom(run.seed);
  const facts = readFacts(TRAINING_ENTITIES);
  writeCorpora(run, facts);
  writeEvalTasks(run, facts, rng);
  const tasks = trainingTasks(facts, rng, run.tasks);
  const traceDir = join(run.work, "traces");
  // the edits draw from a generator of their own, so --step samples renders the same windows as a full run
  if (record) await recordTrajectories(run, tasks, facts, new SeededRandom(run.seed + 1), traceDir);
  const { texts } = await renderTraces(run, traceDir);
  const model = writeInitialModel(run, texts);
  const { samples } = await renderTraces(run, traceDir, {
    path: model.path,
    endOfTurn: model.vocab.idOf("<|im_end|>"),
    windows: pretrainingWindows(facts, rng),
  });
  writeWindows(run, samples);
}
