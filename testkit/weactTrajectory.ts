import { join } from "node:path";
import type { ChatTurn, Conversation, FunctionSpec } from "../src/engine/index.js";
import { loadManifest } from "../src/library/manifest.js";
import { PACKAGE_ROOT } from "../src/paths.js";
import { weightFunctions } from "../src/library/weightActions.js";

/** The capability library of models/gemma3: its aliases, descriptions and load/offload texts. */
export const GEMMA3_CAPABILITIES = loadManifest(join(PACKAGE_ROOT, "models", "gemma3", "manifest.json")).filter(
  (e) => !e.merge,
);

/** The external tool a trajectory calls, documented as the default server documents search (query, top_k). */
const SEARCH: FunctionSpec = {
  description: "Search the document corpus. Returns the top results with their ids, titles and snippets.",
  parameters: {
    type: "object",
    properties: {
      query: { type: "string", description: "What to look for." },
      top_k: { type: "integer", minimum: 1, maximum: 10, default: 5 },
    },
    required: ["query"],
  },
};

/**
 * A whole WeAct hard run as the harness's history holds it (plan -> search -> write over models/gemma3's
 * capabilities): each load answered with the capability's activation text, each offload with its handoff and the
 * release text, a search call and its result, then the base's answer. `query` and `result` replace the search's.
 */
export function weactTrajectory(system: string, search: { query?: string; result?: string } = {}): Conversation {
  const entry = (alias: string) => GEMMA3_CAPABILITIES.find((e) => e.alias === alias)!;
  const load = (alias: string): ChatTurn => ({
    role: "assistant",
    text: "",
    calls: [{ name: "load_lora", arguments: { adapter: alias }, result: entry(alias).activation ?? `${alias} loaded` }],
  });
  const offload = (alias: string, text: string, handoff: string): ChatTurn => ({
    role: "assistant",
    text,
    calls: [{ name: "offload_lora", arguments: { handoff }, result: entry(alias).release ?? `${alias} released` }],
  });
  const turns: ChatTurn[] = [
    { role: "system", text: system },
    { role: "user", text: "What is the population of Ashford?" },
    load("plan"),
    offload("plan", "Plan: search for Ashford's population, then write the answer.", "Search: population of Ashford."),
    load("search"),
    {
      role: "assistant",
      text: "",
      calls: [
        {
          name: "search",
          arguments: { query: search.query ?? "Ashford population", top_k: 3 },
          result:
            search.result ??
            '[{"id": "ashford", "title": "Ashford", "snippet": "Ashford is a town of 74,204 people."}]',
        },
      ],
    },
    offload("search", "", "Evidence: Ashford is a town of 74,204 people."),
    load("write"),
    offload("write", "Answer: 74,204", "Answer: 74,204"),
    { role: "assistant", text: "The population of Ashford is 74,204." },
  ];
  return { turns, functions: { ...weightFunctions(GEMMA3_CAPABILITIES), search: SEARCH } };
}
