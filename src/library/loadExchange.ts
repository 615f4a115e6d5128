import { commonPrefixLength, invocationStart, type Conversation, type Engine, type TokenId } from "../engine/index.js";
import { ALORA_INVOCATION_KEY, GgufFormatError, readGgufHeaderAsync, type GgufFile } from "../gguf/index.js";
import { AdapterInvocationError } from "./errors.js";
import type { LibraryEntry } from "./manifest.js";
import { exchangeMessage, LOAD_LORA, weightFunctions } from "./weightActions.js";

/** What renders a conversation as the served model reads it: the engine, or the pipeline's chat codec. */
export type ExchangeRenderer = Pick<Engine, "renderTokens" | "detokenize">;

type ExchangeEntry = Pick<LibraryEntry, "alias" | "description" | "activation">;

/**
 * An entry's load exchange as a session renders it: a request, then the model's load_lora call with the entry's
 * activation text as its result (`before` stops at the model's turn, where the exchange begins).
 */
export function loadExchange(entry: ExchangeEntry): { before: Conversation; exchange: Conversation } {
  const functions = weightFunctions([entry]);
  const request = { role: "user" as const, text: "Answer the question." };
  const call = {
    name: LOAD_LORA,
    arguments: { adapter: entry.alias },
    result: exchangeMessage(entry, LOAD_LORA, entry.alias),
  };
  return {
    before: { functions, turns: [request] },
    exchange: { functions, turns: [request, { role: "assistant", text: "", calls: [call] }] },
  };
}

/**
 * Where an activated LoRA's invocation starts in its rendered load exchange (an index into `tokens`, the exchange's
 * tokens), or undefined when it is not there. Checked on tokens as rendered in context, not on text: a subword merge
 * at the activation text's edges changes them.
 */
export function invocationInExchange(
  renderer: ExchangeRenderer,
  entry: ExchangeEntry,
  invocation: readonly TokenId[],
): { start: number | undefined; tokens: TokenId[] } {
  const { before, exchange } = loadExchange(entry);
  const tokens = renderer.renderTokens(exchange);
  const opening = commonPrefixLength(renderer.renderTokens(before), tokens);
  const start = invocationStart(tokens, invocation);
  return { start: start !== undefined && start >= opening ? start : undefined, tokens };
}

/** Refuses an activated LoRA whose invocation sequence its load exchange does not hold (see AdapterInvocationError). */
export function checkInvocation(
  renderer: ExchangeRenderer,
  entry: ExchangeEntry,
  invocation: readonly TokenId[],
): void {
  if (invocationInExchange(renderer, entry, invocation).start === undefined)
    throw new AdapterInvocationError(
      entry.alias,
      renderer.detokenize(invocation),
      exchangeMessage(entry, LOAD_LORA, entry.alias),
    );
}

/**
 * An adapter file's invocation sequence (an activated LoRA's `adapter.alora.invocation_tokens`), read before any
 * engine loads it; undefined for an ordinary LoRA, or a file or key that does not read (the engine's own checks
 * refuse those, with their own errors).
 */
export async function invocationOf(filePath: string): Promise<number[] | undefined> {
  let header: GgufFile;
  try {
    header = await readGgufHeaderAsync(filePath);
  } catch (err) {
    if (err instanceof GgufFormatError) return undefined;
    throw err;
  }
  const value = header.metadata.get(ALORA_INVOCATION_KEY);
  if (!value || typeof value !== "object" || !("items" in value)) return undefined;
  const items = value.items as unknown[];
  return items.length && items.every((t) => typeof t === "number") ? (items as number[]) : undefined;
}
