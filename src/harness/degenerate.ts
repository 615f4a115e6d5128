/**
 * Degenerate output: model turns that loop or say nothing new. A model pushed off the wording it was trained on (or a
 * random-weight one) decodes junk that still fills its turns; a run built on such turns has no answer to give, and
 * its finish says so (`degenerate`) instead of presenting the last junk as one.
 *
 * Turns are judged by their character n-grams (whitespace runs read as one space), so a loop counts whether its
 * words are spaced ("Look up the birth": "offload_lora", ...), glued ("S9S9S9") or byte garbage. Figures from the
 * shipped texts and the demo models, as the share of 16-grams repeating one earlier in the same text: prose 0-4 %,
 * code 0-5 %, CSS 13 %, a JSONL file of near-identical lines 50 %; the trained demo's off-pattern loops 83-94 %,
 * the random demo model's turns 22-98 %.
 */

/** Why a turn is degenerate. */
export const DEGENERATE_RULES = ["repetition", "no_progress"] as const;
export type DegenerateRule = (typeof DEGENERATE_RULES)[number];

export interface Verdict {
  rule: DegenerateRule;
  /** The figures that fired it, for people. */
  detail: string;
}

/** A degenerate turn of a run: the rule, where it was, and which model turn of the run (1-based). */
export interface Degeneration extends Verdict {
  stage: string;
  /** "base" or the adapter(s) that wrote the turn. */
  adapter: string;
  turn: number;
}

/** N of the n-grams: long enough that prose and code rarely repeat one, short enough that every loop does. */
const N = 16;
/** A turn with fewer characters is not judged: too few n-grams to tell a loop from a short answer. */
export const MIN_CHARS = 64;
/** `repetition`: at least this share of a turn's n-grams repeat an earlier n-gram of the same turn. */
const LOOP_SHARE = 0.5;
/** `no_progress`: at least this share of a turn's n-grams were already written by earlier turns of its stage. */
const STALE_SHARE = 0.9;

/** The character n-grams of a text (code points, whitespace runs as one space). */
export function ngrams(text: string): string[] {
  const chars = Array.from(text.replace(/\s+/g, " ").trim());
  const out: string[] = [];
  for (let i = 0; i + N <= chars.length; i++) out.push(chars.slice(i, i + N).join(""));
  return out;
}

const pct = (x: number) => `${Math.round(x * 100)} %`;

/**
 * Judges each model turn of one run as it comes: `repetition` (the turn loops within itself) and `no_progress` (a
 * turn without a call that repeats what earlier turns of its stage wrote). Only turns of at least MIN_CHARS characters
 * are judged; a short turn, or one cut by a small per-turn limit, is never called degenerate for its length alone.
 */
export class DegenerationWatch {
  /** Per stage, the n-grams its turns wrote so far. */
  private readonly written = new Map<string, Set<string>>();

  judge(stage: string, turn: { text: string; calls: readonly unknown[] }): Verdict | undefined {
    const grams = ngrams(turn.text);
    const earlier = this.written.get(stage) ?? new Set<string>();
    this.written.set(stage, earlier);
    // fewer than MIN_CHARS characters: not judged, but what it wrote is still the stage's
    if (grams.length <= MIN_CHARS - N) {
      for (const g of grams) earlier.add(g);
      return undefined;
    }
    const own = new Set<string>();
    let repeats = 0;
    let stale = 0;
    for (const g of grams) {
      if (own.has(g)) repeats++;
      own.add(g);
      if (earlier.has(g)) stale++;
    }
    for (const g of own) earlier.add(g);
    const loop = repeats / grams.length;
    if (loop >= LOOP_SHARE)
      return {
        rule: "repetition",
        detail: `${pct(loop)} of the turn's ${grams.length} runs of ${N} characters repeat one earlier in the same turn`,
      };
    const seen = stale / grams.length;
    if (!turn.calls.length && seen >= STALE_SHARE)
      return {
        rule: "no_progress",
        detail: `${pct(seen)} of the turn's ${grams.length} runs of ${N} characters were written by earlier turns of its stage, and it called nothing`,
      };
    return undefined;
  }
}
