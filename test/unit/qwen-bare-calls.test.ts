import { describe, expect, it } from "vitest";
import { bareCallOpeners } from "../../training/qwen/libraryData.js";

// token ids stand in for a template's: 9 "<tool_call>", 1 "\n", 5 '{"', 6 the rest of a call, 3 "</tool_call>",
// 2 "<|im_end|>"
const OPENER = [9, 1];
const CLOSER = [1, 3];

describe("a Qwen stage sample's calls opened by their JSON alone", () => {
  it("takes the opener out of the targets and the closer off them, the context keeping the template's syntax", () => {
    const sample = {
      // context: an earlier call, opener and closer included; target: text, newline, the call, end of turn
      tokens: [9, 1, 5, 6, 1, 3, 7, 8, 1, 9, 1, 5, 6, 1, 3, 2],
      mask: Uint8Array.from([0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1]),
    };
    const bare = bareCallOpeners(sample, OPENER, CLOSER);
    expect(bare.tokens).toEqual([9, 1, 5, 6, 1, 3, 7, 8, 1, 5, 6, 1, 3, 2]);
    expect([...bare.mask]).toEqual([0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 1]);
  });

  it("keeps an opener that is only partly a target", () => {
    const sample = { tokens: [7, 9, 1, 5], mask: Uint8Array.from([0, 0, 1, 1]) };
    expect(bareCallOpeners(sample, OPENER, CLOSER)).toEqual(sample);
  });
});
