import { describe, expect, it } from "vitest";
import { InputTooLongError } from "../../src/sessions/errors.js";
import { MAX_CHARS_PER_TOKEN, refuseUnfittable } from "../../src/sessions/inputWindow.js";

/** A stand-in tokenizer of one token per 4 characters that records what it was given. */
function tokenizer() {
  const seen: string[] = [];
  return {
    seen,
    tokenize: (text: string) => {
      seen.push(text);
      return new Array<number>(Math.ceil(text.length / 4)).fill(0);
    },
  };
}

describe("refuseUnfittable (the counting logic alone)", () => {
  it("refuses text past the character bound by its length, without tokenizing it", async () => {
    const t = tokenizer();
    const text = "x".repeat(1000 * MAX_CHARS_PER_TOKEN + 1);
    const err = await refuseUnfittable([{ name: "task", text }], { size: 1000, tokenize: t.tokenize }).catch(
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(InputTooLongError);
    expect(err).toMatchObject({ field: "task", code: "input_too_long" });
    expect((err as Error).message).toMatch(/^task: 128001 characters cannot fit .* model\.contextSize/);
    expect(t.seen).toEqual([]);
  });

  it("counts longer text in pieces of at most 16 Ki characters, never splitting a surrogate pair, and passes what fits", async () => {
    const t = tokenizer();
    const text = `${"word ".repeat(20_000)}${"😀".repeat(20_000)}`;
    await refuseUnfittable([{ name: "a", text }], { size: 40_000, tokenize: t.tokenize });
    expect(t.seen.join("")).toBe(text);
    for (const piece of t.seen) {
      expect(piece.length).toBeLessThanOrEqual(16_384);
      expect(piece.charCodeAt(piece.length - 1)).not.toSatisfy((c: number) => c >= 0xd800 && c <= 0xdbff);
    }
  });

  it("stops counting once the fields together need more tokens than the window, naming the longest", async () => {
    const t = tokenizer();
    const fields = [
      { name: "messages[0].content", text: "y".repeat(30_000) },
      { name: "messages[1].content", text: "z".repeat(200_000) },
    ];
    const err = await refuseUnfittable(fields, { size: 20_000, tokenize: t.tokenize }).catch((e: unknown) => e);
    expect(err).toMatchObject({ field: "messages[1].content" });
    expect((err as Error).message).toMatch(
      /^messages\[1\]\.content \(with the other fields\): more tokens than the context window holds \(20000, model\.contextSize\)/,
    );
    expect(t.seen.join("").length).toBeLessThan(130_000);
  });
});
