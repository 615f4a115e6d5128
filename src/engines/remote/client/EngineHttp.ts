import { Semaphore } from "async-mutex";
import type { z } from "zod";
import {
  EngineError,
  EngineRequestError,
  EngineResponseTooLargeError,
  EngineTimeoutError,
  EngineUnavailableError,
} from "../../../engine/index.js";

export interface EngineHttpOptions {
  /** The engine's base URL, e.g. http://127.0.0.1:8080. */
  url: string;
  /** How the engine is named in errors, e.g. "llama-server at http://127.0.0.1:8080". */
  label: string;
  /** Longest wait for the response's headers, and between two chunks of a stream. */
  timeoutMs: number;
  /**
   * Requests in flight at once; more wait their turn here (FIFO), each at most `timeoutMs` (then an
   * engine_timeout saying it was never sent). A caller that gives up (its signal) leaves the line at once.
   */
  maxInFlight: number;
  /**
   * The longest answer read, and the longest event of a streamed one, in bytes: a longer one is cancelled as soon as
   * the limit is crossed (EngineResponseTooLargeError), never read to the end.
   */
  maxResponseBytes: number;
  /** Sent as `Authorization: Bearer ...` when set. */
  apiKey?: string;
}

export interface EngineRequest {
  method?: "GET" | "POST";
  path: string;
  /** Sent as JSON. */
  body?: unknown;
  /** The body as JSON text already, for what JSON.stringify cannot write (a negative zero). */
  bodyText?: string;
  signal?: AbortSignal;
}

/** An answer the caller accepts as a value although its status is not 2xx (e.g. an adapter that is loaded already). */
export interface EngineResponse {
  status: number;
  /** The parsed JSON body, or its text when it is not JSON. */
  body: unknown;
}

/**
 * The engine's address as errors, listings and logs show it: never a user name or password (engine.remote.apiKeyEnv is
 * for those).
 */
export function engineAddress(url: string): string {
  const u = new URL(url);
  u.username = "";
  u.password = "";
  return u.toString().replace(/\/$/, "");
}

/**
 * The message of an engine's error body: OpenAI's `{error: {message}}`, vLLM's `{message}`, SGLang's `{error_message}`,
 * llama.cpp's `{error: {message}}`, or the text.
 */
export function errorDetail(body: unknown): string {
  if (typeof body === "string") return body.trim().slice(0, 500) || "(no body)";
  const b = body as { error?: unknown; message?: unknown; error_message?: unknown; detail?: unknown } | null;
  const err = b?.error as { message?: unknown } | string | undefined;
  const message = (typeof err === "object" ? err?.message : err) ?? b?.message ?? b?.error_message ?? b?.detail;
  return typeof message === "string" ? message : JSON.stringify(body).slice(0, 500);
}

type SystemError = { code?: string; message?: string; errors?: SystemError[] };

/**
 * The cause of a failed fetch, in words (Node puts the system error in `cause`; a refused dual-stack connect is an
 * AggregateError of them).
 */
