/**
 * The answer of a trajectory: the final text, with a marked answer pulled out when the text has one.
 * Rule (documented in the README): the last line starting with "Answer:" wins; otherwise the last
 * \boxed{...} (braces may nest); otherwise there is no marked answer and the whole text stands.
 */
export function extractAnswer(text: string): { answer: string; marked: boolean } {
  const lines = text.split(/\r?\n/);
  for (let i = lines.length - 1; i >= 0; i--) {
    const m = /^\s*\**answer\**\s*:\s*(.*)$/i.exec(lines[i]!);
    if (m) return { answer: m[1]!.trim(), marked: true };
  }
  const boxed = lastBoxed(text);
  if (boxed !== undefined) return { answer: boxed.trim(), marked: true };
  return { answer: text.trim(), marked: false };
}

function lastBoxed(text: string): string | undefined {
  const at = text.lastIndexOf("\\boxed{");
  if (at < 0) return undefined;
  let depth = 0;
  for (let i = at + "\\boxed{".length - 1; i < text.length; i++) {
    if (text[i] === "{") depth++;
    else if (text[i] === "}" && --depth === 0) return text.slice(at + "\\boxed{".length, i);
  }
  return undefined;
}

/** Exact match and normalised containment, for the eval runner. */
export function normalise(s: string): string {
  return s
    .toLowerCase()
    .normalize("NFKD")
    .replace(/[\u0300-\u036f]/g, "")
    .replace(/[^\p{L}\p{N}]+/gu, " ")
    .trim();
}

export function judge(answer: string, expected: string | readonly string[]): { exact: boolean; contains: boolean } {
  const wanted = (Array.isArray(expected) ? expected : [expected]) as readonly string[];
  const got = normalise(answer);
  return {
    exact: wanted.some((w) => normalise(w) === got),
    contains: wanted.some((w) => normalise(w).length > 0 && got.includes(normalise(w))),
  };
}
