import { describe, expect, it } from "vitest";
import { cited, extractAnswer, grounded, judge, normalise } from "../../src/harness/answer.js";

describe("answer extraction", () => {
  it("takes the last line starting with Answer:, in any case, with markdown emphasis", () => {
    expect(extractAnswer("Thinking.\nAnswer: Paris\nmore text")).toEqual({ answer: "Paris", marked: true });
    expect(extractAnswer("Answer: first\nAnswer: second")).toEqual({ answer: "second", marked: true });
    expect(extractAnswer("  **Answer**:   the Seine  ")).toEqual({ answer: "the Seine", marked: true });
    expect(extractAnswer("ANSWER : 42")).toEqual({ answer: "42", marked: true });
    expect(extractAnswer("line\r\nanswer:  x\r\n")).toEqual({ answer: "x", marked: true });
    expect(extractAnswer("Answer:")).toEqual({ answer: "", marked: true });
    expect(extractAnswer("Answer:Paris")).toEqual({ answer: "Paris", marked: true });
  });

  it("only at the start of a line", () => {
    expect(extractAnswer("The Answer: no")).toEqual({ answer: "The Answer: no", marked: false });
  });

  it("an Answer: line wins over a boxed answer", () => {
    expect(extractAnswer("\\boxed{1}\nAnswer: 2")).toEqual({ answer: "2", marked: true });
  });

  it("else the content of the last \\boxed{...}, braces nested", () => {
    expect(extractAnswer("so \\boxed{ 12 } and")).toEqual({ answer: "12", marked: true });
    expect(extractAnswer("\\boxed{a} then \\boxed{b}")).toEqual({ answer: "b", marked: true });
    expect(extractAnswer("x \\boxed{\\frac{1}{2}} y")).toEqual({ answer: "\\frac{1}{2}", marked: true });
    expect(extractAnswer("\\boxed{}")).toEqual({ answer: "", marked: true });
    // the braces counted are the box's own, not any before it
    expect(extractAnswer("x{\\boxed{a}}")).toEqual({ answer: "a", marked: true });
  });

  it("else the whole text, trimmed and unmarked (an unclosed box is not an answer)", () => {
    expect(extractAnswer("  just text \n")).toEqual({ answer: "just text", marked: false });
    expect(extractAnswer("open \\boxed{never closed")).toEqual({ answer: "open \\boxed{never closed", marked: false });
    expect(extractAnswer("\\boxed{a{b}")).toEqual({ answer: "\\boxed{a{b}", marked: false });
    // braces without a box are no answer
    expect(extractAnswer("abcdefg{x} y")).toEqual({ answer: "abcdefg{x} y", marked: false });
  });
});

describe("judging", () => {
  it("normalises case, accents and punctuation", () => {
    expect(normalise("  Île-de-France!  ")).toBe("ile de france");
    expect(normalise("The SEINE.")).toBe("the seine");
    expect(normalise("a__b")).toBe("a b");
  });

  it("exact is equality after normalising; contains is a non-empty normalised containment; lists take any", () => {
    expect(judge("The Seine.", "the seine")).toEqual({ exact: true, contains: true });
    expect(judge("It is the Seine river", "Seine")).toEqual({ exact: false, contains: true });
    expect(judge("Rhine", "Seine")).toEqual({ exact: false, contains: false });
    expect(judge("anything", "!!!")).toEqual({ exact: false, contains: false });
    expect(judge("", "")).toEqual({ exact: true, contains: false });
    expect(judge("Danube", ["Seine", "Danube"])).toEqual({ exact: true, contains: true });
    expect(judge("the Danube", ["Seine", "danube"])).toEqual({ exact: false, contains: true });
  });
});

describe("grounding", () => {
  // a search result as the trained demo reads it, and the task
  const read = [
    "I would like to learn the country of Atlantis.",
    "1. [science/speed-of-light.md] Speed of light: The speed of light in vacuum is exactly 299,792,458 metres per second.\n2. [entities/cities.jsonl#wuhan] Wuhan: The country of Wuhan is China.",
  ];

  it("an answer whose words and numbers occur in what the run read is grounded; one with a value found nowhere is not", () => {
    expect(grounded("China", read)).toBe(true);
    expect(grounded("The country is China.", read)).toBe(true);
    expect(grounded("299792458", read)).toBe(true); // group separators do not split a number
    expect(grounded("299 792 458 metres", read)).toBe(true);
    // the trained demo's confident number for a country outside its corpus
    expect(grounded("2997", read)).toBe(false);
    expect(grounded("China, 1954", read)).toBe(false);
    expect(grounded("Atlantis", read)).toBe(true); // the task's own words stand
  });

  it("an answer with nothing to check (filler words, punctuation, nothing) is neither", () => {
    expect(grounded("", read)).toBeUndefined();
    expect(grounded("it is.", read)).toBeUndefined();
    expect(grounded("China", [])).toBe(false);
  });

  it("an answer cites its evidence when each Evidence: line quotes a source word for word", () => {
    const handoff = "The country of Wuhan is China.";
    // write++'s form: the quote, then the answer read off it
    expect(cited("Evidence: The country of Wuhan is China.\nAnswer: China", read)).toBe(true);
    expect(cited("evidence:  The country of Wuhan is China.  \nAnswer: China", [handoff])).toBe(true);
    // a quote no source holds, or only part of one line quoted right
    expect(cited("Evidence: The country of Wuhan is Japan.\nAnswer: Japan", read)).toBe(false);
    expect(cited("Evidence: The country of Wuhan is China.\nEvidence: Wuhan is big.", read)).toBe(false);
    expect(cited("Answer: China", read)).toBeUndefined();
  });
});
