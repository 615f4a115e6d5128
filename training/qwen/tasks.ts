/**
 * The oracle's tasks for the Qwen capability library: a question of the library's files with what the oracle needs
 * to play it (`OracleTarget`: each hop's query and document, the bridge, the answer), under a policy.
 */
import type { LocalIndex } from "../../src/externalTools/search/LocalIndex.js";
import type { OracleTarget } from "../pipeline/OracleDriver.js";
import { hopQueries, indexId } from "./queries.js";
import type { Question } from "./questions.js";

export interface QuestionTask {
  id: string;
  question: string;
  answer: string;
  target: OracleTarget;
}

/** The question's target, or undefined when a hop finds its document with no query (it is left out). */
export async function questionTask(index: LocalIndex, q: Question): Promise<QuestionTask | undefined> {
  const queries = await hopQueries(index, q);
  if (!queries) return undefined;
  return {
    id: q.id,
    question: q.question,
    answer: q.answer,
    target: {
      hops: queries.map((search, hop) => ({ ...search, document: indexId(q.documents[hop]!) })),
      answer: q.answer,
      ...(q.bridge !== undefined ? { bridge: q.bridge } : {}),
    },
  };
}
