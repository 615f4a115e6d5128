import { SPECIAL_TOKENS, byteToUnicode } from "../../src/demo/vocabulary.js";

/**
 * llama.cpp's "qwen2" pre-tokenizer split (the regex of Qwen2's tokenizer.json, its case-insensitive contractions
 * spelled out): merges never cross these pieces, so merges learned over them are the ones llama.cpp can apply.
 */
const PIECES =
  /(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+/gu;

const SPECIALS = new RegExp(SPECIAL_TOKENS.map((s) => s.text.replace(/[|\\/<>]/g, (c) => `\\${c}`)).join("|"), "g");

/**
 * Byte-level BPE merges learned from `texts` (GPT-2's form: "Ġt he"), most frequent pair first, until `count`
 * merges or no pair occurs twice. Special tokens are cut out first: they are single tokens already. No merge
 * makes a token containing one of `unsplittable`'s strings: where generation switches grammars mid-text, a
 * token across the switch can never be sampled, so the rendered history must not hold one either.
 */
export function learnMerges(texts: Iterable<string>, count: number, unsplittable: readonly string[] = []): string[] {
  const toUnicode = byteToUnicode();
  const encoder = new TextEncoder();
  const banned = unsplittable.map((s) => [...encoder.encode(s)].map((b) => toUnicode[b]).join(""));
  const words = new Map<string, number>();
  for (const text of texts) {
    for (const part of text.split(SPECIALS)) {
      for (const piece of part.match(PIECES) ?? []) {
        const word = [...encoder.encode(piece)].map((b) => toUnicode[b]).join("\u0000");
        words.set(word, (words.get(word) ?? 0) + 1);
      }
    }
  }
  let symbols = [...words].map(([w, n]) => ({ parts: w.split("\u0000"), n }));
  const merges: string[] = [];
  while (merges.length < count) {
    const pairs = new Map<string, number>();
    for (const { parts, n } of symbols) {
      for (let i = 0; i + 1 < parts.length; i++) {
        const key = `${parts[i]} ${parts[i + 1]}`;
        pairs.set(key, (pairs.get(key) ?? 0) + n);
      }
    }
    let best: string | undefined;
    let bestCount = 1;
    // ties go to the pair seen first, so the list is deterministic
    for (const [pair, n] of pairs)
      if (n > bestCount && !banned.some((b) => pair.replace(" ", "").includes(b))) [best, bestCount] = [pair, n];
    if (!best) break;
    merges.push(best);
    const [a, b] = best.split(" ") as [string, string];
    symbols = symbols.map(({ parts, n }) => {
      const out: string[] = [];
      for (let i = 0; i < parts.length; i++) {
        if (i + 1 < parts.length && parts[i] === a && parts[i + 1] === b) {
          out.push(a + b);
          i++;
        } else out.push(parts[i]!);
      }
      return { parts: out, n };
    });
  }
  return merges;
}
