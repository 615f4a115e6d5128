import { z } from "zod";
import type { SearchBackend, SearchHit } from "../types.js";
import { SearchBackendError } from "../types.js";
import { getJson, rankScore } from "./httpJson.js";

/** The subset of SearXNG's `format=json` answer that is used. */
const SearxngResponse = z.object({
  results: z.array(
    z
      .object({
        url: z.string(),
        title: z.string().default(""),
        content: z.string().default(""),
        score: z.number().optional(),
      })
      .passthrough(),
  ),
});

/** A self-hosted SearXNG instance (its JSON format must be enabled in settings.yml: search.formats). */
export class SearxngBackend implements SearchBackend {
  readonly name = "searxng";
  constructor(private readonly opts: { url: string; timeoutMs: number; retries: number }) {}

  async search(query: string, topK: number, signal?: AbortSignal): Promise<SearchHit[]> {
    const url = new URL("search", this.opts.url.endsWith("/") ? this.opts.url : `${this.opts.url}/`);
    url.searchParams.set("q", query);
    url.searchParams.set("format", "json");
    const body = SearxngResponse.safeParse(
      await getJson(url, { backend: this.name, timeoutMs: this.opts.timeoutMs, retries: this.opts.retries, signal }),
    );
    if (!body.success)
      throw new SearchBackendError(this.name, "its answer is not SearXNG's JSON format (is format=json enabled?)");
    return body.data.results
      .slice(0, topK)
      .map((r, i) => ({ id: r.url, url: r.url, title: r.title, snippet: r.content, score: r.score ?? rankScore(i) }));
  }
}
