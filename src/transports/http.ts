import { randomUUID } from "node:crypto";
import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { Request, Response } from "express";
import { requireBearerAuth } from "@modelcontextprotocol/sdk/server/auth/middleware/bearerAuth.js";
import { createMcpExpressApp } from "@modelcontextprotocol/sdk/server/express.js";
import { SSEServerTransport } from "@modelcontextprotocol/sdk/server/sse.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { isInitializeRequest } from "@modelcontextprotocol/sdk/types.js";
import type { Logger } from "../log.js";
import type { ServerContext } from "../server/context.js";
import { createServer } from "../server/createServer.js";
import { loadTokenVerifier } from "./auth.js";

export interface HttpOptions {
  host: string;
  port: number;
  allowedHosts?: string[];
  tokenFile?: string;
  /** Tokens that may also change the adapter library (admin tools). */
  adminTokenFile?: string;
}

const LOOPBACK = new Set(["127.0.0.1", "localhost", "::1"]);

export class HttpConfigError extends Error {}

/**
 * Streamable HTTP at /mcp (one MCP server object per client session) and the legacy HTTP+SSE pair
 * /sse + /messages, on one port. Host validation is always on; a bearer token is required off loopback.
 */
export async function serveHttp(ctx: ServerContext, opts: HttpOptions, logger: Logger): Promise<{ url: string; close: () => Promise<void> }> {
  if (!LOOPBACK.has(opts.host) && !opts.tokenFile) {
    throw new HttpConfigError(`refusing to serve on ${opts.host} without authentication: give --token-file (server.tokenFile), or bind 127.0.0.1`);
  }
  const allowedHosts = opts.allowedHosts ?? (LOOPBACK.has(opts.host) ? undefined : [opts.host]);
  const app = createMcpExpressApp({ host: opts.host, ...(allowedHosts ? { allowedHosts: [...allowedHosts, ...[...LOOPBACK]] } : {}) });
  if (opts.adminTokenFile && !opts.tokenFile) throw new HttpConfigError("server.adminTokenFile needs server.tokenFile too (admin tokens are a kind of bearer token)");
  if (opts.tokenFile) {
    const { verifier, clients } = loadTokenVerifier([{ file: opts.tokenFile, scopes: [] }, ...(opts.adminTokenFile ? [{ file: opts.adminTokenFile, scopes: ["admin"] }] : [])]);
    app.use(["/mcp", "/sse", "/messages"], requireBearerAuth({ verifier }));
    logger.info({ clients }, "bearer-token authentication on");
  }

  const streamable = new Map<string, StreamableHTTPServerTransport>();
  const sse = new Map<string, SSEServerTransport>();
  const closers = new Set<() => Promise<void>>();

  /** Connects a fresh server object; when the connection ends, the sessions it owned end with it. */
  const connect = async (transport: StreamableHTTPServerTransport | SSEServerTransport, connectionId: () => string | undefined, forget: () => void) => {
    const { server, cleanup } = createServer(ctx, (extra) => extra.authInfo?.scopes.includes("admin") ?? false);
    const close = async () => {
      if (!closers.delete(close)) return;
      forget();
      // the server object first: that aborts the connection's requests in flight, which then end cleanly
      await cleanup();
      const id = connectionId();
      if (id) await ctx.sessions.closeOwnedBy(`connection:${id}`);
    };
    closers.add(close);
    transport.onclose = () => void close(); // set before connect: the SDK chains its own handler after it
    await server.connect(transport);
  };

  app.post("/mcp", async (req: Request, res: Response) => {
    const id = req.header("mcp-session-id");
    const existing = id ? streamable.get(id) : undefined;
    if (existing) return existing.handleRequest(req, res, req.body);
    if (id || !isInitializeRequest(req.body)) {
      return res.status(id ? 404 : 400).json({ jsonrpc: "2.0", error: { code: -32000, message: id ? "unknown or expired MCP session; initialize again" : "no MCP session: send initialize first" }, id: null });
    }
    const transport: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (sid) => void streamable.set(sid, transport),
    });
    await connect(transport, () => transport.sessionId, () => transport.sessionId && streamable.delete(transport.sessionId));
    await transport.handleRequest(req, res, req.body);
    if (!transport.sessionId) await transport.close(); // an initialize that failed leaves nothing behind
  });
  const bySession = async (req: Request, res: Response) => {
    const transport = streamable.get(req.header("mcp-session-id") ?? "");
    if (!transport) return res.status(404).json({ jsonrpc: "2.0", error: { code: -32000, message: "unknown or expired MCP session" }, id: null });
    await transport.handleRequest(req, res);
  };
  app.get("/mcp", bySession);
  app.delete("/mcp", bySession);

  app.get("/sse", async (_req: Request, res: Response) => {
    const transport = new SSEServerTransport("/messages", res);
    sse.set(transport.sessionId, transport);
    await connect(transport, () => transport.sessionId, () => sse.delete(transport.sessionId));
  });
  app.post("/messages", async (req: Request, res: Response) => {
    const transport = sse.get(String(req.query.sessionId ?? ""));
    if (!transport) return res.status(404).json({ error: "unknown SSE session: open /sse first" });
    await transport.handlePostMessage(req, res, req.body);
  });

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
      await Promise.all([...closers].map((c) => c()));
      server.closeAllConnections(); // open SSE streams would otherwise keep close() waiting forever
      await stopped;
      logger.info({ url: `http://${hostForUrl}:${port}` }, "HTTP server closed: no new connections");
    },
  };
}
