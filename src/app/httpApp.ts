import { randomUUID } from "node:crypto";
import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import express, { type Request, type RequestHandler, type Response } from "express";
import { requireBearerAuth } from "@modelcontextprotocol/sdk/server/auth/middleware/bearerAuth.js";
import { hostHeaderValidation } from "@modelcontextprotocol/sdk/server/middleware/hostHeaderValidation.js";
import { SSEServerTransport } from "@modelcontextprotocol/sdk/server/sse.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { isInitializeRequest, isJSONRPCErrorResponse, isJSONRPCRequest, isJSONRPCResponse, JSONRPCMessageSchema, type JSONRPCMessage, type RequestId } from "@modelcontextprotocol/sdk/types.js";
import { DEFAULT_MAX_BODY_BYTES } from "../config/config.js";
import type { Logger } from "../log.js";
import type { ServerContext } from "../mcp/context.js";
import { createServer } from "../mcp/createServer.js";
import { ChatCompletions } from "../openai/completions.js";
import { mountOpenAI } from "../openai/routes.js";
import { mountStatus } from "../status/routes.js";
import { loadTokenVerifier } from "../http/auth.js";
import { ConnectionRegistry, type Connection, type ConnectionKind, type ConnectionLimits } from "../transports/connections.js";
import { isOwnOrigin } from "../http/origin.js";
import { errorHandler, methodNotAllowed, notFound, requireJson, RPC, sendError } from "../http/errors.js";

export interface HttpOptions extends Partial<ConnectionLimits> {
  host: string;
  port: number;
  allowedHosts?: string[];
  tokenFile?: string;
  /** Tokens that may also change the adapter library (admin tools). */
  adminTokenFile?: string;
  /** Largest JSON body read (after authentication). */
  maxBodyBytes?: number;
  /** How long a chat completion waiting on the client's tools keeps its run (openai.continuationSeconds). */
  continuationSeconds?: number;
}

const LOOPBACK = new Set(["127.0.0.1", "localhost", "::1"]);
/** Loopback as the URL parser spells hostnames (IPv6 in brackets). */
const LOOPBACK_HOSTNAMES = ["127.0.0.1", "localhost", "[::1]"];
const DEFAULT_LIMITS: ConnectionLimits = { maxConnections: 256, maxConnectionsPerClient: 16, idleSeconds: 1800 };

export class HttpConfigError extends Error {}

/**
 * Browsers send Origin; a page on another site must not drive this server (the MCP transport spec asks servers
 * to check it). Requests without Origin (non-browser clients) pass; the Host check still applies to them.
 */
function originValidation(hostnames: readonly string[]): RequestHandler {
  return (req, res, next) => {
    const { origin, host } = req.headers;
    if (origin === undefined) return next();
    if (!isOwnOrigin(origin, host, hostnames)) return sendError(res, 403, "Origin not allowed: only pages of this server itself (its host names, server.allowedHosts, and its port)");
    next();
  };
}

/** The identity a request's connection is bound to: its token's name, or none without tokens. */
const identityOf = (req: Request): string | undefined => (req.auth?.clientId ? `token:${req.auth.clientId}` : undefined);

/**
 * Streamable HTTP at /mcp (one MCP server object per client session) and the legacy HTTP+SSE pair
 * /sse + /messages, on one port. Before any body is read: the Host and Origin checks, then the bearer token.
 * Every connection belongs to the identity that opened it; another identity's id is an unknown id.
 */
