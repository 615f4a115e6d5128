import type { Express, Request, Response } from "express";
import { SSEServerTransport } from "@modelcontextprotocol/sdk/server/sse.js";
import {
  CancelledNotificationSchema,
  isJSONRPCErrorResponse,
  isJSONRPCRequest,
  isJSONRPCResponse,
  JSONRPCMessageSchema,
  type JSONRPCMessage,
  type RequestId,
} from "@modelcontextprotocol/sdk/types.js";
import { methodNotAllowed, RPC, sendError } from "../http/errors.js";
import { identityOf, inFlight, type HttpTransportDeps } from "./connect.js";

/** Where the legacy HTTP+SSE transport is served: GET the stream, POST the client's messages. */
export const SSE_PATHS = { stream: "/sse", messages: "/messages" } as const;

const answered = (pending: Map<RequestId, () => void>, id: RequestId) => {
  pending.get(id)?.();
  pending.delete(id);
};

/**
 * Keeps a quiet legacy SSE stream open through proxies that cut idle ones (nginx: 60 s): an SSE comment, which
 * clients ignore, every `everyMs` until the response ends (the SDK's Streamable HTTP transport sends its own).
 */
function keepAlive(res: Response, everyMs: number): void {
  if (res.writableEnded || res.destroyed) return;
  const timer = setInterval(() => res.write(": keepalive\n\n"), everyMs);
  timer.unref();
  res.once("close", () => clearInterval(timer));
}

/**
 * The legacy HTTP+SSE pair: GET /sse opens a stream (one MCP server object per stream), POST /messages?sessionId=
 * sends on it. Expects the body already parsed as JSON.
 */
export function mountSse(app: Express, { connections, connect }: HttpTransportDeps): void {
  const transports = new Map<string, SSEServerTransport>();
  /** Legacy SSE: per stream, the requests whose answer is still to be sent over it (the POST ends with its 202). */
  const unanswered = new Map<string, Map<RequestId, () => void>>();

  app.get(SSE_PATHS.stream, async (req: Request, res: Response) => {
    const owner = identityOf(req);
    const refused = connections.refusal(owner);
    if (refused) return sendError(res, 429, refused);
    const transport = new SSEServerTransport(SSE_PATHS.messages, res);
    const { sessionId } = transport;
    const pending = new Map<RequestId, () => void>();
    transports.set(sessionId, transport);
    unanswered.set(sessionId, pending);
    const send = transport.send.bind(transport);
    transport.send = async (message: JSONRPCMessage) => {
      if ((isJSONRPCResponse(message) || isJSONRPCErrorResponse(message)) && message.id !== undefined)
        answered(pending, message.id);
      return send(message);
    };
    // before connect, so a client that leaves while it runs leaves no entry behind (connect chains its own handler)
    transport.onclose = () => {
      transports.delete(sessionId);
      unanswered.delete(sessionId);
      for (const id of [...pending.keys()]) answered(pending, id);
    };
    const connection = await connect(transport, "sse", sessionId, owner);
    // a client gone before the stream started listening for its close would otherwise stay registered
    if (res.destroyed) await connection.close();
    else keepAlive(res, connections.keepaliveMs);
  });
  app.all(SSE_PATHS.stream, methodNotAllowed("GET"));
  app.post(SSE_PATHS.messages, async (req: Request, res: Response) => {
    const id = String(req.query.sessionId ?? "");
    const connection = connections.lookup("sse", id, identityOf(req));
    const transport = connection && transports.get(id);
    if (!connection || !transport) return sendError(res, 404, "unknown SSE session: open /sse first");
    if (!JSONRPCMessageSchema.safeParse(req.body).success)
      return sendError(res, 400, "the body is not a JSON-RPC message", RPC.invalidRequest);
    inFlight(connections, connection, res);
    const pending = unanswered.get(id);
    // a cancelled request is never answered: the connection is no longer busy with it
    const cancelled = CancelledNotificationSchema.safeParse(req.body);
    if (cancelled.success && pending && cancelled.data.params.requestId !== undefined)
      answered(pending, cancelled.data.params.requestId);
    if (isJSONRPCRequest(req.body) && pending && !pending.has(req.body.id)) {
      const requestId = req.body.id;
      connections.busyUntil(connection, new Promise<void>((resolve) => pending.set(requestId, resolve)));
    }
    await transport.handlePostMessage(req, res, req.body);
  });
  app.all(SSE_PATHS.messages, methodNotAllowed("POST"));
}
