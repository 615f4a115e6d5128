/**
 * The search queries the oracle's search stage runs for a question of the Qwen capability library: one per hop, each
 * made of the question's own words and checked against the default corpus's index, so that what the capability
 * learns to search for is what finds the document. The question files give the documents and the bridge; the oracle
 * cannot parse a relation and an entity out of an everyday wording, as it does for the demo's template.
 */
import type { LocalIndex } from "../../src/externalTools/search/LocalIndex.js";
import type { Question } from "./questions.js";

/** How far down the results a hop's document may rank for its query to count (the search tool's default top_k). */
export const QUERY_TOP_K = 3;

/** Words a query leaves out: they occur everywhere and name nothing. */
const STOPWORDS = new Set(
  (
    "a an the is are was were be been of in on at to and or it its by for from as with what which who whom whose " +
    "where when how many much long tall high deep big do does did you know any idea name give tell me i im trying " +
    "remember quick question please could would can hey that this there their they them one ever first"
  ).split(" "),
);

const wordsOf = (s: string) => s.toLowerCase().match(/[\p{L}\p{N}]+(?:['’-][\p{L}\p{N}]+)*/gu) ?? [];

/** The index id of a question's document reference (`corpus/` dropped: the index is of the corpus folder). */
export const indexId = (ref: string) => ref.replace(/^corpus\//, "");

/** The question's content words, in its order, each once. */
export const contentWords = (question: string) =>
  [...new Set(wordsOf(question).filter((w) => !STOPWORDS.has(w)))].join(" ");

/**
 * The question's content words that its document contains (title or text), in the question's order, each once,
 * led by `lead` (a two-hop question's bridge).
 */
function draft(question: string, documentText: string, lead = ""): string {
  const inDocument = new Set(wordsOf(documentText));
  const picked = wordsOf(question).filter((w) => !STOPWORDS.has(w) && inDocument.has(w));
  return [...new Set([...wordsOf(lead), ...picked])].join(" ");
}

/** One hop's query: the drafted words if they find the document, else its title, else none. */
async function hopQuery(index: LocalIndex, candidates: string[], id: string): Promise<string | undefined> {
  for (const query of candidates.filter((c) => c.trim())) {
    const hits = await index.search(query, QUERY_TOP_K);
    if (hits.some((h) => h.id === id)) return query;
  }
  return undefined;
}

/** A hop's search: `query` finds its document; `tries` are run before it and do not. */
export interface HopSearch {
  query: string;
  tries: string[];
}

/**
 * The searches of a question's hops, in order, each query ranking its document in the top QUERY_TOP_K of `index`;
 * undefined when a hop finds its document with no query (the question is left out of training). The first hop
 * searches first with all of the question's content words, what a reader who has not seen the document would write
 * (and what the served stage writes); when that misses the document it is kept as a try, and the words the document
 * holds follow it: the stage learns to search again when its results do not answer.
 */
export async function hopQueries(index: LocalIndex, q: Question): Promise<HopSearch[] | undefined> {
  const searches: HopSearch[] = [];
  for (const [hop, ref] of q.documents.entries()) {
    const id = indexId(ref);
    const document = index.document(id);
    if (!document) return undefined;
    const lead = hop > 0 ? (q.bridge ?? "") : "";
    const text = `${document.title} ${document.text}`;
    const guess = hop === 0 ? contentWords(q.question) : "";
    const query = await hopQuery(index, [guess, draft(q.question, text, lead), lead, document.title], id);
    if (query === undefined) return undefined;
    searches.push({ query, tries: guess && guess !== query ? [guess] : [] });
  }
  return searches;
}
