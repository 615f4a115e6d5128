import { writeFileSync } from "node:fs";
import type { Conversation, FunctionSpec, TokenId } from "../../src/engine/index.js";
import { commonPrefixLength } from "../../src/engine/index.js";
import type { StageSample } from "../../src/export/segment.js";
import { toConversation, type HistoryMessage } from "../../src/sessions/history.js";

/** A training window of weact-train: the tokens, and which of them are targets (predicted from those before). */
export interface TokenSample {
  tokens: TokenId[];
  mask: Uint8Array;
}

export interface Renderer {
  /** The engine's rendering of a conversation, ending with the assistant turn's opening (Engine.renderTokens). */
  renderTokens(conversation: Conversation): TokenId[];
  /** The chat template's end-of-turn token: the last token the model writes in a turn. */
  endOfTurn: TokenId;
  /**
   * For templates that put function results inside the model's turn (node-llama-cpp's Gemma wrapper: `||call: f(...)`
   * then `\n||result: ...`), the tokens opening a result: the model's part of a turn with calls ends right before.
   */
  resultOpening?: readonly TokenId[];
}

/** Where the model's own part of the turn starting at `from` ends: its end-of-turn token, or a result's opening. */
function turnEnd(tokens: readonly TokenId[], from: number, render: Renderer): number {
  const close = tokens.indexOf(render.endOfTurn, from);
  const opening = render.resultOpening;
  if (!opening?.length) return close < 0 ? -1 : close + 1;
  for (let i = from; i <= tokens.length - opening.length && (close < 0 || i <= close); i++)
    if (opening.every((t, k) => tokens[i + k] === t)) return i;
  return close < 0 ? -1 : close + 1;
}

export class SampleRenderError extends Error {}

/**
 * A stage sample as the model reads it, token by token: each target turn's tokens, from right after its
 * assistant opening to its end-of-turn token (or to its first call's result, see Renderer.resultOpening), are the targets; the rest (prompt, results, other weights'
 * turns, the template's own markup) is context. The window ends with the last target.
 */
export function tokenSample(
  sample: StageSample,
  functions: Readonly<Record<string, FunctionSpec>>,
  render: Renderer,
  following: readonly HistoryMessage[] = [],
): TokenSample {
  const conversation = (messages: readonly HistoryMessage[]) =>
    toConversation(messages, functions, sample.keepToolResult);
  const last = sample.targets.at(-1)!;
  // the last target with its calls' results, so its turn renders closed
  const results = following.filter((m) => m.role === "tool");
  const full = render.renderTokens(conversation([...sample.messages, ...results]));
  const mask = new Uint8Array(full.length);
  let end = 0;
  for (const t of sample.targets) {
    const before = render.renderTokens(conversation(sample.messages.slice(0, t)));
    if (commonPrefixLength(before, full) !== before.length)
      throw new SampleRenderError(
        `${sample.trajectory} (${sample.capability} stage ${sample.occurrence}): the history before message ${t} does not render as a prefix of the whole`,
      );
    end = turnEnd(full, before.length, render);
    if (end < 0)
      throw new SampleRenderError(
        `${sample.trajectory} (${sample.capability} stage ${sample.occurrence}): message ${t} renders no end-of-turn token`,
      );
    for (let i = before.length; i < end; i++) mask[i] = 1;
    if (t === last) break;
  }
  return { tokens: full.slice(0, end), mask: mask.slice(0, end) };
}

/** weact-train's samples file (little-endian): "WTS1", u32 count, then per sample u32 n, u32 tokens[n], u8 mask[n]. */
export function writeSamples(path: string, samples: readonly TokenSample[]): void {
  const size = 8 + samples.reduce((n, s) => n + 4 + 5 * s.tokens.length, 0);
  const out = Buffer.alloc(size);
  out.write("WTS1", 0, "ascii");
  out.writeUInt32LE(samples.length, 4);
  let at = 8;
  for (const s of samples) {
    at = out.writeUInt32LE(s.tokens.length, at);
    for (const t of s.tokens) at = out.writeUInt32LE(t, at);
    out.set(s.mask, at);
    at += s.mask.length;
  }
  writeFileSync(path, out);
}
