import type { Token } from "node-llama-cpp";

/**
 * The rows ggml's repacked CPU kernels take together (repack.cpp: gemm over `nrows - nrows % 4` rows, gemv for the
 * rest). Under model.batchInvariant the engine starts each decode at a multiple of it, so which of a prompt's tokens
 * fall outside a group never depends on what the cache held.
 */
export const ROW_GROUP = 4;

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
   * How many leading cached tokens were computed in whole groups of ROW_GROUP rows of their decode. ggml's repacked
   * CPU kernels (the prebuilt binding's, for K-quants and Q4_0) take a decode's rows in fours with one kernel and the
   * last `length % 4` with another, whose last bits differ; a token decoded alone (a turn's last prompt token, a
   * generated one) is such a row too. A token in a group has the same numbers whichever decode computed it.
   */
  piecesLength(): number {
    let reach = 0;
    for (const [i, d] of this.entries.entries()) {
      if (d.start > reach) return reach;
      const grouped = d.tokens.length - (d.tokens.length % ROW_GROUP);
      reach = d.start + grouped;
      const next = this.entries[i + 1];
      // the ungrouped rows stay unless the next decode evaluated them again
      if (grouped < d.tokens.length && (!next || next.start > reach)) return reach;
    }
    return reach;
  }

  /**
   * How much of the cache a prompt of `length` tokens keeps, given the `common` leading tokens they share: its whole row
   * groups (piecesLength). A prompt the cache holds whole would, evaluated afresh, end with the rows of its last group
   * outside a group (each decode starts on the grid): it keeps all of it when a decode of two rows or more ends exactly
   * there, untouched after, with whole groups before it (a switch's lane serves the next turn as it is); otherwise its
   * whole groups short of its last token, so that the end is evaluated again as a fresh evaluation would.
   */
  reusable(common: number, length: number): number {
    const grouped = this.piecesLength();
    if (common < length) return Math.min(common, grouped);
    const ending = this.entries.findIndex((d) => d.start + d.tokens.length === length);
    const d = this.entries[ending];
    const next = this.entries[ending + 1];
    if (d && d.tokens.length >= 2 && d.start <= grouped && (!next || next.start >= length)) return length;
    return Math.min(Math.max(0, length - 1), grouped);
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
