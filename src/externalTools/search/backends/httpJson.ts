import { setTimeout as sleep } from "node:timers/promises";
import { SearchBackendError } from "../types.js";

export interface HttpJsonOptions {
  backend: string;
  headers?: Record<string, string>;
  timeoutMs: number;
  /** Extra attempts after the first, for network errors, 429 and 5xx (never for other 4xx). */
  retries: number;
  signal?: AbortSignal;
}

class Retryable extends Error {}

/** GET a JSON API with a per-attempt timeout and exponential backoff; failures become SearchBackendError. */
export async function getJson(url: URL, opts: HttpJsonOptions): Promise<unknown> {
  let lastReason = "";
  for (let attempt = 0; attempt <= opts.retries; attempt++) {
    if (attempt > 0) await sleep(200 * 2 ** (attempt - 1), undefined, { signal: opts.signal });
    const signal = opts.signal
      ? AbortSignal.any([opts.signal, AbortSignal.timeout(opts.timeoutMs)])
      : AbortSignal.timeout(opts.timeoutMs);
    try {
      const res = await fetch(url, { headers: { accept: "application/json", ...opts.headers }, signal });
      if (res.status === 429 || res.status >= 500) throw new Retryable(`HTTP ${res.status} ${res.statusText}`);
      if (!res.ok)
        throw new SearchBackendError(opts.backend, `HTTP ${res.status} ${res.statusText} from ${url.origin}`);
      return await res.json();
    } catch (err) {
      if (err instanceof SearchBackendError) throw err;
      if (opts.signal?.aborted) throw err;
      const e = err as Error;
      lastReason =
        e.name === "TimeoutError"
          ? `no answer within ${opts.timeoutMs} ms`
          : e instanceof Retryable
            ? e.message
            : `${e.message}${(e.cause as Error | undefined)?.message ? ` (${(e.cause as Error).message})` : ""}`;
    }
  }
  throw new SearchBackendError(opts.backend, `${lastReason} from ${url.origin} after ${opts.retries + 1} attempts`);
}

/** Rank-based scores for APIs that return none: 1, 1/2, 1/3, ... */
export const rankScore = (rank: number) => Number((1 / (rank + 1)).toFixed(4));
