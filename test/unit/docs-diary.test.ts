import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

/**
 * Docs are for users and maintainers, not a lab notebook: a figure is stated with the command that reproduces it
 * ("`npm run train-demo` takes about 55 minutes of training on 2 cores"), never by when or in which run it was
 * measured. This fails on a dated run diary in README.md or docs/: a date, "the last run", "the first run took",
 * "issue #39's run", "took 5.1 and 5.3 s". (The package root from this file, so that the check reads only the docs.)
 */
const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const README_MAX_LINES = 200;

/**
 * ISO dates that are not runs: the MCP protocol revisions. A date that names something else that is not a run (a
 * model's release, say) goes here too.
 */
const ALLOWED_DATES = new Set(["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"]);

const ISO_DATE = /(?<![\w./-])(?:19|20)\d{2}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])(?![\w-])/g;
/** A URL's text (a dated path, a query) is its own business: blanked out before the rules run, columns kept. */
const URL_TEXT = /\bhttps?:\/\/[^\s)>\]"'`]+|\]\([^)\s]*\)|<[a-z][\w+.-]*:[^>\s]*>/gi;

/** The diary phrasings, each with what it names. Case-insensitive; a phrase may run across a line break. */
const DIARY_PHRASES: readonly { rule: string; pattern: RegExp }[] = [
  {
    rule: "a run named by when it happened",
    // "the last run, 2026-12-04", "in the latest run"; not "the last run's trace" nor "the last run of a session"
    pattern: /\bthe\s+(?:last|latest|most\s+recent)\s+(?:run|measurement)\b(?!['’]s\b|\s+of\b)/gi,
  },
  {
    rule: "a run's own figure",
    // "the first run took 46 min", "the second measurement gave", "the previous training took"
    pattern:
      /\b(?:first|second|third|last|latest|previous|earlier|other)\s+(?:run|measurement|training)\s+(?:took|lasted|trained|ran|gave|scored|measured)\b/gi,
  },
  {
    rule: "an earlier run's figure",
    // "the one before it trained in 45"
    pattern:
      /\bthe\s+(?:one|run|library|model)\s+before\s+(?:it|that|this)\s+(?:took|lasted|trained|ran|gave|scored)\b/gi,
  },
  {
    rule: "an issue's run",
    // "issue #39's run", "issue #39's figures", "#39's targets"; not "llama.cpp #26207" nor "(#42125)"
    pattern:
      /\bissue\s+#\d+['’]s\b|#\d+['’]s\s+(?:runs?|figures?|numbers?|measurements?|tables?|targets?|results?|timings?)\b/gi,
  },
  {
    rule: "a run named by its occasion",
    // "(the run of 2026-12-04", "(the run of issue #39"; not "(the run of a task"
    pattern:
      /\(the\s+(?:run|measurement|training)\s+(?:of|on|from)\b(?!\s+(?:a|an|the|each|every|one|its|this|that)\b)/gi,
  },
  {
    rule: "a time a run took",
    // "took 5.1 and 5.3 s", "took 220 ms", "took 46 min 38 s"; not "took 3 turns"
    pattern:
      /\btook\s+(?:(?:about|around|roughly|only|just)\s+)?\d[\d.,]*(?:\s*(?:and|or|to|-|–)\s*\d[\d.,]*)?\s*(?:ms|s|secs?|seconds?|mins?|minutes?|h|hours?)\b/gi,
  },
];

const FIX =
  'state the figure with the command that reproduces it (e.g. "`npm run train-demo` takes about 55 minutes on 2 cores"), not when or in which run it was measured';

/** The diary findings in one document's text, each as "file:line: what (the text): the fix", in text order. */
function diaryFindings(file: string, text: string): string[] {
  // URLs blanked and line breaks made spaces: the same length, so an index still gives the line
  const scanned = text.replace(URL_TEXT, (url) => " ".repeat(url.length)).replaceAll("\n", " ");
  const lineAt = (index: number) => text.slice(0, index).split("\n").length;
  const found: { index: number; message: string }[] = [];
  for (const hit of scanned.matchAll(ISO_DATE))
    if (!ALLOWED_DATES.has(hit[0])) found.push({ index: hit.index, message: `a date ("${hit[0]}")` });
  for (const { rule, pattern } of DIARY_PHRASES)
    for (const hit of scanned.matchAll(pattern))
      found.push({ index: hit.index, message: `${rule} ("${hit[0].replace(/\s+/g, " ")}")` });
  return found
    .sort((a, b) => a.index - b.index)
    .map(({ index, message }) => `${file}:${lineAt(index)}: ${message}: ${FIX}`);
}

/** README.md and every Markdown file under docs/, as paths relative to the package root. */
function documents(): string[] {
  const docs = readdirSync(join(ROOT, "docs"), { recursive: true, encoding: "utf8" })
    .filter((f) => f.endsWith(".md"))
    .map((f) => join("docs", f).split("\\").join("/"))
    .sort();
  return ["README.md", ...docs];
}

describe("docs carry no dated run diaries", () => {
  it("README.md and docs/**/*.md state each figure with its command, not the date or run it came from", () => {
    const files = documents();
    expect(files).toContain("docs/TRAINING.md");
    const found = files.flatMap((f) => diaryFindings(f, readFileSync(join(ROOT, f), "utf8")));
    expect(found).toEqual([]);
  });

  it("catches a planted diary line of each kind, naming file:line and the fix", () => {
    const planted = [
      "`npm run train-demo` takes 55 minutes (the last run, 2026-12-04; the one before it trained in 45).",
      "**The library as shipped** (retrained on 2026-12-04 so that its loop ends):",
      "In the latest run every adapter predicts 100% of its targets.",
      "The first run took 46 min 38 s on 2 cores.",
      "Before the rounds (issue #39's run on the demo model) the local engine did 2.39 turns per second.",
      "then issue #39's targets per local binding",
      "That run's local rows came before the rounds (#39's figures).",
      "Hard scores 100% (the run of 4 December).",
      'End to end, `weact-mcp run "..."` took 5.1 and 5.3 s on the prebuilt binding.',
      "the switch took 220 ms, then 175 ms",
      "The whole file took 27\nminutes on 2 cores.",
    ];
    for (const line of planted) {
      const found = diaryFindings("docs/PLANTED.md", `# Planted\n\n${line}\n`);
      expect(found.length, line).toBeGreaterThan(0);
      for (const message of found) {
        expect(message).toMatch(/^docs\/PLANTED\.md:3: /); // the line the diary starts on
        expect(message).toContain("state the figure with the command that reproduces it");
      }
    }
  });

  it("passes protocol revisions, dates inside URLs and ordinary sentences", () => {
    const fine = [
      "The server speaks MCP 2025-11-25 and accepts 2025-06-18, 2025-03-26 and 2024-11-05 clients.",
      "See [the spec](https://modelcontextprotocol.io/specification/2025-01-01/basic) and <https://example.com/2023-05-17>.",
      "`npm run train-demo` takes about 16 minutes for the data and 55 minutes for training on 2 cores.",
      "`npm run train:gemma -- --step continue --tasks 40 --computation 60` takes about 31 minutes on 2 cores.",
      "A task that is empty is refused before the first run.",
      "`weact://traces/latest` is the last run's trace; the last run of a session ends it.",
      "Bugs of that kind: vLLM #30931, #42125 and SGLang #24638 (llama.cpp #26207).",
      "`run_task` returns the answer (the run of a task under one policy) and its trace.",
      "The plan stage took 3 turns; node-llama-cpp 3.21.1; Gemma 3 270M; SHA-256 a5fd3b62230aa5ec.",
      "The sizes 1024-64-32 and the id 12345-06-07 are not dates.",
    ];
    for (const line of fine) expect(diaryFindings("docs/FINE.md", line), line).toEqual([]);
  });

  it(`README.md is a front door of at most ${README_MAX_LINES} lines (reference and results live in docs/)`, () => {
    const lines = readFileSync(join(ROOT, "README.md"), "utf8").trimEnd().split("\n").length;
    expect(lines).toBeLessThanOrEqual(README_MAX_LINES);
  });
});
