import { randomBytes } from "node:crypto";
import type { ClientResult } from "../harness/runTaskUnderPolicy.js";
import type { ModelCall } from "../harness/driver.js";
import { canonical } from "./conversation.js";
import type { ChatMessage } from "./request.js";

/** A run waiting on the client's tool results: who may continue it, with which messages. */
interface Suspended {
  identity: string | undefined;
  /** The messages the continuation must start with, exactly: the request's and the returned assistant message. */
  prefix: string[];
  /** OpenAI tool-call id -> the session's call id. */
  calls: Map<string, string>;
  resume: (results: ClientResult[], next: unknown) => void;
  expire: () => void;
  timer: NodeJS.Timeout;
}

/** Tool-call ids carry the continuation id, so a framework that echoes the messages back continues by itself. */
const CALL_ID = /^call_([A-Za-z0-9_-]{24})_(\d{1,2})$/;

/**
 * Runs suspended on client-declared tools. A continuation id is 144 random bits, bound to the identity that
 * started the run (another identity's request with it is simply a new conversation) and valid until it
 * expires, when the run is cancelled and its session slot freed.
 */
export class Continuations<Next> {
  private readonly waiting = new Map<string, Suspended>();

  constructor(private readonly ttlMs: number) {}

  get size(): number {
    return this.waiting.size;
  }

  /** Registers a suspended run; returns its id and the OpenAI tool calls to hand the client. */
  suspend(
    identity: string | undefined,
    calls: readonly ModelCall[],
    messagesSoFar: readonly ChatMessage[],
    content: string | null,
    handlers: { resume: (results: ClientResult[], next: Next) => void; expire: () => void },
  ): { id: string; message: Extract<ChatMessage, { role: "assistant" }> } {
    const id = randomBytes(18).toString("base64url");
    const toolCalls = calls.map((c, i) => ({
      id: `call_${id}_${i}`,
      type: "function" as const,
      function: { name: c.name, arguments: JSON.stringify(c.arguments) },
    }));
    const message = { role: "assistant" as const, content, tool_calls: toolCalls };
    const timer = setTimeout(() => {
      this.waiting.delete(id);
      handlers.expire();
    }, this.ttlMs);
    timer.unref();
    this.waiting.set(id, {
      identity,
      prefix: [...messagesSoFar, message].map(canonical),
      calls: new Map(toolCalls.map((t, i) => [t.id, calls[i]!.id])),
      resume: handlers.resume as Suspended["resume"],
      expire: handlers.expire,
      timer,
    });
    return { id, message };
  }

  /**
   * Takes the run `messages` continue, if they do: the same identity, the returned messages as an exact prefix,
   * then one tool result for each call and nothing else. Anything else leaves the run waiting and returns undefined.
   */
  take(
    identity: string | undefined,
    messages: readonly ChatMessage[],
  ): { id: string; results: ClientResult[]; resume: (results: ClientResult[], next: Next) => void } | undefined {
    const last = messages.findLast((m) => m.role === "assistant");
    const id = last?.role === "assistant" ? CALL_ID.exec(last.tool_calls?.[0]?.id ?? "")?.[1] : undefined;
    const s = id === undefined ? undefined : this.waiting.get(id);
    if (!s || s.identity !== identity || messages.length !== s.prefix.length + s.calls.size) return undefined;
    if (s.prefix.some((c, i) => canonical(messages[i]!) !== c)) return undefined;
    const results: ClientResult[] = [];
    for (const m of messages.slice(s.prefix.length)) {
      const callId = m.role === "tool" ? s.calls.get(m.tool_call_id) : undefined;
      if (!callId || results.some((r) => r.callId === callId) || m.role !== "tool") return undefined;
      results.push({
        callId,
        content: typeof m.content === "string" ? m.content : m.content.map((p) => p.text).join(""),
      });
    }
    clearTimeout(s.timer);
    this.waiting.delete(id!);
    return { id: id!, results, resume: s.resume };
  }

  /** Cancels every waiting run (the server is shutting down). */
  closeAll(): void {
    for (const [id, s] of this.waiting) {
      clearTimeout(s.timer);
      this.waiting.delete(id);
      s.expire();
    }
  }
}
