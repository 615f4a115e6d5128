import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { DegenerationWatch } from "../../src/harness/degenerate.js";
import { PACKAGE_ROOT } from "../../src/paths.js";

/**
 * The verdicts on texts of known kind: loops the demo models really wrote, and prose and code that must pass. The run's
 * finish over a real server is test/e2e/trained-demo.test.ts.
 */
const judgeAlone = (text: string, calls: unknown[] = []) => new DegenerationWatch().judge("1:plan", { text, calls });

/** The trained demo's plan adapter on off-pattern wording (the start of a 511-token turn). */
const TRAINED_LOOP = `Plan: search for the birth": "offload_lora", ${'"arguments": {"handoff": "Look up the birth": "offload_lora", '.repeat(12)}`;
/** The random demo model: a loop of glued characters, then one of byte garbage around vertical tabs. */
const GLUED_LOOP = `\u0000\ufffd\u001c\ufffd${"S9".repeat(46)}`;

describe("degenerate output", () => {
  it("a turn that loops is repetition, spaced, glued or garbage alike, with the share that repeats", () => {
    for (const text of [TRAINED_LOOP, GLUED_LOOP, `${"=".repeat(95)}`, "heldanalysis ".repeat(20)])
      expect(judgeAlone(text), JSON.stringify(text.slice(0, 40))).toMatchObject({
        rule: "repetition",
        detail: expect.stringMatching(
          /^\d+ % of the turn's \d+ runs of 16 characters repeat one earlier in the same turn$/,
        ),
      });
  });

  it("prose, code, a markdown list and a short answer are not degenerate", () => {
    const docs = readFileSync(join(PACKAGE_ROOT, "docs", "harness.md"), "utf8");
    const code = readFileSync(join(PACKAGE_ROOT, "src", "harness", "stage.ts"), "utf8");
    const texts = [
      ...docs.split(/\n\n+/).filter((p) => p.length > 200),
      code,
      "The evidence:\n- Wuhan is a city in China.\n- It lies on the Yangtze.\n- It is the capital of Hubei.\nAnswer: China",
      "Answer: 1954",
      "Answer: 1954 ".repeat(4), // a short turn is never judged, however it repeats
    ];
    for (const text of texts) expect(judgeAlone(text), text.slice(0, 60)).toBeUndefined();
  });

  it("a turn without a call that repeats what its stage wrote before is no_progress; a call, or another stage, is progress", () => {
    const text =
      "Plan: find the river that flows through Paris, then read the page about it and write the answer with its name.";
    const watch = new DegenerationWatch();
    expect(watch.judge("1:plan", { text, calls: [] })).toBeUndefined();
    // the same words with a call: it acts, so it moved on
    expect(watch.judge("1:plan", { text, calls: [{ name: "search" }] })).toBeUndefined();
    expect(watch.judge("2:search", { text, calls: [] })).toBeUndefined();
    expect(watch.judge("1:plan", { text: `${text} `, calls: [] })).toMatchObject({
      rule: "no_progress",
      detail: expect.stringMatching(/^100 % of the turn's \d+ runs of 16 characters were written by earlier turns/),
    });
    // a turn that adds its own half is new information
    expect(
      watch.judge("1:plan", {
        text: "Plan: find the river that flows through Paris. Then check the city's page for its bridges and quays.",
        calls: [],
      }),
    ).toBeUndefined();
  });
});
