import { TokenBias, type LlamaContextSequence, type LlamaModel, type Token } from "node-llama-cpp";
import type { CallSteering } from "./steering.js";

/** Large enough to force a token, small enough to keep the sampler's arithmetic finite. */
const FORCE_LOGIT = 50;

/** A turn steered into a call, as it is being generated. */
export interface ToolCallSteering extends CallSteering {
  sequence: LlamaContextSequence;
  promptLength: number;
  /** The arguments of the call under way as written so far (undefined before they start). */
  arguments: () => string | undefined;
}

function biasOf(model: LlamaModel, logits: ReadonlyMap<Token, number>): TokenBias {
  const out = new TokenBias(model.tokenizer);
  for (const [token, logit] of logits) out.set(token, { logit });
  return out;
}

/**
 * The token bias for one generation. Steering is resolved per sampled token: node-llama-cpp asks for the
 * bias of generated token i while token i-1 is still being decoded, so the sequence then holds
 * promptLength + i - 1 tokens (the first request comes before the prompt's last token is decoded). The forced
 * tokens come first; once the response holds `closeAfter` tokens, the character that closes the innermost open JSON
 * value of the call's arguments (a string's quote, then `}` or `]`) is forced: the function-calling grammar lets it
 * through where the arguments may end, so the call completes within the turn's tokens instead of being cut off
 * (where the grammar masks it, e.g. a required field still missing, the model writes what the grammar allows).
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
  const force = (token: Token) => biasOf(model, new Map([...logits, [token, FORCE_LOGIT]]));
  return () => {
    const context = sequence.contextTokens;
    const index = Math.max(0, context.length - promptLength + 1);
    if (index < tokens.length) {
      // a forced token the grammar masked leaves the response off the steered path: nothing more is forced
      const steered = context.slice(promptLength).every((t, k) => t === tokens[k]);
      return steered ? force(tokens[index]!) : unbiased;
    }
    const args = steering.arguments();
    if (index < closeAfter || args === undefined) return unbiased;
    const closer = innermostCloser(args);
    return closer ? force(closers[closer]) : unbiased;
  };
}

/** The character that closes the innermost JSON value open at the end of `text` (a call's arguments so far). */
function innermostCloser(text: string): '"' | "}" | "]" | undefined {
  const open: ("}" | "]")[] = [];
  let inString = false;
  let escaped = false;
  for (const ch of text) {
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
