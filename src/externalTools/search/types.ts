export interface SearchHit {
  /** A corpus document id (readable with `read`) or the result's URL. */
  id: string;
  title: string;
  snippet: string;
  score: number;
  url?: string;
}

/** One place search results come from: the embedded index or a web search API. */
export interface SearchBackend {
  readonly name: string;
  search(query: string, topK: number, signal?: AbortSignal): Promise<SearchHit[]>;
}

/** The backend could not answer (down, timing out, refusing): a clear error the model and client can read. */
export class SearchBackendError extends Error {
  constructor(
    readonly backend: string,
    reason: string,
  ) {
    super(`search backend ${backend} is unavailable: ${reason}`);
    this.name = "SearchBackendError";
  }
}
