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

/** Words an answer may use without any source stating them. */
const FILLER = new Set("a an the is are was were be of in on at to and or it its by for from as with".split(" "));

/**
 * The words and numbers of a text, normalised; a number's group separators are dropped ("299,792,458" and
 * "299 792 458" are 299792458).
 */
const words = (s: string) => normalise(s.replace(/(\d)[ ,'_\u2009\u202f](?=\d{3}(?!\d))/g, "$1")).split(" ");

/**
 * Whether an answer is supported by what the run read (`sources`: the task and the tool results): true when each of
 * its words and numbers (filler words aside) occurs in a source, false when one occurs in none (a value nothing the
 * run read states), undefined when it has none to check. It says where an answer came from, not that it is right.
 */
export function grounded(answer: string, sources: readonly string[]): boolean | undefined {
  const claimed = words(answer).filter((w) => w && !FILLER.has(w));
  if (!claimed.length) return undefined;
  const read = new Set(sources.flatMap(words));
  return claimed.every((w) => read.has(w));
}

/**
 * Whether a text cites the evidence its answer came from: a line "Evidence: <sentence>" whose sentence occurs word
 * for word in `sources` (what the run read, and what its stages handed off). True when every such line does, false
 * when one quotes what nothing states, undefined when the text cites nothing.
 */
export function cited(text: string, sources: readonly string[]): boolean | undefined {
  const quotes = text.split(/\r?\n/).flatMap((line) => {
    const m = /^\s*evidence\s*:\s*(.+)$/i.exec(line);
    return m ? [m[1]!.trim()] : [];
  });
  if (!quotes.length) return undefined;
  return quotes.every((q) => sources.some((s) => s.includes(q)));
}
