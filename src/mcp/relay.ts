import type { Transport, TransportSendOptions } from "@modelcontextprotocol/sdk/shared/transport.js";
import {
  CancelledNotificationSchema,
  isJSONRPCErrorResponse,
  isJSONRPCNotification,
  isJSONRPCRequest,
  isJSONRPCResultResponse,
  type JSONRPCMessage,
  type MessageExtraInfo,
  type RequestId,
} from "@modelcontextprotocol/sdk/types.js";
import { ADMIN_TOOLS, type AdminGate } from "./admin.js";

/**
 * The transport an MCP server object is connected over: it wraps the real one (stdio, Streamable HTTP, SSE) and adds
 * what the SDK cannot do per request:
 *
 * - Each request reaches the server under a handle of its own (1, 2, ...) and its answer goes back under the client's
 *   id, so a request is cancelled by itself whatever its id: the SDK cancels by id and skips a falsy one
 *   (`Protocol._oncancel`), which left a call with id 0 (or "") running to its end when the client cancelled it or
 *   its HTTP request dropped.
 * - The admin tools are listed to admin callers only; they stay callable, so anyone else calling one gets their
 *   refusal rather than an unknown tool.
 *
 * The server sets this object's handlers (`connect`); `start` sets the inner transport's to this object's methods, so
 * whatever the inner transport receives (a dropped request's cancellation included) passes through here. Callers set
 * their own `onclose` here too, before `connect`: the inner transport's handlers belong to this object.
 */
export class RelayTransport implements Transport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: (message: JSONRPCMessage, extra?: MessageExtraInfo) => void;

  private next = 1;
  /** Requests not answered yet: the server's handle -> the client's id, and back. */
  private readonly clientIds = new Map<number, RequestId>();
  private readonly handles = new Map<RequestId, number>();
  /** tools/list requests, by handle, whose caller may not see the admin tools. */
  private readonly withoutAdminTools = new Set<number>();

  constructor(
    /** The real transport, which the outer code keeps driving (`handleRequest` and the like). */
    private readonly inner: Transport,
    private readonly isAdmin: AdminGate,
  ) {}

  get sessionId(): string | undefined {
    return this.inner.sessionId;
  }

  async start(): Promise<void> {
    this.inner.onmessage = (message, extra) => this.receive(message, extra);
    this.inner.onclose = () => this.onclose?.();
    this.inner.onerror = (error) => this.onerror?.(error);
    await this.inner.start();
  }

  close(): Promise<void> {
    return this.inner.close();
  }

  setProtocolVersion(version: string): void {
    this.inner.setProtocolVersion?.(version);
  }

  /** A message from the client (or the transport speaking for it, as a dropped request's cancellation). */
  private receive(message: JSONRPCMessage, extra?: MessageExtraInfo): void {
    if (isJSONRPCRequest(message)) {
      const handle = this.next++;
      this.clientIds.set(handle, message.id);
      this.handles.set(message.id, handle);
      if (message.method === "tools/list" && !this.isAdmin(extra ?? {})) this.withoutAdminTools.add(handle);
      return this.onmessage?.({ ...message, id: handle }, extra);
    }
    if (isJSONRPCNotification(message) && message.method === "notifications/cancelled") {
      const cancelled = CancelledNotificationSchema.safeParse(message);
      const requestId = cancelled.success ? cancelled.data.params.requestId : undefined;
      const handle = requestId === undefined ? undefined : this.handles.get(requestId);
      // answered already or never asked: nothing to cancel, and the id may be another request's handle
      if (handle === undefined) return;
      this.forget(handle); // a cancelled request is not answered
      return this.onmessage?.({ ...message, params: { ...message.params, requestId: handle } }, extra);
    }
    this.onmessage?.(message, extra);
  }

  /** A message from the server: an answer, or a message related to a request, goes back under the client's id. */
  send(message: JSONRPCMessage, options?: TransportSendOptions): Promise<void> {
    const related = options?.relatedRequestId;
    const sendOptions =
      typeof related === "number" && this.clientIds.has(related)
        ? { ...options, relatedRequestId: this.clientIds.get(related) }
        : options;
    if ((isJSONRPCResultResponse(message) || isJSONRPCErrorResponse(message)) && typeof message.id === "number") {
      const handle = message.id;
      const id = this.clientIds.get(handle);
      if (id !== undefined) {
        const answer = { ...message, id };
        if (isJSONRPCResultResponse(answer) && this.withoutAdminTools.has(handle)) {
          const { tools } = answer.result as { tools?: { name: string }[] };
          if (Array.isArray(tools))
            answer.result = { ...answer.result, tools: tools.filter((t) => !ADMIN_TOOLS.has(t.name)) };
        }
        this.forget(handle);
        return this.inner.send(answer, sendOptions);
      }
    }
    return this.inner.send(message, sendOptions);
  }

  private forget(handle: number): void {
    const id = this.clientIds.get(handle);
    this.clientIds.delete(handle);
    this.withoutAdminTools.delete(handle);
    if (id !== undefined && this.handles.get(id) === handle) this.handles.delete(id);
  }
}
