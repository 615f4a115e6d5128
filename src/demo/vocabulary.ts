/**
 * A byte-level GPT-2 style BPE vocabulary: the 256 byte tokens, a few merges, and a model family's special tokens.
 * llama.cpp's "gpt2" tokenizer accepts a short merge list, so text costs about one token per byte.
 */

/** GPT-2's reversible byte -> printable unicode mapping (bytes_to_unicode). */
export function byteToUnicode(): string[] {
  const printable = new Set<number>();
  for (let b = 33; b <= 126; b++) printable.add(b);
  for (let b = 161; b <= 172; b++) printable.add(b);
  for (let b = 174; b <= 255; b++) printable.add(b);
  const out: string[] = new Array(256);
  let extra = 0;
  for (let b = 0; b < 256; b++) out[b] = String.fromCodePoint(printable.has(b) ? b : 256 + extra++);
  return out;
}

const MERGES = [
  "Ġ t",
  "Ġ a",
  "h e",
  "i n",
  "r e",
  "o n",
  "Ġt he",
  "e r",
  "a t",
  "Ġ s",
  "e n",
  "o r",
  "Ġ w",
  "Ġ o",
  "i s",
  "a n",
  "e s",
  "Ġ c",
  "i t",
  "a l",
];

/**
 * Control tokens are never produced from plain text; the tool and think markers are user-defined, as in Qwen3's GGUFs.
 */
export const SPECIAL_TOKENS = [
  { text: "<|endoftext|>", type: 3 },
  { text: "<|im_start|>", type: 3 },
  { text: "<|im_end|>", type: 3 },
  { text: "<tool_call>", type: 4 },
  { text: "</tool_call>", type: 4 },
  { text: "<think>", type: 4 },
  { text: "</think>", type: 4 },
  { text: "<tool_response>", type: 4 },
  { text: "</tool_response>", type: 4 },
] as const;

export interface DemoVocabulary {
  tokens: string[];
  tokenTypes: number[];
  merges: string[];
  idOf(text: string): number;
}

export interface SpecialToken {
  readonly text: string;
  /** llama_token_type: 3 control (never produced from plain text), 4 user-defined. */
  readonly type: 3 | 4;
}

/**
 * The byte-level vocabulary with `specials` appended (default: the Qwen chat tokens of the demo model), and a
 * token for each merge's result (default: a few; a learned list makes text cost far fewer tokens).
 */
export function buildVocabulary(
  specials: readonly SpecialToken[] = SPECIAL_TOKENS,
  merges: readonly string[] = MERGES,
): DemoVocabulary {
  const tokens = byteToUnicode();
  const tokenTypes = tokens.map(() => 1);
  const known = new Set(tokens);
  for (const merge of merges) {
    // two merges can spell the same token ("a bc", "ab c"): the vocabulary holds it once
    const token = merge.replace(" ", "");
    if (known.has(token)) continue;
    known.add(token);
    tokens.push(token);
    tokenTypes.push(1);
  }
  for (const special of specials) {
    tokens.push(special.text);
    tokenTypes.push(special.type);
  }
  const ids = new Map(tokens.map((t, i) => [t, i]));
  return {
    tokens,
    tokenTypes,
    merges: [...merges],
    idOf(text) {
      const id = ids.get(text);
      if (id === undefined) throw new Error(`no token ${text} in the demo vocabulary`);
      return id;
    },
  };
}