export async function serveHttp(ctx: ServerContext, opts: HttpOptions, logger: Logger): Promise<{ url: string; close: () => Promise<void> }> {
  if (!LOOPBACK.has(opts.host) && !opts.tokenFile) {
    throw new HttpConfigError(`refusing to serve on ${opts.host} without authentication: give --token-file (server.tokenFile), or bind 127.0.0.1`);
  }
  if (opts.adminTokenFile && !opts.tokenFile) throw new HttpConfigError("server.adminTokenFile needs server.tokenFile too (admin tokens are a kind of bearer token)");
  const hostnames = [...(opts.allowedHosts ?? (LOOPBACK.has(opts.host) ? [] : [opts.host.includes(":") ? `[${opts.host}]` : opts.host])), ...LOOPBACK_HOSTNAMES];
  const maxBodyBytes = opts.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
  const connections = new ConnectionRegistry(
    {
      maxConnections: opts.maxConnections ?? DEFAULT_LIMITS.maxConnections,
      maxConnectionsPerClient: opts.maxConnectionsPerClient ?? DEFAULT_LIMITS.maxConnectionsPerClient,
      idleSeconds: opts.idleSeconds ?? DEFAULT_LIMITS.idleSeconds,
    },
    logger,
  );

  const app = express();
  app.disable("x-powered-by");
  app.use(hostHeaderValidation(hostnames));
  app.use(originValidation(hostnames));
  const routes = ["/mcp", "/sse", "/messages", "/health"];
  const auth = opts.tokenFile ? loadTokenVerifier([{ file: opts.tokenFile, scopes: [] }, ...(opts.adminTokenFile ? [{ file: opts.adminTokenFile, scopes: ["admin"] }] : [])]) : undefined;
  if (auth) {
    app.use(routes, requireBearerAuth({ verifier: auth.verifier }));
    logger.info({ clients: auth.clients }, "bearer-token authentication on");
  }
  // the OpenAI-compatible API and the status page check the same tokens themselves (their own error shapes)
  const chat = new ChatCompletions(ctx.harness, ctx.prompts.render("system") ?? "", logger, opts.continuationSeconds ?? 300);
  mountOpenAI(app, { chat, library: ctx.runtime.library, verifier: auth?.verifier, maxBodyBytes, logger });
  mountStatus(app, { ctx, chat, verifier: auth?.verifier, hostnames, logger, connections: () => connections.size });
  app.use(["/mcp", "/messages"], requireJson, express.json({ limit: maxBodyBytes }));

  /** Connects a fresh server object; when the connection ends, the sessions it owned end with it. */
  const connect = async (transport: StreamableHTTPServerTransport | SSEServerTransport, kind: ConnectionKind, id: string, owner: string | undefined) => {
    const { server, cleanup } = createServer(ctx, (extra) => extra.authInfo?.scopes.includes("admin") ?? false);
    let closed = false;
    const close = async () => {
      if (closed) return;
      closed = true;
      connections.delete(kind, id);
      // the server object first: that aborts the connection's requests in flight, which then end cleanly
      await cleanup();
      await ctx.sessions.closeOwnedBy(`connection:${id}`);
    };
    const connection: Connection = {
      kind,
      id,
      owner,
      close: async () => {
        await transport.close();
        await close();
      },
    };
    connections.add(connection);
    const earlier = transport.onclose; // the caller's own bookkeeping, if any
    transport.onclose = () => {
      earlier?.();
      void close();
    }; // set before connect: the SDK chains its own handler after it
    await server.connect(transport);
    return connection;
  };
  /** Counts a request as activity on its connection until its response is finished. */
  const inFlight = (connection: Connection, res: Response) => connections.busyUntil(connection, new Promise((resolve) => res.once("close", resolve)));
  const transports = new Map<string, StreamableHTTPServerTransport | SSEServerTransport>();
  const answered = (pending: Map<RequestId, () => void>, id: RequestId) => {
    pending.get(id)?.();
    pending.delete(id);
  };

  app.post("/mcp", async (req: Request, res: Response) => {
    const id = req.header("mcp-session-id");
    const owner = identityOf(req);
    if (id) {
      const connection = connections.lookup("streamable", id, owner);
      const transport = connection && (transports.get(id) as StreamableHTTPServerTransport | undefined);
      if (!connection || !transport) return sendError(res, 404, "unknown or expired MCP session; initialize again");
      inFlight(connection, res);
      return transport.handleRequest(req, res, req.body);
    }
    if (!isInitializeRequest(req.body)) return sendError(res, 400, "no MCP session: send initialize first", RPC.invalidRequest);
    const refused = connections.refusal(owner);
    if (refused) return sendError(res, 429, refused);
    const sessionId = randomUUID();
    const transport: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({ sessionIdGenerator: () => sessionId });
    transports.set(sessionId, transport);
    const connection = await connect(transport, "streamable", sessionId, owner);
    const forget = transport.onclose;
    transport.onclose = () => {
      transports.delete(sessionId);
      forget?.();
    };
    inFlight(connection, res);
    await transport.handleRequest(req, res, req.body);
    if (!transport.sessionId) await connection.close(); // an initialize that failed leaves nothing behind
  });
  const bySession = async (req: Request, res: Response) => {
    const id = req.header("mcp-session-id") ?? "";
    const connection = connections.lookup("streamable", id, identityOf(req));
    const transport = connection && (transports.get(id) as StreamableHTTPServerTransport | undefined);
    if (!transport) return sendError(res, 404, "unknown or expired MCP session");
    await transport.handleRequest(req, res);
  };
  app.get("/mcp", bySession);
  app.delete("/mcp", bySession);
  app.all("/mcp", methodNotAllowed("GET, POST, DELETE"));

  /** Legacy SSE: per stream, the requests whose answer is still to be sent over it (the POST ends with its 202). */
  const unanswered = new Map<string, Map<RequestId, () => void>>();
  app.get("/sse", async (req: Request, res: Response) => {
    const owner = identityOf(req);
    const refused = connections.refusal(owner);
    if (refused) return sendError(res, 429, refused);
    const transport = new SSEServerTransport("/messages", res);
    const { sessionId } = transport;
    const pending = new Map<RequestId, () => void>();
    transports.set(sessionId, transport);
    unanswered.set(sessionId, pending);
    const send = transport.send.bind(transport);
    transport.send = async (message: JSONRPCMessage) => {
      if ((isJSONRPCResponse(message) || isJSONRPCErrorResponse(message)) && message.id !== undefined) answered(pending, message.id);
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
  });
  app.all("/sse", methodNotAllowed("GET"));
  app.post("/messages", async (req: Request, res: Response) => {
    const id = String(req.query.sessionId ?? "");
    const connection = connections.lookup("sse", id, identityOf(req));
    const transport = connection && (transports.get(id) as SSEServerTransport | undefined);
    if (!connection || !transport) return sendError(res, 404, "unknown SSE session: open /sse first");
    if (!JSONRPCMessageSchema.safeParse(req.body).success) return sendError(res, 400, "the body is not a JSON-RPC message", RPC.invalidRequest);
    inFlight(connection, res);
    const pending = unanswered.get(id);
    if (isJSONRPCRequest(req.body) && pending && !pending.has(req.body.id)) {
      const requestId = req.body.id;
      connections.busyUntil(connection, new Promise<void>((resolve) => pending.set(requestId, resolve)));
    }
    await transport.handlePostMessage(req, res, req.body);
  });
  app.all("/messages", methodNotAllowed("POST"));

  /** Liveness and the open-connection count (behind the token when there are tokens). */
  app.get("/health", (_req: Request, res: Response) => void res.json({ status: "ok", connections: connections.size }));
  app.all("/health", methodNotAllowed("GET"));
  app.use(notFound);
  app.use(errorHandler(logger, maxBodyBytes));

  const server: Server = await new Promise((resolve, reject) => {
    const s = app.listen(opts.port, opts.host, () => resolve(s));
    s.once("error", reject);
  });
  const { port } = server.address() as AddressInfo;
  const hostForUrl = opts.host.includes(":") ? `[${opts.host}]` : opts.host;
  return {
    url: `http://${hostForUrl}:${port}`,
    close: async () => {
      // stop accepting first, then end every MCP connection (aborting their requests in flight)
      const stopped = new Promise<void>((resolve) => server.close(() => resolve()));
      await connections.closeAll();
      chat.close();
      server.closeAllConnections(); // open SSE streams would otherwise keep close() waiting forever
      await stopped;
      logger.info({ url: `http://${hostForUrl}:${port}` }, "HTTP server closed: no new connections");
    },
  };
}
