import { randomUUID } from "node:crypto";
import type { Express, Request, Response } from "express";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { isInitializeRequest, isJSONRPCRequest, type RequestId } from "@modelcontextprotocol/sdk/types.js";
import { isLegacyRequest } from "@modelcontextprotocol/server";
import { methodNotAllowed, RPC, sendError } from "../http/errors.js";
import { identityOf, inFlight, type HttpTransportDeps } from "./connect.js";

/** Where Streamable HTTP is served. */
export const STREAMABLE_HTTP_PATH = "/mcp";

/**
 * A POST's requests are answered on its own response: when the client's connection drops before that response ends,
 * nobody is left to read their answers, so they are cancelled as the client's own `notifications/cancelled` would
 * cancel them (their handlers' signals abort: a generation stops, a run ends cancelled), as a dropped SSE stream
 * cancels its connection's calls. The cancellation goes by the client's ids; `RelayTransport` cancels each request by
 * itself, whatever its id (0 included).
 */
function cancelOnDrop(transport: StreamableHTTPServerTransport, req: Request, res: Response): void {
  const ids: RequestId[] = (Array.isArray(req.body) ? req.body : [req.body])
    .filter((m) => isJSONRPCRequest(m))
    .map((m) => m.id);
  if (!ids.length) return;
  res.once("close", () => {
    if (res.writableFinished) return; // answered
    for (const requestId of ids)
      transport.onmessage?.({
        jsonrpc: "2.0",
        method: "notifications/cancelled",
        params: { requestId, reason: "the client's connection dropped before the answer" },
      });
  });
}

/** The request's method, URL and headers as a web `Request`, for the SDK's classification. */
function headersOnly(req: Request): globalThis.Request {
  const headers = new Headers();
  for (const [name, value] of Object.entries(req.headers))
    if (value !== undefined) headers.set(name, Array.isArray(value) ? value.join(", ") : value);
  return new globalThis.Request(`http://${req.headers.host ?? "localhost"}${req.originalUrl}`, {
    method: req.method,
    headers,
  });
}

/**
 * Streamable HTTP at /mcp, both revisions on one path. 2025-era: POST initialize opens a session (one MCP server object
 * per client session), then POST, GET (the server's stream) and DELETE name it by `Mcp-Session-Id`. 2026-07-28: each
 * POST carries its revision in its `_meta` and is answered on its own, with no session. Expects the body already
 * parsed as JSON.
 */
export function mountStreamableHttp(app: Express, { connections, connect, modern }: HttpTransportDeps): void {
  const transports = new Map<string, StreamableHTTPServerTransport>();

  app.post(STREAMABLE_HTTP_PATH, async (req: Request, res: Response) => {
    const id = req.header("mcp-session-id");
    const owner = identityOf(req);
    if (id) {
      const connection = connections.lookup("streamable", id, owner);
      const transport = connection && transports.get(id);
      if (!connection || !transport) return sendError(res, 404, "unknown or expired MCP session; initialize again");
      inFlight(connections, connection, res);
      cancelOnDrop(transport, req, res);
      return transport.handleRequest(req, res, req.body);
    }
    // the SDK's own classification, so the two never disagree on which revision a request is (from the headers and
    // the parsed body: nothing is read or serialized again)
    if (!isInitializeRequest(req.body) && !(await isLegacyRequest(headersOnly(req), req.body)))
      return modern.serve(req, res, req.body);
    if (!isInitializeRequest(req.body))
      return sendError(
        res,
        400,
        "no MCP session: send initialize first (MCP 2025-11-25 and earlier), or the 2026-07-28 _meta envelope with each request",
        RPC.invalidRequest,
      );
    const refused = connections.refusal(owner);
    if (refused) return sendError(res, 429, refused);
    const sessionId = randomUUID();
    const transport: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => sessionId,
      keepAliveMs: connections.keepaliveMs, // the SDK's own keepalive comments, on each of the session's streams
    });
    transports.set(sessionId, transport);
    const connection = await connect(transport, "streamable", sessionId, owner);
    const forget = transport.onclose;
    transport.onclose = () => {
      transports.delete(sessionId);
      forget?.();
    };
    inFlight(connections, connection, res);
    await transport.handleRequest(req, res, req.body);
    if (!transport.sessionId) await connection.close(); // an initialize that failed leaves nothing behind
  });
  const bySession = async (req: Request, res: Response) => {
    const id = req.header("mcp-session-id") ?? "";
    const connection = connections.lookup("streamable", id, identityOf(req));
    const transport = connection && transports.get(id);
    if (!transport) return sendError(res, 404, "unknown or expired MCP session");
    if (req.method === "GET")
      // the client's own stream: its socket closing with the stream still open is the client going away
      res.once("close", () => {
        if (res.statusCode === 200 && !res.writableFinished) connections.streamDropped(connection);
      });
    await transport.handleRequest(req, res);
  };
  app.get(STREAMABLE_HTTP_PATH, bySession);
  app.delete(STREAMABLE_HTTP_PATH, bySession);
  app.all(STREAMABLE_HTTP_PATH, methodNotAllowed("GET, POST, DELETE"));
}
