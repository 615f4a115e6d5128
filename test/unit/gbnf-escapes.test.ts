import { describe, expect, it } from "vitest";
import { gbnfLiteral, turnGrammar } from "../../src/engines/remote/turn/grammar.js";

/**
 * The remote turn grammar is read by two GBNF parsers: llama.cpp's takes exactly two hex digits after `\x`, xgrammar's
 * (vLLM, SGLang) takes every hex digit that follows. A hex digit written right after a `\x` escape would make xgrammar
 * read another character (vLLM 0.32 then let the trained planner write "||call: write." where only function names
 * may follow the trigger), so no escape may be followed by one.
 */
describe("GBNF escapes both parsers read alike", () => {
  const escapeThenHexDigit = /\\x[0-9a-fA-F]{2}[0-9a-fA-F]/;

  it("a literal escapes a hex digit that follows an escape", () => {
    expect(gbnfLiteral("\u0001a7")).toBe('"\\x01\\x61\\x37"');
    expect(gbnfLiteral("a\tb")).toBe('"a\\tb"');
  });

  it("the free-text rules around a call trigger and its function names have no escape followed by a hex digit", () => {
    const grammar = turnGrammar(
      {
        trigger: "||call: ",
        paramsPrefix: "(",
        suffix: ")",
        emptyParams: "{}",
        optionalPrefixSpace: true,
        specialTokens: [],
      },
      [{ name: "offload_lora" }, { name: "search" }],
    );
    expect(grammar).toContain("text-7");
    for (const line of grammar.split("\n")) expect(line).not.toMatch(escapeThenHexDigit);
  });
});
