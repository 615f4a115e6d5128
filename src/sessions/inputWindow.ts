import { setImmediate as nextTurnOfTheLoop } from "node:timers/promises";
import { InputTooLongError } from "./errors.js";

/**
 * Most characters one token stands for, generously: the longest tokens of real vocabularies are runs of one
 * character (Gemma 3's: 31 spaces, tabs or newlines). A text longer than the window's tokens times this cannot fit.
 */
export const MAX_CHARS_PER_TOKEN = 128;
/**
 * Characters tokenized at once while counting: tens of milliseconds of the event loop with the slowest tokenizer
 * measured (Gemma 3's, about 2 µs a character on a busy machine), and other clients' calls run between two pieces.
 * Input this short is left to the engine, whose render of it is as short and which checks the window exactly.
 */
const PIECE_CHARS = 16_384;

/** A text from outside and the name of the field it came in (what the client is told to shorten). */
export interface InputField {
  name: string;
  text: string;
}

/** What the check needs of the engine: its window and its tokenizer. */
export interface TokenWindow {
  size: number;
  tokenize: (text: string) => readonly unknown[];
}

/**
 * Refuses `fields` when together they cannot fit a context window of `window.size` tokens, before anything tokenizes
 * them whole (tokenizing is synchronous native code: megabytes of it held the event loop, and so every client, for
 * seconds). Past `MAX_CHARS_PER_TOKEN` characters a token they are refused by their length alone; longer than a
 * piece, they are counted piece by piece with the loop free between pieces, and refused once they need more tokens
 * than the window holds.
 */
export async function refuseUnfittable(fields: readonly InputField[], window: TokenWindow): Promise<void> {
  const total = fields.reduce((sum, f) => sum + f.text.length, 0);
  if (total <= PIECE_CHARS) return;
  const longest = fields.reduce((a, b) => (b.text.length > a.text.length ? b : a));
  const named =
    fields.filter((f) => f.text.length).length > 1 ? `${longest.name} (with the other fields)` : longest.name;
  const refuse = (why: string) =>
    new InputTooLongError(longest.name, `${named}: ${why}; shorten it or raise model.contextSize`);
  const maxChars = window.size * MAX_CHARS_PER_TOKEN;
  if (total > maxChars)
    throw refuse(
      `${total} characters cannot fit the context window of ${window.size} tokens (model.contextSize), which holds at most ${maxChars} characters (${MAX_CHARS_PER_TOKEN} a token)`,
    );
  let tokens = 0;
  let pieces = 0;
  for (const { text } of fields) {
    for (let start = 0; start < text.length;) {
      const end = pieceEnd(text, start);
      await nextTurnOfTheLoop();
      tokens += window.tokenize(text.slice(start, end)).length;
      pieces++;
      start = end;
      // a cut can split what would be one token, and a piece may gain a leading one: two a piece are not counted
      if (tokens - 2 * pieces > window.size)
        throw refuse(`more tokens than the context window holds (${window.size}, model.contextSize)`);
    }
  }
}

/** Where the piece from `start` ends: before a space or line break near PIECE_CHARS, never inside a surrogate pair. */
function pieceEnd(text: string, start: number): number {
  const end = start + PIECE_CHARS;
  if (end >= text.length) return text.length;
  const space = Math.max(text.lastIndexOf(" ", end), text.lastIndexOf("\n", end));
  if (space > start + PIECE_CHARS / 2) return space;
  const high = text.charCodeAt(end - 1);
  return high >= 0xd800 && high <= 0xdbff ? end - 1 : end;
}
