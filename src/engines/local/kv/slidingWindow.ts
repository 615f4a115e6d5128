import type { LlamaContextSequence } from "node-llama-cpp";

import type { CutFloor } from "../deciding/SessionRules.js";

/**
 * On a sliding-window (SWA) model whose context keeps a window-sized SWA cache (`model.swaFullCache` false), llama.cpp
 * frees the SWA layers' cells that fall out of the window: the first cell left is `stateCellsStartIndex`. A token at
 * position p attends to positions p - n_swa + 1 ... p (llama.cpp's standard SWA mask), so a cache cut back to p and
 * continued is exact only if p - n_swa + 1 is still there. node-llama-cpp 3.21.1 checks only that p lies after the
 * first cell, and would continue with part of the window gone (measured on Gemma 3 270M: see test/engine/gemma-swa).
 * A state read back from a file (a shared prompt prefix, a spilled lane) starts its SWA cells a window before its end
 * even in a full cache (a 626-token prefix of Gemma 3 at cell 115), so nothing before that end can be cut. 0 when
 * nothing was freed (a full cache never read back, or a model without SWA layers).
 */
export const firstCuttable: CutFloor = (sequence) => {
  const first = sequence.stateCellsStartIndex;
  const window = sequence.model.fileInsights.swaSize;
  return first > 0 && window ? first + window - 1 : 0;
};

/**
 * Drops the cache from `start` on and returns where it now ends: `start`, or 0 when the window before `start` is
 * gone (the cache is cleared, for its caller to evaluate again, each part under its own weights). Not left to
 * node-llama-cpp: its erase re-evaluates such a cache itself, under whatever adapter the context has applied.
 */
export async function cutSequence(
  sequence: LlamaContextSequence,
  start: number,
  floor: CutFloor = firstCuttable,
): Promise<number> {
  if (start >= sequence.nextTokenIndex) return sequence.nextTokenIndex;
  if (start > 0 && start < floor(sequence)) {
    await sequence.clearHistory();
    return 0;
  }
  await sequence.eraseContextTokenRanges([{ start, end: sequence.nextTokenIndex }]);
  return start;
}
