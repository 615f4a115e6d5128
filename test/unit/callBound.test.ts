import { describe, expect, it } from "vitest";
import { argumentsBound, BEYOND_ANY_CONTEXT } from "../../src/engines/local/localTesting.js";

/** A leaf whose widest text is exactly its literal: the bound of what holds it can be checked against real text. */
const LEAF = 12345;
type Schema = Record<string, unknown>;

/** `levels` arrays, each of at least `minItems` items, around a const leaf. */
const nestedSchema = (levels: number, minItems: number): Schema =>
  levels ? { type: "array", minItems, items: nestedSchema(levels - 1, minItems) } : { const: LEAF };
const nestedValue = (levels: number, items: number): unknown =>
  levels ? Array.from({ length: items }, () => nestedValue(levels - 1, items)) : LEAF;
/** Function parameters of one field, `grid`, holding `inner`. */
const params = (inner: Schema): Schema => ({ type: "object", properties: { grid: inner }, required: ["grid"] });

/**
 * The widest text of `{"grid": nested arrays}` as node-llama-cpp's grammar allows it: every value on a line of its
 * own, indented four spaces a level (JSON.stringify's own layout at indent 4), counted without writing it.
 */
function widestNested(levels: number, items: number): number {
  const line = (depth: number) => "\n".length + 4 * depth;
  const array = (depth: number, level: number): number =>
    level === 0
      ? String(LEAF).length
      : "[]".length + items * (line(depth + 1) + array(depth + 1, level - 1)) + (items - 1) * ",".length + line(depth);
  return '{"grid": }'.length + line(1) + array(1, levels) + line(0);
}

describe("argumentsBound (the closing bound of a steered call)", () => {
  it("is the length of the widest text the grammar allows for required nested items", () => {
    for (const [levels, items] of [
      [1, 1],
      [2, 3],
      [3, 4],
    ] as const) {
      const text = JSON.stringify({ grid: nestedValue(levels, items) }, null, 4);
      expect(widestNested(levels, items)).toBe(Buffer.byteLength(text));
      expect(argumentsBound(params(nestedSchema(levels, items)))).toBe(Buffer.byteLength(text));
    }
  });

  it("counts prefix items one by one and the items after them by their own schema", () => {
    const schema = params({
      type: "array",
      prefixItems: [{ const: "ab" }, { const: true }],
      items: { const: LEAF },
      minItems: 5,
    });
    const text = JSON.stringify({ grid: ["ab", true, LEAF, LEAF, LEAF] }, null, 4);
    expect(argumentsBound(schema)).toBe(Buffer.byteLength(text));
  });

  // each item of an array was walked again: nested arrays cost minItems^depth (512^3: seconds; 512^5: hours), all on
  // the event loop of the server that steers the call
  it("bounds nested arrays of minItems 512 three levels deep exactly, in well under a second", () => {
    const started = performance.now();
    const bound = argumentsBound(params(nestedSchema(3, 512)));
    expect(performance.now() - started).toBeLessThan(200);
    expect(bound).toBe(widestNested(3, 512));
    expect(bound).toBeLessThan(BEYOND_ANY_CONTEXT);
  });

  it("bounds five levels of minItems 512, or the 64 a request may nest, as more than any context, at once", () => {
    for (const levels of [5, 62]) {
      const started = performance.now();
      expect(argumentsBound(params(nestedSchema(levels, 512)))).toBe(BEYOND_ANY_CONTEXT);
      expect(performance.now() - started).toBeLessThan(200);
    }
  }, 1_000);
});
