import type { LlamaContextSequence, LlamaModel, Token } from "node-llama-cpp";
import type { LogProbs, TokenLogprob } from "../../engine/index.js";
import type { CutFloor } from "./deciding/SessionRules.js";
import { cutSequence } from "./kv/slidingWindow.js";

/** Probabilities as node-llama-cpp returns them -> natural log-probs. */
export function toLogProbs(probabilities: Map<Token, number> | undefined): Map<Token, number> {
  const out = new Map<Token, number>();
  for (const [token, p] of probabilities ?? []) out.set(token, Math.log(p));
  return out;
}

/**
 * The full next-token distribution after `tokens`, whose all-but-last are cached: evaluates the last one,
 * then erases it again so the cache stays the prompt's. Caller holds the sequence lock, its decode weights set.
 */
export async function nextTokenAfter(sequence: LlamaContextSequence, tokens: readonly Token[]): Promise<LogProbs> {
  const [result] = await sequence.controlledEvaluate([[tokens.at(-1)!, { generateNext: { probabilities: true } }]]);
  await cutSequence(sequence, tokens.length - 1);
  return toLogProbs(result?.next?.probabilities);
}

/**
 * Log-probs of the generated tokens, recomputed by teacher forcing under the same weights. Tokens are
 * fed one per decode, as generation fed them: llama.cpp's numerics depend on the batch split, and this
 * keeps the figures identical to the distributions the tokens were sampled from. A cut back past a sliding window
 * empties the cache: `refill` brings it to the prompt again, each part under its own weights.
 */
export async function teacherForcedLogprobs(
  model: LlamaModel,
  sequence: LlamaContextSequence,
  prompt: readonly Token[],
  generated: readonly Token[],
  k: number,
  cut: { floor?: CutFloor; refill: () => Promise<unknown> },
): Promise<TokenLogprob[]> {
  const start = prompt.length - 1;
  if ((await cutSequence(sequence, start, cut.floor)) < start) await cut.refill();
  const out: TokenLogprob[] = [];
  let input = prompt[start]!;
  for (const token of generated) {
    const [result] = await sequence.controlledEvaluate([[input, { generateNext: { probabilities: true } }]]);
    const dist = toLogProbs(result?.next?.probabilities);
    const top = [...dist.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, k)
      .map(([t, logprob]) => ({ token: t, text: model.detokenize([t], true), logprob }));
    out.push({ token, text: model.detokenize([token], true), logprob: dist.get(token) ?? -Infinity, top });
    input = token;
  }
  if (generated.length) await sequence.evaluateWithoutGeneratingNewTokens([input]);
  return out;
}
