import { rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { LlamaContextSequence, Token } from "node-llama-cpp";
import type { LogProbs } from "../../../engine/index.js";
import type { CacheReplay, Decode } from "../kv/DecodeLog.js";
import { toLogProbs } from "../tokenLogProbs.js";
import { cutSequence } from "../kv/slidingWindow.js";

/** An activated LoRA's reference: a fresh sequence of a base-weights context, and where the adapter's weights begin. */
export interface BaseUntil {
  readonly base: LlamaContextSequence;
  readonly from: number;
}

let transfers = 0;

/**
 * The reference side of a cache check, on a fresh sequence whose context already has the weights: evaluates
 * `tokens` in the batch split of `replay` (a session's `cacheReplay()`: its decodes, erasing from each one's
 * start first) if given, else all but the last token in one decode; then the rest; then the last token, whose
 * next-token log-probs it returns. With `activated` the tokens before `activated.from` are evaluated in the
 * base context instead (the decodes that start there; a gap up to the point in one decode), the state is
 * carried over to `sequence` through a state file, and the rest is evaluated there under the adapter.
 */
export async function replayedNextTokenLogProbs(
  sequence: LlamaContextSequence,
  tokens: readonly Token[],
  replay?: CacheReplay,
  activated?: BaseUntil,
): Promise<LogProbs> {
  const decodes = replay?.decodes ?? [];
  let current = sequence;
  if (activated) {
    current = activated.base;
    await replayDecodes(
      current,
      tokens,
      decodes.filter((d) => d.start < activated.from),
      true,
    );
    await erase(current, activated.from);
    if (current.nextTokenIndex < activated.from)
      await current.evaluateWithoutGeneratingNewTokens(tokens.slice(current.nextTokenIndex, activated.from));
    const file = join(tmpdir(), `weact-reference-${process.pid}-${++transfers}.kv`);
    try {
      await current.saveStateToFile(file);
      await sequence.loadStateFromFile(file, { acceptRisk: true });
    } finally {
      rmSync(file, { force: true });
    }
    current = sequence;
  }
  await replayDecodes(
    current,
    tokens,
    activated ? decodes.filter((d) => d.start >= activated.from) : decodes,
    !!activated,
  );
  await erase(current, replay?.length ?? 0);
  if (current.contextTokens.some((t, i) => t !== tokens[i]))
    throw new Error("the replayed cache is not a prefix of the reference tokens");
  const rest = tokens.slice(current.nextTokenIndex, -1);
  if (rest.length) await current.evaluateWithoutGeneratingNewTokens(rest);
  const [result] = await current.controlledEvaluate([[tokens.at(-1)!, { generateNext: { probabilities: true } }]]);
  return toLogProbs(result?.next?.probabilities);
}

/**
 * The replay asked for a cut that a window-sized sliding-window cache cannot make exactly: the cache it reproduces was
 * continued after cells of its window were freed (the engine itself starts such a cache again).
 */
export class ReplayPastWindowError extends Error {
  readonly code = "replay_past_window";
  constructor(readonly position: number) {
    super(`the cache was cut back to ${position} and continued after its sliding window's cells there were freed`);
    this.name = "ReplayPastWindowError";
  }
}

async function erase(sequence: LlamaContextSequence, from: number): Promise<void> {
  if (sequence.nextTokenIndex > from && (await cutSequence(sequence, from)) < from)
    throw new ReplayPastWindowError(from);
}

/**
 * Replays decodes in order; a gap before one is an error, or (`fillGaps`, across an invocation point) evaluated in one
 * decode.
 */
async function replayDecodes(
  sequence: LlamaContextSequence,
  tokens: readonly Token[],
  decodes: readonly Decode[],
  fillGaps: boolean,
): Promise<void> {
  for (const d of decodes) {
    if (d.start > sequence.nextTokenIndex) {
      if (!fillGaps) throw new Error(`the replay has a gap before position ${d.start}`);
      await sequence.evaluateWithoutGeneratingNewTokens(tokens.slice(sequence.nextTokenIndex, d.start));
    }
    await erase(sequence, d.start);
    await sequence.evaluateWithoutGeneratingNewTokens([...d.tokens]);
  }
}
