import type { CallSyntax } from "../../../engine/index.js";

/** A turn's output read back: the response text before the call trigger, and the call when it is complete. */
export interface ParsedTurn {
  text: string;
  call?: { name: string; params: unknown; paramsText: string };
  /** The trigger was written but the call did not complete (the turn hit its limit). */
  truncatedCall: boolean;
}

/** Where the JSON value starting at `from` ends (exclusive), or -1 when it does not end in `text`. */
export function jsonEnd(text: string, from: number): number {
  let depth = 0;
  let inString = false;
  for (let i = from; i < text.length; i++) {
    const ch = text[i]!;
    if (inString) {
      if (ch === "\\") i++;
      else if (ch === '"') {
        inString = false;
        if (depth === 0) return i + 1;
      }
    } else if (ch === '"') inString = true;
    else if (ch === "{" || ch === "[") depth++;
    else if (ch === "}" || ch === "]") {
      depth--;
      if (depth === 0) return i + 1;
    } else if (depth === 0 && /[\s,]/.test(ch) && i > from) return i;
  }
  return depth === 0 && !inString && text.length > from && !/[{["]/.test(text[from]!) ? text.length : -1;
}

/**
 * Reads the turn the way the local engine's LlamaChat does: text up to the template's call trigger, then the name
 * of one of the callable functions, its parameters and the call's suffix. The grammar made it well-formed; a call
 * cut off by the token limit is reported as truncated, its partial text left out of the response.
 */
export function parseTurn(
  output: string,
  syntax: CallSyntax,
  callable: readonly { name: string; hasParams: boolean }[],
): ParsedTurn {
  const at = output.indexOf(syntax.trigger);
  if (at < 0) return { text: output, truncatedCall: false };
  const text = output.slice(0, at);
  let rest = output.slice(at + syntax.trigger.length);
  if (syntax.optionalPrefixSpace && rest.startsWith(" ")) rest = rest.slice(1);
  const named = (s: string, name: string) => s.replaceAll("{{functionName}}", name);
  const fn = [...callable]
    .sort((a, b) => b.name.length - a.name.length)
    .find((f) => rest.startsWith(f.name + named(syntax.paramsPrefix, f.name)));
  if (!fn) return { text, truncatedCall: true };
  const start = fn.name.length + named(syntax.paramsPrefix, fn.name).length;
  let paramsText: string;
  let params: unknown;
  if (fn.hasParams) {
    const end = jsonEnd(rest, start);
    if (end < 0) return { text, truncatedCall: true };
    paramsText = rest.slice(start, end);
    try {
      params = JSON.parse(paramsText);
    } catch {
      return { text, truncatedCall: true };
    }
  } else {
    paramsText = syntax.emptyParams;
    params = undefined;
    if (!rest.startsWith(paramsText, start)) return { text, truncatedCall: true };
  }
  if (!rest.slice(start + paramsText.length).startsWith(named(syntax.suffix, fn.name).trimEnd()))
    return { text, truncatedCall: true };
  return { text, call: { name: fn.name, params, paramsText }, truncatedCall: false };
}

/**
 * Streams a turn's response text as it grows, never a piece of a call: text that could still turn out to be the
 * start of the call trigger is held back until it is not, and a trailing U+FFFD (an incomplete character) waits
 * for the bytes that complete it.
 */
export class ResponseTextStream {
  private sent = 0;
  private done = false;

  constructor(
    private readonly trigger: string,
    private readonly emit: (chunk: string) => void,
  ) {}

  /** `output`: the whole turn so far. */
  update(output: string): void {
    if (this.done) return;
    const at = output.indexOf(this.trigger);
    let safe: number;
    if (at >= 0) {
      safe = at;
      this.done = true;
    } else {
      safe = output.length;
      for (let k = Math.min(this.trigger.length - 1, output.length); k > 0; k--) {
        if (output.endsWith(this.trigger.slice(0, k))) {
          safe = output.length - k;
          break;
        }
      }
      while (safe > this.sent && output[safe - 1] === "\uFFFD") safe--;
    }
    if (safe > this.sent) {
      this.emit(output.slice(this.sent, safe));
      this.sent = safe;
    }
  }
}
