import { Semaphore } from "async-mutex";
import { EngineRequestError, EngineTimeoutError, EngineUnavailableError } from "../../../engine/index.js";

export interface EngineHttpOptions {
  /** The engine's base URL, e.g. http://127.0.0.1:8080. */
  url: string;
  /** How the engine is named in errors, e.g. "llama-server at http://127.0.0.1:8080". */
  label: string;
  /** Longest wait for the response's headers, and between two chunks of a stream. */
  timeoutMs: number;
  /** Requests in flight at once; more wait their turn here (FIFO). */
  maxInFlight: number;
  /** Sent as `Authorization: Bearer ...` when set. */
  apiKey?: string;
}

export interface EngineRequest {
  method?: "GET" | "POST";
  path: string;
  body?: unknown;
  signal?: AbortSignal;
}

/** An answer the caller accepts as a value although its status is not 2xx (e.g. an adapter that is loaded already). */
export interface EngineResponse {
  status: number;
  /** The parsed JSON body, or its text when it is not JSON. */
  body: unknown;
}

/** The message of an engine's error body: OpenAI's `{error: {message}}`, vLLM's `{message}`, SGLang's `{error_message}`, llama.cpp's `{error: {message}}`, or the text. */
export function errorDetail(body: unknown): string {
  if (typeof body === "string") return body.trim().slice(0, 500) || "(no body)";
  const b = body as { error?: unknown; message?: unknown; error_message?: unknown; detail?: unknown } | null;
  const err = b?.error as { message?: unknown } | string | undefined;
  const message = (typeof err === "object" ? err?.message : err) ?? b?.message ?? b?.error_message ?? b?.detail;
  return typeof message === "string" ? message : JSON.stringify(body).slice(0, 500);
}

type SystemError = { code?: string; message?: string; errors?: SystemError[] };

/** The cause of a failed fetch, in words (Node puts the system error in `cause`; a refused dual-stack connect is an AggregateError of them). */
function causeOf(err: unknown): string {
  const outer = (err as { cause?: SystemError }).cause;
  const cause = outer?.code ? outer : (outer?.errors?.find((e) => e.code) ?? outer);
  return cause?.code ? `${cause.code}${cause.message ? ` (${cause.message})` : ""}` : (cause?.message ?? (err as Error).message);
}

/**
 * The one HTTP client of a remote engine: every request waits for one of `maxInFlight` places, gives up after
 * `timeoutMs` without an answer (or without a new chunk of a stream), follows the caller's abort signal (an
 * aborted call closes its connection, which makes the engine drop the request), and turns every failure into
 * a named EngineError that says which engine and why.
 */
export class EngineHttp {
  private readonly places: Semaphore;

  constructor(private readonly opts: EngineHttpOptions) {
    this.places = new Semaphore(opts.maxInFlight);
  }

  get label(): string {
    return this.opts.label;
  }

  /** A JSON request; a non-2xx status is an EngineRequestError unless `accept` takes it. */
  async json<T = unknown>(req: EngineRequest, accept?: (res: EngineResponse) => boolean): Promise<T> {
    return this.withPlace(req.signal, async (signal, idle) => {
      const res = await this.send(req, signal);
      const textBody = await res.text();
      idle.stop();
      let body: unknown = textBody;
      try {
        body = JSON.parse(textBody);
      } catch {
        // not JSON: errors quote the text
      }
      if (!res.ok && !accept?.({ status: res.status, body })) throw new EngineRequestError(this.opts.label, res.status, errorDetail(body));
      return body as T;
    });
  }

  /**
   * A streamed request (server-sent events): `onEvent` gets each `data:` payload parsed as JSON, in order, until
   * the stream ends or `[DONE]`. The idle timeout restarts with every chunk.
   */
  async stream(req: EngineRequest, onEvent: (event: unknown) => void): Promise<void> {
    return this.withPlace(req.signal, async (signal, idle) => {
      const res = await this.send(req, signal);
      if (!res.ok) {
        const textBody = await res.text();
        let body: unknown = textBody;
        try {
          body = JSON.parse(textBody);
        } catch {
          // text
        }
        throw new EngineRequestError(this.opts.label, res.status, errorDetail(body));
      }
      const decoder = new TextDecoder();
      let buffer = "";
      const reader = res.body!.getReader();
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        idle.restart();
        buffer += decoder.decode(value, { stream: true });
        let end: number;
        while ((end = buffer.indexOf("\n")) >= 0) {
          const line = buffer.slice(0, end).replace(/\r$/, "");
          buffer = buffer.slice(end + 1);
          if (!line.startsWith("data:")) continue;
          const data = line.slice(5).trim();
          if (data === "[DONE]") return;
          if (data) onEvent(JSON.parse(data));
        }
      }
    });
  }

  /**
   * Sends the request; sent again once when the connection closed before any answer: a kept-alive connection the
   * engine closed as idle just as it was reused never reached it (every engine request here may be repeated).
   */
  private async send(req: EngineRequest, signal: AbortSignal): Promise<Response> {
    const headers: Record<string, string> = { accept: "application/json, text/event-stream" };
    if (req.body !== undefined) headers["content-type"] = "application/json";
    if (this.opts.apiKey) headers.authorization = `Bearer ${this.opts.apiKey}`;
    const init = { method: req.method ?? (req.body === undefined ? "GET" : "POST"), headers, body: req.body === undefined ? undefined : JSON.stringify(req.body), signal };
    try {
      return await fetch(new URL(req.path, this.opts.url), init);
    } catch (err) {
      const code = (err as { cause?: { code?: string } }).cause?.code;
      if (signal.aborted || (code !== "UND_ERR_SOCKET" && code !== "ECONNRESET")) throw err;
      return fetch(new URL(req.path, this.opts.url), init);
    }
  }

  /** Runs `fn` holding a place, with a signal that fires on the caller's abort or on the idle timeout. */
  private async withPlace<T>(callerSignal: AbortSignal | undefined, fn: (signal: AbortSignal, idle: IdleTimer) => Promise<T>): Promise<T> {
    callerSignal?.throwIfAborted();
    const [, release] = await this.places.acquire();
    const controller = new AbortController();
    const idle = new IdleTimer(this.opts.timeoutMs, () => controller.abort(new EngineTimeoutError(this.opts.label, this.opts.timeoutMs)));
    const onAbort = () => controller.abort(callerSignal!.reason);
    callerSignal?.addEventListener("abort", onAbort, { once: true });
    try {
      callerSignal?.throwIfAborted();
      return await fn(controller.signal, idle);
    } catch (err) {
      if (controller.signal.aborted) throw controller.signal.reason;
      if (err instanceof EngineRequestError) throw err;
      if (err instanceof SyntaxError) throw new EngineRequestError(this.opts.label, 200, `its answer is not the JSON this backend expects (${err.message}); is engine.remote.flavor right?`);
      throw new EngineUnavailableError(this.opts.label, causeOf(err));
    } finally {
      idle.stop();
      callerSignal?.removeEventListener("abort", onAbort);
      release();
    }
  }
}

class IdleTimer {
  private timer: NodeJS.Timeout | undefined;
  constructor(
    private readonly ms: number,
    private readonly fire: () => void,
  ) {
    this.restart();
  }
  restart(): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(this.fire, this.ms);
  }
  stop(): void {
    clearTimeout(this.timer);
  }
}
