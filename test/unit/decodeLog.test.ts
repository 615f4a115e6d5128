import { describe, expect, it } from "vitest";
import { DecodeLog, ROW_GROUP } from "../../src/engines/local/localTesting.js";

/** A log of decodes given as [start, length] pairs (token ids do not matter to the rule). */
function log(...decodes: [number, number][]): DecodeLog {
  const l = new DecodeLog();
  for (const [start, length] of decodes)
    l.record(
      start,
      Array.from({ length }, (_, i) => start + i),
    );
  return l;
}

describe("DecodeLog.piecesLength: the leading tokens computed in whole row groups", () => {
  it("counts a decode's groups of four and stops before its last rows", () => {
    expect(ROW_GROUP).toBe(4);
    expect(log([0, 8]).piecesLength()).toBe(8);
    expect(log([0, 10]).piecesLength()).toBe(8);
    expect(log([0, 3]).piecesLength()).toBe(0);
  });

  it("goes on through a later decode that evaluated the last rows again", () => {
    expect(log([0, 10], [8, 5]).piecesLength()).toBe(12);
    expect(log([0, 10], [8, 8]).piecesLength()).toBe(16);
  });

  it("stops at rows outside a group that a later decode left in place, and at a token decoded alone", () => {
    expect(log([0, 10], [10, 4]).piecesLength()).toBe(8);
    expect(log([0, 8], [8, 1]).piecesLength()).toBe(8);
    expect(log([0, 8], [8, 1], [9, 1]).piecesLength()).toBe(8);
  });
});

describe("DecodeLog.reusable: a prompt the cache holds whole", () => {
  it("keeps all of it when a decode of two rows or more ends exactly at its end, whole groups before it", () => {
    expect(log([0, 10]).reusable(10, 10)).toBe(10);
    expect(log([0, 8], [8, 3]).reusable(11, 11)).toBe(11);
    expect(log([0, 10], [10, 6]).reusable(10, 10)).toBe(10);
  });

  it("keeps whole groups short of the last token otherwise, so that the end is evaluated again", () => {
    expect(log([0, 10], [10, 4]).reusable(14, 14)).toBe(8); // rows outside a group before the last decode
    expect(log([0, 8], [8, 1]).reusable(9, 9)).toBe(8); // a token decoded alone
    expect(log([0, 10], [8, 6]).reusable(10, 10)).toBe(9); // the decode ending there was evaluated again after
    expect(log([0, 10]).reusable(9, 9)).toBe(8); // no decode ends there
    expect(log([0, 16]).reusable(12, 12)).toBe(11);
  });

  it("keeps the common prefix's whole groups when the prompt goes past it", () => {
    expect(log([0, 10]).reusable(6, 12)).toBe(6);
    expect(log([0, 10]).reusable(10, 12)).toBe(8);
  });
});
