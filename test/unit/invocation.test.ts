import { describe, expect, it } from "vitest";
import { invocationStart } from "../../src/engine/index.js";

/** The activated LoRA's invocation point, found as llama-server finds it (tools/server/server-context.cpp). */
describe("invocationStart", () => {
  it("is the start of the last occurrence", () => {
    expect(invocationStart([9, 1, 2, 3, 1, 2, 3, 7], [1, 2, 3])).toBe(4);
    expect(invocationStart([1, 2], [1, 2])).toBe(0);
    expect(invocationStart([5, 5, 1], [1])).toBe(2);
  });

  it("is undefined when the sequence is absent or empty (the adapter then contributes nothing)", () => {
    expect(invocationStart([1, 2, 4], [1, 2, 3])).toBeUndefined();
    expect(invocationStart([], [1])).toBeUndefined();
    expect(invocationStart([1, 2], [])).toBeUndefined();
  });

  it("keeps llama-server's scan: after a mismatch it starts over without testing that token again", () => {
    // [1, 2] does occur at 0, but scanning back from the end the second 2 resets the match on the first 2
    expect(invocationStart([1, 2, 2], [1, 2])).toBeUndefined();
    expect(invocationStart([1, 2, 2, 0], [1, 2])).toBeUndefined();
    expect(invocationStart([1, 2, 0, 2], [1, 2])).toBe(0);
    // a self-overlapping sequence is found where the backward scan completes it
    expect(invocationStart([1, 1, 1, 2], [1, 1, 2])).toBe(1);
  });
});
