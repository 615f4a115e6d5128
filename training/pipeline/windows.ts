import type { SeededRandom } from "../../src/demo/random.js";
import type { TokenId } from "../../src/engine/index.js";
import { BASE_CAPABILITY } from "../../src/library/manifest.js";
import type { Fact } from "./facts.js";
import { CODE, ORACLE_WORKFLOW } from "./OracleDriver.js";
import { copySamples, recallSamples } from "./recall.js";
import { heldOutFile, windowsFile, type TrainingRun } from "./run.js";
import { writeSamples, type TokenSample } from "./samples.js";

/**
 * The pretraining's recall and copy windows; how many of each the base's own training replays so it keeps the
 * skills; and how many copy windows each adapter's training mixes in, so no adapter unlearns reading its context.
 */
const RECALL_WINDOWS = 6000;
const RECALL_REPLAYED = 1500;
const COPY_WINDOWS = 4000;
const COPY_REPLAYED = 1000;
const COPY_PER_ADAPTER = 500;

/** The pretraining's windows over `facts`, made with the tokenizer of the model they train (renderTraces passes it). */
export function pretrainingWindows(facts: readonly Fact[], rng: SeededRandom) {
  return (tokenize: (text: string) => TokenId[]) => ({
    recall: recallSamples(facts, tokenize, rng, RECALL_WINDOWS),
    copy: copySamples(facts, tokenize, rng, COPY_WINDOWS),
  });
}

/** Every 20th window is held out: the trainer's own loss and accuracy on windows it never trained on. */
export const split = (list: readonly TokenSample[]) => ({
  training: list.filter((_, i) => i % 20 !== 19),
  held: list.filter((_, i) => i % 20 === 19),
});

/** How many pretraining windows the base's training replays, and how many copy windows each adapter's mixes in. */
export interface WindowMix {
  recall: number;
  copy: number;
  perAdapter: number;
}

/** The first run's mix: the base learns its turns from the pretrained model, the adapters from B = 0. */
const FIRST_RUN_MIX: WindowMix = { recall: RECALL_REPLAYED, copy: COPY_REPLAYED, perAdapter: COPY_PER_ADAPTER };

/**
 * Each capability's training windows (with the windows mixed in from the pretraining, as `mix` says) and held-out
 * windows, as weact-train's samples files in the work folder; prints one JSON line of sizes per capability.
 */
export function writeWindows(
  run: TrainingRun,
  samples: Record<string, TokenSample[]>,
  mix: WindowMix = FIRST_RUN_MIX,
): void {
  // the pretraining reads and copies; the base's training replays some of both, each adapter's some copying
  const copy = split(samples.copy!).training;
  const mixedIn = (capability: string): TokenSample[] => {
    if (capability === "recall") return copy;
    if (capability === BASE_CAPABILITY)
      return [...split(samples.recall!).training.slice(0, mix.recall), ...copy.slice(0, mix.copy)];
    return [...ORACLE_WORKFLOW, CODE].includes(capability) ? copy.slice(0, mix.perAdapter) : [];
  };
  for (const [capability, list] of Object.entries(samples)) {
    const { training, held } = split(list);
    writeSamples(windowsFile(run, capability), [...training, ...mixedIn(capability)]);
    writeSamples(heldOutFile(run, capability), held);
    const lengths = list.map((s) => s.tokens.length);
    process.stdout.write(
      `${JSON.stringify({ capability, samples: list.length, meanTokens: Math.round(lengths.reduce((a, b) => a + b, 0) / Math.max(1, lengths.length)), maxTokens: Math.max(0, ...lengths), targets: list.reduce((n, s) => n + s.mask.reduce((a, b) => a + b, 0), 0) })}\n`,
    );
  }
}
