import { writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { SeededRandom } from "../../src/demo/random.js";
import { TRAINED_DIR, trainedLibrary } from "../../src/paths.js";
import { readFacts } from "../pipeline/facts.js";
import { ORACLE_WORKFLOW } from "../pipeline/OracleDriver.js";
import { TRAINING_ENTITIES } from "../pipeline/paths.js";
import { heldOutFile, windowsFile, type TrainingRun } from "../pipeline/run.js";
import { writeSamples, type TokenSample } from "../pipeline/samples.js";
import { trainingTasks, writeEvalTasks } from "../pipeline/tasks.js";
import { recordTrajectories, renderTraces } from "../pipeline/trajectories.js";
import { vocabularyId } from "../pipeline/vocabulary.js";
import { split } from "../pipeline/windows.js";
import { gemmaTestAdapters } from "../../testkit/realModelAdapters.js";
import { GEMMA_HARNESS, GEMMA_MODEL } from "./library.js";

/** Gemma's end-of-turn token: the last token of every turn the model writes (its GGUF names no EOT id). */
const endOfTurnToken = (model: string) => vocabularyId(model, "<end_of_turn>", "not a Gemma chat model");

/**
 * The data step of the Gemma library: the held-out task files (the trained demo's: the same facts, seed and
 * split), the counterfactual eval's config (the trained demo's counterfactual corpus), the oracle's trajectories
 * over the training tasks (recorded as for the demo, half of them over redrawn corpora), and each adapter's stage
 * samples rendered as the server renders them for Gemma 3 (its chat wrapper and function-call syntax, its
 * tokenizer): WTS1 files in the work folder, every 20th held out.
 */
export async function writeGemmaData(run: TrainingRun, model: string, { record }: { record: boolean }): Promise<void> {
  const rng = new SeededRandom(run.seed);
  const facts = readFacts(TRAINING_ENTITIES);
  writeEvalTasks(run, facts, rng);
  const tasks = trainingTasks(facts, rng, run.tasks);
  writeConfigs(run);
  const traceDir = join(run.work, "traces");
  if (record) await recordTrajectories(run, tasks, facts, new SeededRandom(run.seed + 1), traceDir);
  const rendering = gemmaRendering(model, gemmaTestAdapters(model).manifest);
  const { samples } = await renderTraces(run, traceDir, rendering, ORACLE_WORKFLOW);
  writeStageSamples(run, samples, ORACLE_WORKFLOW);
}

/**
 * How the server renders a Gemma 3 session, for renderTraces: Gemma's tokenizer and chat wrapper, the functions of
 * `manifest` (a Gemma-shaped library with the aliases and texts the traces were recorded with).
 */
export const gemmaRendering = (model: string, manifest: string) => ({
  path: model,
  endOfTurn: endOfTurnToken(model),
  // node-llama-cpp's Gemma wrapper writes each result inside the model's turn: a call's target ends at its ")"
  resultOpening: "\n||result:",
  manifest,
});

/** Each capability's samples as train_lora.py reads them (WTS1, every 20th held out), and a line of their sizes. */
export function writeStageSamples(
  run: TrainingRun,
  samples: Record<string, TokenSample[]>,
  capabilities: readonly string[],
): void {
  for (const capability of capabilities) {
    const list = samples[capability] ?? [];
    const { training, held } = split(list);
    writeSamples(windowsFile(run, capability), training);
    writeSamples(heldOutFile(run, capability), held);
    const lengths = list.map((s) => s.tokens.length);
    process.stdout.write(
      `${JSON.stringify({
        capability,
        samples: list.length,
        meanTokens: Math.round(lengths.reduce((a, b) => a + b, 0) / Math.max(1, lengths.length)),
        maxTokens: Math.max(0, ...lengths),
        targets: list.reduce((n, s) => n + s.mask.reduce((a, b) => a + b, 0), 0),
      })}\n`,
    );
  }
}

/**
 * The library's config (`--library gemma3`: the fetched model by name, the manifest, the harness limits), and the
 * counterfactual eval's (`weact-mcp eval models/gemma3/eval-counterfactual.jsonl --config
 * models/gemma3/counterfactual.json`): the same on the trained demo's counterfactual corpus (its facts, every value
 * edited).
 */
function writeConfigs(run: TrainingRun): void {
  const config = {
    model: { path: GEMMA_MODEL },
    adapters: { manifest: relative(run.out, run.library.manifest) },
    harness: GEMMA_HARNESS,
  };
  writeFileSync(join(run.out, "config.json"), `${JSON.stringify(config, null, 2)}\n`);
  const counterfactual = {
    ...config,
    tools: {
      search: {
        corpus: relative(run.out, trainedLibrary(TRAINED_DIR).counterfactualCorpus),
        indexFile: relative(run.out, join(run.work, "search-index-counterfactual.json")),
      },
    },
  };
  writeFileSync(run.library.counterfactualConfig, `${JSON.stringify(counterfactual, null, 2)}\n`);
}
