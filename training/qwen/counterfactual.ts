/**
 * The counterfactual set of the Qwen library: the default corpus with every held-out answer edited in the document it
 * is read from, so that a right answer is one read, not remembered. A number becomes another number (a year moves by
 * seven years, a day of the month by a few days, any other number by about a tenth); a name or place becomes another
 * held-out answer of the same form that its document never states (nor another of its edits). A question whose edited document still states its
 * original answer, in any accepted spelling, is left out.
 */
import { cpSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { DEFAULT_CORPUS } from "../../src/paths.js";
import { spanAt } from "../pipeline/OracleDriver.js";
import { indexId } from "./queries.js";
import { evalTasks, type Question } from "./questions.js";

const NUMBER = /\d{1,3}(?:,\d{3})+|\d+/g;

/** A number as the edited corpus states it: the same format (group commas), another value. */
function editNumber(text: string): string {
  const grouped = text.includes(",");
  const n = Number(text.replace(/,/g, ""));
  const year = !grouped && text.length === 4 && n >= 1000 && n <= 2100;
  const edited = year ? n + 7 : n < 32 ? (n + 3 <= 28 ? n + 3 : n - 5) : n + Math.round(n * 0.1) + 3;
  return grouped ? edited.toLocaleString("en-US") : String(edited);
}

/** Every number of a span edited, the words kept ("29 May 1953" -> "24 May 1960"). */
const editNumbers = (span: string) => span.replace(NUMBER, editNumber);

/** Whole-word occurrences of any key of `edits` replaced at once (longest first): an edit is never edited again. */
function replaceAll(text: string, edits: ReadonlyMap<string, string>): string {
  const keys = [...edits.keys()].sort((a, b) => b.length - a.length);
  if (!keys.length) return text;
  const escaped = keys.map((k) => k.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
  const pattern = new RegExp(`(?<![\\p{L}\\p{N}])(?:${escaped.join("|")})(?![\\p{L}\\p{N}])`, "gu");
  return text.replace(pattern, (m) => edits.get(m) ?? m);
}

/** The corpus file a question's answer is read from (its last document, without a record's `#id`). */
const answerFile = (q: Question) => indexId(q.documents.at(-1)!).replace(/#.*$/, "");

/**
 * Each question's counterfactual answer: its numbers edited, or else the next answer of its form (in file order) that
 * its document never states, so that the edit cannot be confused with anything the document already said.
 */
export function counterfactualAnswers(questions: readonly Question[]): Map<string, string> {
  const out = new Map<string, string>();
  const named = new Map<string, Question[]>();
  for (const q of questions) {
    if (/\d/.test(q.answer)) out.set(q.id, editNumbers(q.answer));
    else named.set(q.form, [...(named.get(q.form) ?? []), q]);
  }
  const chosen = new Map<string, Set<string>>();
  for (const group of named.values())
    group.forEach((q, i) => {
      const text = readFileSync(join(DEFAULT_CORPUS, answerFile(q)), "utf8");
      // two answers of one document never become the same value
      const taken = chosen.get(answerFile(q)) ?? new Set<string>();
      const others = [...group.slice(i + 1), ...group.slice(0, i)];
      const other = others.find((o) => spanAt(text, o.answer) < 0 && !taken.has(o.answer)) ?? others[0]!;
      out.set(q.id, other.answer);
      chosen.set(answerFile(q), taken.add(other.answer));
    });
  return out;
}

/**
 * Writes the edited corpus to `dir` (a copy of the default corpus, each answer file edited) and returns the questions
 * it keeps, with their counterfactual answers, as eval tasks.
 */
export function writeCounterfactual(questions: readonly Question[], dir: string) {
  rmSync(dir, { recursive: true, force: true });
  cpSync(DEFAULT_CORPUS, dir, { recursive: true });
  const answers = counterfactualAnswers(questions);
  const byFile = new Map<string, Map<string, string>>();
  for (const q of questions) {
    const edits = byFile.get(answerFile(q)) ?? new Map<string, string>();
    edits.set(q.answer, answers.get(q.id)!);
    // a number's other spellings move with it ("2850" beside "2,850")
    for (const a of q.accept) if (/\d/.test(a) && !edits.has(a)) edits.set(a, editNumbers(a));
    byFile.set(answerFile(q), edits);
  }
  for (const [file, edits] of byFile) {
    const path = join(dir, file);
    writeFileSync(path, replaceAll(readFileSync(path, "utf8"), edits));
  }
  const kept = questions.filter((q) => {
    const text = readFileSync(join(dir, answerFile(q)), "utf8");
    const was = [q.answer, ...q.accept].filter((a) => a !== answers.get(q.id));
    return spanAt(text, answers.get(q.id)!) >= 0 && was.every((a) => spanAt(text, a) < 0);
  });
  return evalTasks(kept.map((q) => ({ ...q, answer: answers.get(q.id)!, accept: [] })));
}
