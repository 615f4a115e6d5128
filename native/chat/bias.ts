import { TokenBias, type LlamaContextSequence, type LlamaModel, type Token } from "node-llama-cpp";

/** Large enough to force a token, small enough to keep the sampler's arithmetic finite. */
const FORCE_LOGIT = 50;

export interface ToolCallSteering {
  /** The tokens to force at the start of the response (the template's call prefix and optional name). */
  tokens: readonly Token[];
  sequence: LlamaContextSequence;
  promptLength: number;
}

function biasOf(model: LlamaModel, logits: ReadonlyMap<Token, number>): TokenBias {
  const out = new TokenBias(model.tokenizer);
  for (const [token, logit] of logits) out.set(token, { logit });
  return out;
}

/**
 * The token bias for one generation. Steering is resolved per sampled token: node-llama-cpp asks for the
 * bias of generated token i while token i-1 is still being decoded, so the sequence then holds
 * promptLength + i - 1 tokens (the first request comes before the prompt's last token is decoded).
 * The bias must never throw: it runs inside the native sampling callback.
 */
export function generationBias(
  model: LlamaModel,
  bias: Readonly<Record<string, number>> | undefined,
  steering: ToolCallSteering | undefined,
): TokenBias | (() => TokenBias) | undefined {
  const logits = new Map<Token, number>();
  for (const [text, logit] of Object.entries(bias ?? {})) {
    for (const token of model.tokenize(text, true)) logits.set(token, logit);
  }
  const plain = logits.size ? biasOf(model, logits) : undefined;
  if (!steering) return plain;
  const { tokens, sequence, promptLength } = steering;
  const unbiased = plain ?? new TokenBias(model.tokenizer);
  return () => {
    const context = sequence.contextTokens;
    const index = Math.max(0, context.length - promptLength + 1);
    const onTrack = index < tokens.length && context.slice(promptLength).every((t, k) => t === tokens[k]);
    if (!onTrack) return unbiased;
    return biasOf(model, new Map([...logits, [tokens[index]!, FORCE_LOGIT]]));
  };
}