function causeOf(err: unknown): string {
  const outer = (err as { cause?: SystemError }).cause;
  const cause = outer?.code ? outer : (outer?.errors?.find((e) => e.code) ?? outer);
  return cause?.code
    ? `${cause.code}${cause.message ? ` (${cause.message})` : ""}`
    : (cause?.message ?? (err as Error).message);
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

  /**
   * A JSON request whose answer must match `answer` (else an engine_error naming what is wrong with it). A non-2xx
   * status is an EngineRequestError unless `accept` takes it; then the result is undefined.
   */
  async json<T>(
    req: EngineRequest,
    answer: z.ZodType<T>,
    accept?: (res: EngineResponse) => boolean,
  ): Promise<T | undefined> {
    return this.withPlace(req.signal, async (signal, idle) => {
      const res = await this.send(req, signal);
      const body = await this.readBody(res);
      idle.stop();
      if (!res.ok) {
        if (accept?.({ status: res.status, body })) return undefined;
        throw new EngineRequestError(this.opts.label, res.status, errorDetail(body));
      }
      return this.checked(req, answer, body);
    });
  }

  /** As `json`, for a request whose every error status is an error. */
  async answer<T>(req: EngineRequest, answer: z.ZodType<T>): Promise<T> {
    return (await this.json(req, answer))!;
  }

  /**
   * A streamed request (server-sent events): `onEvent` gets each `data:` payload parsed as JSON and checked
   * against `event`, in order, until the stream ends or `[DONE]`. The idle timeout restarts with every chunk.
   */
  async stream<T>(req: EngineRequest, event: z.ZodType<T>, onEvent: (event: T) => void): Promise<void> {
    return this.withPlace(req.signal, async (signal, idle) => {
      const res = await this.send(req, signal);
      if (!res.ok) throw new EngineRequestError(this.opts.label, res.status, errorDetail(await this.readBody(res)));
      const decoder = new TextDecoder();
      /**
       * The line not ended yet, as the pieces it came in: only each new piece is searched for its end and the line is
       * joined once, so a long line costs its length (a growing string searched on every chunk cost its square).
       */
      let unended: string[] = [];
      /** Bytes of the event not ended yet: one that never ends must not grow without bound. */
      let pending = 0;
      const reader = res.body!.getReader();
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        idle.restart();
        const lastNewline = value.lastIndexOf(0x0a);
        pending = lastNewline < 0 ? pending + value.byteLength : value.byteLength - lastNewline - 1;
        if (pending > this.opts.maxResponseBytes) {
          await reader.cancel();
          throw new EngineResponseTooLargeError(this.opts.label, this.opts.maxResponseBytes);
        }
        const text = decoder.decode(value, { stream: true });
        let start = 0;
        let end: number;
        while ((end = text.indexOf("\n", start)) >= 0) {
          unended.push(text.slice(start, end));
          const line = unended.join("").replace(/\r$/, "");
          unended = [];
          start = end + 1;
          if (!line.startsWith("data:")) continue;
          const data = line.slice(5).trim();
          if (data === "[DONE]") return;
          if (data) onEvent(this.checked(req, event, JSON.parse(data)));
        }
        unended.push(text.slice(start));
      }
    });
  }

  /**
   * The body parsed as JSON, or its text when it is not JSON (errors quote it). At most maxResponseBytes are read: a
   * longer body, announced by its Content-Length or found while reading, is cancelled at once (which closes the
   * connection) and refused.
   */
  private async readBody(res: Response): Promise<unknown> {
    const limit = this.opts.maxResponseBytes;
    const tooLarge = () => new EngineResponseTooLargeError(this.opts.label, limit);
    if (Number(res.headers.get("content-length")) > limit) {
      await res.body?.cancel();
      throw tooLarge();
    }
    const chunks: Uint8Array[] = [];
    let bytes = 0;
    const reader = res.body?.getReader();
    for (;;) {
      const chunk = await reader?.read();
      if (!chunk || chunk.done) break;
      bytes += chunk.value.byteLength;
      if (bytes > limit) {
        await reader!.cancel();
        throw tooLarge();
      }
      chunks.push(chunk.value);
    }
    const text = new TextDecoder().decode(Buffer.concat(chunks, bytes));
    try {
      return JSON.parse(text);
    } catch {
      return text;
    }
  }

  /**
   * The answer as `schema` reads it; anything else is an engine_error that names the field (a wrong flavor, another
   * version of the engine).
   */
  private checked<T>(req: EngineRequest, schema: z.ZodType<T>, body: unknown): T {
    const parsed = schema.safeParse(body);
    if (parsed.success) return parsed.data;
    const issue = parsed.error.issues[0]!;
    const where = issue.path.length ? issue.path.join(".") : "the body";
    const route = `${methodOf(req)} ${req.path}`;
    throw new EngineRequestError(
      this.opts.label,
      200,
      `its answer to ${route} is not what this backend reads (${where}: ${issue.message}); is engine.remote.flavor right?`,
    );
  }

  /**
   * Sends the request; sent again once when the connection closed before any answer: a kept-alive connection the
   * engine closed as idle just as it was reused never reached it (every engine request here may be repeated).
   */
  private async send(req: EngineRequest, signal: AbortSignal): Promise<Response> {
    const headers: Record<string, string> = { accept: "application/json, text/event-stream" };
    const body = req.bodyText ?? (req.body === undefined ? undefined : JSON.stringify(req.body));
    if (body !== undefined) headers["content-type"] = "application/json";
    if (this.opts.apiKey) headers.authorization = `Bearer ${this.opts.apiKey}`;
    const init = { method: methodOf(req), headers, body, signal };
    try {
      return await fetch(new URL(req.path, this.opts.url), init);
    } catch (err) {
      const code = (err as { cause?: { code?: string } }).cause?.code;
      if (signal.aborted || (code !== "UND_ERR_SOCKET" && code !== "ECONNRESET")) throw err;
      return fetch(new URL(req.path, this.opts.url), init);
    }
  }

  /** Runs `fn` holding a place, with a signal that fires on the caller's abort or on the idle timeout. */
  private async withPlace<T>(
    callerSignal: AbortSignal | undefined,
    fn: (signal: AbortSignal, idle: IdleTimer) => Promise<T>,
  ): Promise<T> {
    callerSignal?.throwIfAborted();
    const [, release] = await this.place(callerSignal);
    const controller = new AbortController();
    const idle = new IdleTimer(this.opts.timeoutMs, () =>
      controller.abort(new EngineTimeoutError(this.opts.label, this.opts.timeoutMs)),
    );
    const onAbort = () => controller.abort(callerSignal!.reason);
    callerSignal?.addEventListener("abort", onAbort, { once: true });
    try {
      callerSignal?.throwIfAborted();
      return await fn(controller.signal, idle);
    } catch (err) {
      if (controller.signal.aborted) throw controller.signal.reason;
      // named on purpose here (an answer refused, too large): the caller gets it as it is
      if (err instanceof EngineError) throw err;
      if (err instanceof SyntaxError)
        throw new EngineRequestError(
          this.opts.label,
          200,
          `its answer is not the JSON this backend expects (${err.message}); is engine.remote.flavor right?`,
        );
      throw new EngineUnavailableError(this.opts.label, causeOf(err));
    } finally {
      idle.stop();
      callerSignal?.removeEventListener("abort", onAbort);
      release();
    }
  }

  /**
   * A place, or an error as soon as the caller gives up waiting (its abort reason) or the wait reaches timeoutMs
   * (EngineTimeoutError with `queuedFor`); the place it would have had is passed on at once.
   */
  private place(signal: AbortSignal | undefined): Promise<[number, () => void]> {
    const acquired = this.places.acquire();
    return new Promise((resolve, reject) => {
      let left = false;
      const leave = (reason: unknown) => {
        left = true;
        clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
        reject(reason);
      };
      const onAbort = () => leave(signal!.reason);
      const timer = setTimeout(
        () => leave(new EngineTimeoutError(this.opts.label, this.opts.timeoutMs, this.opts.maxInFlight)),
        this.opts.timeoutMs,
      );
      signal?.addEventListener("abort", onAbort, { once: true });
      void acquired.then((place) => {
        if (left) return place[1]();
        clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
        resolve(place);
      });
    });
  }
}

const methodOf = (req: EngineRequest) =>
  req.method ?? (req.body === undefined && req.bodyText === undefined ? "GET" : "POST");

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
