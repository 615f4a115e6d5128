import { z } from "zod";
import type { SearchBackend, SearchHit } from "../types.js";
import { SearchBackendError } from "../types.js";
import { getJson, rankScore } from "./httpJson.js";

const BraveResponse = z.object({
  web: z
    .object({
      results: z.array(
        z.object({ url: z.string(), title: z.string().default(""), description: z.string().default("") }).passthrough(),
      ),
    })
    .optional(),
});

/** The Brave Search web API (keyed: X-Subscription-Token). */
export class BraveBackend implements SearchBackend {
  readonly name = "brave";
  constructor(private readonly opts: { url: string; apiKey: string; timeoutMs: number; retries: number }) {}

  async search(query: string, topK: number, signal?: AbortSignal): Promise<SearchHit[]> {
    const url = new URL("res/v1/web/search", this.opts.url.endsWith("/") ? this.opts.url : `${this.opts.url}/`);
    url.searchParams.set("q", query);
    url.searchParams.set("count", String(Math.min(topK, 20)));
    const raw = await getJson(url, {
      backend: this.name,
      headers: { "x-subscription-token": this.opts.apiKey },
      timeoutMs: this.opts.timeoutMs,
      retries: this.opts.retries,
      signal,
    });
    const body = BraveResponse.safeParse(raw);
    if (!body.success) throw new SearchBackendError(this.name, "its answer is not the Brave web search format");
    return (body.data.web?.results ?? []).slice(0, topK).map((r, i) => ({
      id: r.url,
      url: r.url,
      title: r.title,
      snippet: r.description.replace(/<[^>]+>/g, ""),
      score: rankScore(i),
    }));
  }
}
