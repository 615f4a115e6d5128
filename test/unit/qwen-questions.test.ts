import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { DEFAULT_CORPUS, PACKAGE_ROOT } from "../../src/paths.js";
import { readTaskFile } from "../../src/harness/eval/TaskFile.js";
import { LocalIndex } from "../../src/externalTools/search/LocalIndex.js";
import { createLogger } from "../../src/log.js";
import { spanAt } from "../../training/pipeline/OracleDriver.js";
import { writeCounterfactual } from "../../training/qwen/counterfactual.js";
import { drawQuestions } from "../../training/qwen/libraryData.js";
import { SeededRandom } from "../../src/demo/random.js";
import { contentWords, hopQueries, indexId, QUERY_TOP_K } from "../../training/qwen/queries.js";
import { tempDir } from "../helpers/files.js";
import {
  evalTasks,
  HELD_OUT_SHA256,
  readQuestions,
  recordQuestions,
  type Question,
} from "../../training/qwen/questions.js";

/**
 * The held-out questions of the Qwen capability library (training/qwen/questions), fixed before any training: each
 * answer is a span of the document it cites, read from the default corpus, and the withheld documents are named.
 */
const DIR = join(PACKAGE_ROOT, "training", "qwen", "questions");
const FORMS = ["what", "who", "where", "when", "how_many", "two_hop"] as const;

interface HeldOut {
  id: string;
  form: (typeof FORMS)[number];
  question: string;
  answer: string;
  accept: string[];
  documents: string[];
  bridge?: string;
  withheld: boolean;
}

const heldOutText = readFileSync(join(DIR, "held-out.jsonl"), "utf8");
const heldOut = heldOutText
  .split("\n")
  .filter((l) => l.trim())
  .map((l) => JSON.parse(l) as HeldOut);
const withheld = (JSON.parse(readFileSync(join(DIR, "withheld.json"), "utf8")) as { documents: string[] }).documents;

/** A cited document's text: a prose file whole, or one record (`path#id`) of a JSONL file. */
function text(ref: string): string {
  const [path, id] = ref.split("#") as [string, string | undefined];
  const file = readFileSync(join(PACKAGE_ROOT, path), "utf8");
  if (!path.endsWith(".jsonl")) return file;
  const record = file
    .split("\n")
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l) as { id: string; text: string })
    .find((r) => r.id === id);
  if (!record) throw new Error(`${ref}: no such record`);
  return record.text;
}

describe("the Qwen library's held-out questions", () => {
  it("answer each question with a span of the document it cites; a two-hop question's bridge is in its first", () => {
    for (const q of heldOut) {
      expect(text(q.documents.at(-1)!), `${q.id}: "${q.answer}"`).toContain(q.answer);
      if (q.form === "two_hop") {
        expect(q.documents, q.id).toHaveLength(2);
        expect(text(q.documents[0]!), `${q.id}: bridge "${q.bridge}"`).toContain(q.bridge);
        expect(text(q.documents[0]!), `${q.id}: one search would do`).not.toContain(q.answer);
      } else expect(q.documents, q.id).toHaveLength(1);
    }
  });

  it("hold at least 8 questions of every form and 16 on the withheld documents, each flagged, none asked twice", () => {
    for (const form of FORMS) expect(heldOut.filter((q) => q.form === form).length, form).toBeGreaterThanOrEqual(8);
    for (const q of heldOut)
      expect(q.withheld, q.id).toBe(q.documents.some((d) => withheld.includes(d.split("#")[0]!)));
    expect(heldOut.filter((q) => q.withheld).length).toBeGreaterThanOrEqual(16);
    const words = (s: string) =>
      s
        .toLowerCase()
        .replace(/[^a-z0-9]+/g, " ")
        .trim();
    expect(new Set(heldOut.map((q) => words(q.question))).size).toBe(heldOut.length);
    expect(new Set(heldOut.map((q) => q.id)).size).toBe(heldOut.length);
    expect(withheld.every((d) => !d.endsWith(".jsonl"))).toBe(true);
  });

  it("are also an eval task file (eval-held-out.jsonl) that `weact-mcp eval` reads, the withheld ones a group", () => {
    const tasks = readTaskFile(join(DIR, "eval-held-out.jsonl"));
    expect(tasks).toEqual(evalTasks(heldOut));
    expect(tasks.filter((t) => t.group === "withheld-documents")).toHaveLength(
      heldOut.filter((q) => q.withheld).length,
    );
  });

  it("are the set committed before training (its SHA-256 is in the library's training record)", () => {
    // the hash the training record will cite; a change here is a change of the held-out set
    expect(createHash("sha256").update(heldOutText).digest("hex")).toBe(HELD_OUT_SHA256);
  });
});

