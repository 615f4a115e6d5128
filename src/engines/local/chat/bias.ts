import { TokenBias, type LlamaContextSequence, type LlamaModel, type Token } from "../llama/nodeLlamaCpp.js";

/** Large enough to force a token, small enough to keep the sampler's arithmetic finite. */
const FORCE_LOGIT = 50;

export interface ToolCallSteering {
  /** The tokens to force at the start of the response (the template's call prefix and optional name). */
  tokens: readonly Token[];
  sequence: LlamaContextSequence;
  promptLength: number;
  /**
   * Once the response holds this many tokens, the character that closes the innermost open JSON value (a
   * string's quote, then `}` or `]`) is forced: the function-calling grammar lets it through where the
   * arguments may end, so the steered call completes within the turn's token limit instead of being cut
   * off mid-string (the grammar masks it where the arguments may not end yet, e.g. a required field).
   */
  closeAfter: number;
  /** The token of each closing character. */
  closers: Readonly<Record<'"' | "}" | "]", Token>>;
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
  const { tokens, sequence, promptLength, closeAfter, closers } = steering;
  const unbiased = plain ?? new TokenBias(model.tokenizer);
  return () => {
    const context = sequence.contextTokens;
    const index = Math.max(0, context.length - promptLength + 1);
    const response = context.slice(promptLength);
    const steered = response.slice(0, tokens.length).every((t, k) => t === tokens[k]);
    if (!steered) return unbiased;
    if (index < tokens.length) return biasOf(model, new Map([...logits, [tokens[index]!, FORCE_LOGIT]]));
    if (index < closeAfter) return unbiased;
    const closer = innermostCloser(model.detokenize(response, true));
    return closer ? biasOf(model, new Map([...logits, [closers[closer], FORCE_LOGIT]])) : unbiased;
  };
}

/** The character that closes the innermost JSON value open at the end of `text` (scanned from its first `{`). */
export function innermostCloser(text: string): '"' | "}" | "]" | undefined {
  const open: ("}" | "]")[] = [];
  let inString = false;
  let escaped = false;
  for (const ch of text.slice(Math.max(0, text.indexOf("{")))) {
    if (inString) {
      if (escaped) escaped = false;
      else if (ch === "\\") escaped = true;
      else if (ch === '"') inString = false;
    } else if (ch === '"') inString = true;
    else if (ch === "{") open.push("}");
    else if (ch === "[") open.push("]");
    else if (ch === "}" || ch === "]") open.pop();
  }
  return inString ? (escaped ? undefined : '"') : open.at(-1);
}
