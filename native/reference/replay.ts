import type { LlamaContextSequence, Token } from "../llama/nodeLlamaCpp.js";
import type { LogProbs } from "../../src/engine/index.js";
import type { CacheReplay } from "../cache/DecodeLog.js";
import { toLogProbs } from "../session/logProbs.js";

/**
 * The reference side of a cache check, on a fresh sequence whose context already has the weights: evaluates
 * `tokens` in the batch split of `replay` (a session's `cacheReplay()`: its decodes, erasing from each one's
 * start first) if given, else all but the last token in one decode; then the rest; then the last token, whose
 * next-token log-probs it returns.
 */
export async function replayedNextTokenLogProbs(sequence: LlamaContextSequence, tokens: readonly Token[], replay?: CacheReplay): Promise<LogProbs> {
  const erase = async (from: number) => {
    if (sequence.nextTokenIndex > from) await sequence.eraseContextTokenRanges([{ start: from, end: sequence.nextTokenIndex }]);
  };
  for (const d of replay?.decodes ?? []) {
    if (d.start > sequence.nextTokenIndex) throw new Error(`the replay has a gap before position ${d.start}`);
    await erase(d.start);
    await sequence.evaluateWithoutGeneratingNewTokens([...d.tokens]);
  }
  await erase(replay?.length ?? 0);
  if (sequence.contextTokens.some((t, i) => t !== tokens[i])) throw new Error("the replayed cache is not a prefix of the reference tokens");
  const rest = tokens.slice(sequence.nextTokenIndex, -1);
  if (rest.length) await sequence.evaluateWithoutGeneratingNewTokens(rest);
  const [result] = await sequence.controlledEvaluate([[tokens.at(-1)!, { generateNext: { probabilities: true } }]]);
  return toLogProbs(result?.next?.probabilities);
}