describe("the Qwen library's training questions", () => {
  const training = (): Question[] => [
    ...readQuestions("records.jsonl"),
    ...(existsSync(join(DIR, "prose.jsonl")) ? readQuestions("prose.jsonl") : []),
  ];

  it("are the generator's (records.jsonl) and answer each question with a span of what it cites", () => {
    expect(readQuestions("records.jsonl")).toEqual(recordQuestions(heldOut));
    for (const q of training()) {
      expect(text(q.documents.at(-1)!), `${q.id}: "${q.answer}"`).toContain(q.answer);
      if (q.bridge !== undefined) expect(text(q.documents[0]!), `${q.id}: bridge`).toContain(q.bridge);
    }
  });

  it("never cite a withheld document, ask a held-out fact or use a held-out wording", () => {
    const words = (s: string) =>
      s
        .toLowerCase()
        .replace(/[^a-z0-9]+/g, " ")
        .trim();
    const heldFacts = new Set(heldOut.map((q) => `${q.documents.at(-1)}|${q.answer}`));
    const heldWords = new Set(heldOut.map((q) => words(q.question)));
    for (const q of training()) {
      expect(
        q.documents.filter((d) => withheld.includes(d.split("#")[0]!)),
        q.id,
      ).toEqual([]);
      expect(heldFacts.has(`${q.documents.at(-1)}|${q.answer}`), `${q.id} asks a held-out fact`).toBe(false);
      expect(heldWords.has(words(q.question)), `${q.id} is worded as a held-out question`).toBe(false);
    }
  });
});

describe("the search queries the oracle runs for the training questions", () => {
  it("come from each question's own words (a bridge leads a second hop's) and rank its document in the top 3; a first guess that misses is tried first", async () => {
    const index = LocalIndex.open(DEFAULT_CORPUS, join(tempDir(), "index.json"), createLogger("silent"));
    try {
      const questions = [...readQuestions("records.jsonl"), ...readQuestions("prose.jsonl")];
      let found = 0;
      let fromWords = 0;
      let retried = 0;
      for (const q of questions) {
        const searches = await hopQueries(index, q);
        if (!searches) continue;
        found++;
        expect(searches, q.id).toHaveLength(q.documents.length);
        for (const [hop, { query, tries }] of searches.entries()) {
          const id = indexId(q.documents[hop]!);
          const hits = await index.search(query, QUERY_TOP_K);
          expect(
            hits.map((h) => h.id),
            `${q.id}: "${query}"`,
          ).toContain(id);
          // a try is the question's content words, and misses the document (else it would be the query)
          for (const tried of tries) {
            expect(tried, q.id).toBe(contentWords(q.question));
            expect(
              (await index.search(tried, QUERY_TOP_K)).map((h) => h.id),
              `${q.id}: "${tried}"`,
            ).not.toContain(id);
          }
          if (hop > 0) expect(tries, q.id).toEqual([]);
        }
        // the second hop searches for what the first found
        if (q.bridge) expect(searches[1]!.query, q.id).toContain(q.bridge.toLowerCase().match(/[\p{L}\p{N}]+/u)![0]);
        if (searches[0]!.query !== index.document(indexId(q.documents[0]!))?.title) fromWords++;
        if (searches[0]!.tries.length > 0) retried++;
      }
      console.log(
        `queries: ${found} of ${questions.length} training questions find their documents (${fromWords} from the question's own words, the rest by the title; ${retried} after a first guess that missed)`,
      );
      expect(found / questions.length).toBeGreaterThan(0.9);
      // both kinds are in the data: the first guess that finds, and the one searched again
      expect(retried).toBeGreaterThan(0);
      expect(retried).toBeLessThan(found);
    } finally {
      index.close();
    }
  });
});

describe("the counterfactual set", () => {
  it("edits each kept answer in the document it is read from, leaving none of its spellings there", () => {
    const heldOut = readQuestions("held-out.jsonl");
    const dir = join(tempDir(), "corpus");
    const tasks = writeCounterfactual(heldOut, dir);
    expect(tasks.length).toBeGreaterThanOrEqual(60);
    for (const task of tasks) {
      const q = heldOut.find((h) => h.id === task.id)!;
      const file = q.documents
        .at(-1)!
        .replace(/^corpus\//, "")
        .replace(/#.*$/, "");
      const text = readFileSync(join(dir, file), "utf8");
      const [edited] = task.answer;
      expect(edited, q.id).not.toBe(q.answer);
      expect(spanAt(text, edited!), `${q.id}: ${edited} in ${file}`).toBeGreaterThanOrEqual(0);
      for (const was of [q.answer, ...q.accept]) expect(spanAt(text, was), `${q.id}: ${was} in ${file}`).toBe(-1);
    }
  });
});

describe("the library's training draw", () => {
  it("draws the asked number of questions in the mix of records and prose, one hop and two", () => {
    const drawn = drawQuestions(new SeededRandom(69), 64);
    expect(drawn).toHaveLength(64);
    expect(new Set(drawn.map((q) => q.id)).size).toBe(64);
    const prose = new Set(readQuestions("prose.jsonl").map((q) => q.id));
    const count = (inProse: boolean, twoHops: boolean) =>
      drawn.filter((q) => prose.has(q.id) === inProse && (q.form === "two_hop") === twoHops).length;
    // 35% one-hop records, 15% two-hop records, 35% one-hop prose, the rest two-hop prose
    expect([count(false, false), count(false, true), count(true, false), count(true, true)]).toEqual([22, 10, 22, 10]);
  });
});
