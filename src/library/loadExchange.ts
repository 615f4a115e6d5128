import { commonPrefixLength, invocationStart, type Conversation, type Engine, type TokenId } from "../engine/index.js";
import { GgufFormatError, invocationTokens, readGgufHeaderAsync, type GgufFile } from "../gguf/index.js";
import { AdapterInvocationError } from "./errors.js";
import type { LibraryEntry } from "./manifest.js";
import { exchangeMessage, LOAD_LORA, weightFunctions, withReason } from "./weightActions.js";

/** What renders a conversation as the served model reads it: the engine, or the pipeline's chat codec. */
export type ExchangeRenderer = Pick<Engine, "renderTokens" | "detokenize">;

type ExchangeEntry = Pick<LibraryEntry, "alias" | "description" | "activation">;

/**
 * An entry's load exchange as a session renders it: a request, then the model's load_lora call with the entry's
 * activation text (with a switch's `reason`, as a session appends it) as its result (`before` stops at the model's turn, where the exchange begins).
 */
function loadExchange(entry: ExchangeEntry, reason?: string): { before: Conversation; exchange: Conversation } {
  const functions = weightFunctions([entry]);
  const request = { role: "user" as const, text: "Answer the question." };
  const result = withReason(exchangeMessage(entry, LOAD_LORA, entry.alias), reason);
  const call = { name: LOAD_LORA, arguments: { adapter: entry.alias }, result };
  return {
    before: { functions, turns: [request] },
    exchange: { functions, turns: [request, { role: "assistant", text: "", calls: [call] }] },
  };
}

/**
 * Whether an activated LoRA's invocation is in its rendered load exchange (after where the exchange begins). Checked on
 * tokens as rendered in context, not on text: a subword merge at the activation text's edges changes them.
 */
function inExchange(
  renderer: ExchangeRenderer,
  entry: ExchangeEntry,
  invocation: readonly TokenId[],
  reason?: string,
): boolean {
  const { before, exchange } = loadExchange(entry, reason);
  const tokens = renderer.renderTokens(exchange);
  const start = invocationStart(tokens, invocation);
  return start !== undefined && start >= commonPrefixLength(renderer.renderTokens(before), tokens);
}

/**
 * Refuses an activated LoRA whose invocation sequence its load exchange does not hold, with a switch's reason appended
 * or without (a merge at the activation text's end could differ; see AdapterInvocationError).
 */
export function checkInvocation(
  renderer: ExchangeRenderer,
  entry: ExchangeEntry,
  invocation: readonly TokenId[],
): void {
  if ([undefined, "reason"].some((reason) => !inExchange(renderer, entry, invocation, reason)))
    throw new AdapterInvocationError(
      entry.alias,
      renderer.detokenize(invocation),
      exchangeMessage(entry, LOAD_LORA, entry.alias),
    );
}

/**
 * An adapter file's invocation sequence (an activated LoRA's `adapter.alora.invocation_tokens`), read before any
 * engine loads it and checked as llama.cpp reads it against the served vocabulary's size; undefined for an
 * ordinary LoRA, or a file or key that does not read (the engine's own checks refuse those, with their own errors):
 * an id outside the vocabulary must never reach the tokenizer.
 */
export async function invocationOf(filePath: string, vocabularySize: number): Promise<number[] | undefined> {
  let header: GgufFile;
  try {
    header = await readGgufHeaderAsync(filePath);
  } catch (err) {
    if (err instanceof GgufFormatError) return undefined;
    throw err;
  }
  return invocationTokens(header, vocabularySize).tokens;
}
