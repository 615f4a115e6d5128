import { z } from "zod";
import type { ExternalTool } from "../ExternalTool.js";
import { SearchBackendError, type SearchBackend } from "./types.js";

export function searchTool(
  backend: SearchBackend,
  opts: { defaultTopK: number; maxTopK: number; timeoutMs: number; retries: number },
): ExternalTool {
  return {
    name: "search",
    title: "Search",
    // the local index is this server's own corpus; the other backends are web search APIs
    openWorld: backend.name !== "local",
    description: `Search for documents relevant to a query (backend: ${backend.name}). Returns ranked results with an id (readable with read), title, snippet and score.`,
    input: {
      query: z.string().min(1).max(1000).describe("What to look for."),
      top_k: z
        .number()
        .int()
        .min(1)
        .max(opts.maxTopK)
        .optional()
        .describe(`Results to return (default ${opts.defaultTopK}).`),
    },
    output: {
      backend: z.string(),
      results: z.array(
        z.object({
          id: z.string(),
          title: z.string(),
          snippet: z.string(),
          score: z.number(),
          url: z.string().optional(),
        }),
      ),
    },
    // no maxLength: node-llama-cpp expands it into a grammar that slows sampling several-fold
    // minLength: the grammar never writes a query the tool refuses (an empty one)
    modelParameters: { type: "object", properties: { query: { type: "string", minLength: 1 } } },
    // the tool's own limit covers every attempt and the backoff between them
    timeoutMs: (opts.retries + 1) * opts.timeoutMs + 200 * 2 ** opts.retries + 1000,
    async run(args, signal) {
      const query = String(args.query);
      try {
        const results = await backend.search(query, (args.top_k as number | undefined) ?? opts.defaultTopK, signal);
        const forModel = results.length
          ? results.map((r, i) => `${i + 1}. [${r.id}] ${r.title}: ${r.snippet}`).join("\n")
          : `No results for "${query}".`;
        return { ok: true, structured: { backend: backend.name, results }, forModel };
      } catch (err) {
        if (err instanceof SearchBackendError) return { ok: false, error: err.message };
        throw err;
      }
    },
  };
}
