import type { Token } from "node-llama-cpp";

/** One decode call on a sequence: the tokens it evaluated, starting at cache position `start`. */
export interface Decode {
  readonly start: number;
  readonly tokens: readonly Token[];
}

/**
 * How a sequence's cache was computed: its decode calls in order, and its length now. llama.cpp's numerics
 * depend on how tokens were split into decodes, so this is what a reference needs to reproduce a cache
 * bit for bit. Decodes wholly overwritten by a later one are dropped; one cut by an erase is kept whole
 * (its tail shaped the numerics of the part that stays) and the replay erases the tail again.
 */
export class DecodeLog {
  private entries: Decode[] = [];

  record(start: number, tokens: readonly Token[]): void {
    if (!tokens.length) return;
    this.entries = this.entries.filter((d) => d.start < start);
    this.entries.push({ start, tokens: [...tokens] });
  }

  clear(): void {
    this.entries = [];
  }

  /**
   * How many leading cached tokens came from decodes of two tokens or more. A token decoded alone (a turn's last prompt
   * token, a generated one) has other last bits than the same token in a prompt piece (ggml's one-row kernels).
   */
  piecesLength(): number {
    let end = 0;
    for (const d of this.entries) {
      if (d.start > end || d.tokens.length === 1) return Math.min(end, d.start);
      end = d.start + d.tokens.length;
    }
    return end;
  }

  /** The decodes that produced the first `length` cached tokens. */
  replay(length: number): CacheReplay {
    return { decodes: this.entries.filter((d) => d.start < length), length };
  }
}

/**
 * Enough to recompute a cache exactly: replay `decodes` (erasing from each one's start first), then keep
 * `length` tokens. An activated LoRA's cache was computed under the base before `activatedFrom` and under the
 * adapter from it (no decode spans that point); undefined: every decode ran under the same weights.
 */
export interface CacheReplay {
  readonly decodes: readonly Decode[];
  readonly length: number;
  readonly activatedFrom?: number;
}
