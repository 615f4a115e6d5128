import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import express, { type Request, type RequestHandler, type Response } from "express";
import { requireBearerAuth } from "@modelcontextprotocol/sdk/server/auth/middleware/bearerAuth.js";
import { hostHeaderValidation } from "@modelcontextprotocol/sdk/server/middleware/hostHeaderValidation.js";
import { DEFAULT_MAX_BODY_BYTES } from "../config/configSchema.js";
import type { Logger } from "../log.js";
import type { ServerContext } from "../mcp/context.js";
import { ChatCompletions } from "../openai/completions.js";
import { mountOpenAI } from "../openai/openaiRoutes.js";
import { mountStatus } from "../status/statusRoutes.js";
import { loadTokenVerifier } from "../http/auth.js";
import { isOwnOrigin } from "../http/origin.js";
import {
  answerClientErrors,
  errorHandler,
  methodNotAllowed,
  notFound,
  requireJson,
  RPC,
  sendError,
} from "../http/errors.js";
import { connector, modernRequests } from "../transports/connect.js";
import { ConnectionRegistry, type ConnectionLimits } from "../transports/connections.js";
import { SSE_PATHS, mountSse } from "../transports/sse.js";
import { STREAMABLE_HTTP_PATH, mountStreamableHttp } from "../transports/streamableHttp.js";

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
  /** Live status page logins (server.maxStatusLogins, server.maxStatusLoginsPerClient). */
  statusLogins: { max: number; maxPerClient: number };
}

const LOOPBACK = new Set(["127.0.0.1", "localhost", "::1"]);
/** Loopback as the URL parser spells hostnames (IPv6 in brackets). */
const LOOPBACK_HOSTNAMES = ["127.0.0.1", "localhost", "[::1]"];
const DEFAULT_LIMITS: ConnectionLimits = {
  maxConnections: 256,
  maxConnectionsPerClient: 16,
  idleSeconds: 1800,
  keepaliveSeconds: 20,
};

export class HttpConfigError extends Error {}

/**
 * HTTP/1.1 requires a Host header and the DNS-rebinding check reads it: a request without one is refused here, as
 * JSON (Node's own refusal, which `requireHostHeader: false` turns off, is an empty 400).
 */
const requireHost: RequestHandler = (req, res, next) => {
  if (req.headers.host) return next();
  sendError(
    res,
    400,
    "the request has no Host header (HTTP/1.1 requires one); send Host: <host>:<port>, the address you connect to",
    RPC.invalidRequest,
  );
};

/**
 * Browsers send Origin; a page on another site must not drive this server (the MCP transport spec asks servers
 * to check it). Requests without Origin (non-browser clients) pass; the Host check still applies to them.
 */
function originValidation(hostnames: readonly string[]): RequestHandler {
  return (req, res, next) => {
    const { origin, host } = req.headers;
    if (origin === undefined) return next();
    if (!isOwnOrigin(origin, host, hostnames))
      return sendError(
        res,
        403,
        "Origin not allowed: only pages of this server itself (its host names, server.allowedHosts, and its port)",
      );
    next();
  };
}

/**
 * The HTTP app, on one port: the MCP transports (src/transports: Streamable HTTP at /mcp, one MCP server object
 * per client session, and the legacy HTTP+SSE pair /sse + /messages), the OpenAI-compatible API, the status page
 * and /health. Before any body is read: the Host and Origin checks, then the bearer token.
 * Every connection belongs to the identity that opened it; another identity's id is an unknown id.
 */
export async function serveHttp(
  ctx: ServerContext,
  opts: HttpOptions,
  logger: Logger,
): Promise<{ url: string; close: () => Promise<void> }> {
  if (!LOOPBACK.has(opts.host) && !opts.tokenFile) {
    throw new HttpConfigError(
      `refusing to serve on ${opts.host} without authentication: give --token-file (server.tokenFile), or bind 127.0.0.1`,
    );
  }
  if (opts.adminTokenFile && !opts.tokenFile)
    throw new HttpConfigError(
      "server.adminTokenFile needs server.tokenFile too (admin tokens are a kind of bearer token)",
    );
  const hostnames = [
    ...(opts.allowedHosts ?? (LOOPBACK.has(opts.host) ? [] : [opts.host.includes(":") ? `[${opts.host}]` : opts.host])),
    ...LOOPBACK_HOSTNAMES,
  ];
  const maxBodyBytes = opts.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
  const connections = new ConnectionRegistry(
    {
      maxConnections: opts.maxConnections ?? DEFAULT_LIMITS.maxConnections,
      maxConnectionsPerClient: opts.maxConnectionsPerClient ?? DEFAULT_LIMITS.maxConnectionsPerClient,
      idleSeconds: opts.idleSeconds ?? DEFAULT_LIMITS.idleSeconds,
      keepaliveSeconds: opts.keepaliveSeconds ?? DEFAULT_LIMITS.keepaliveSeconds,
    },
    logger,
  );

  const app = express();
  app.disable("x-powered-by");
  app.use(requireHost);
  app.use(hostHeaderValidation(hostnames));
  app.use(originValidation(hostnames));
  const routes = [STREAMABLE_HTTP_PATH, SSE_PATHS.stream, SSE_PATHS.messages, "/health"];
  const auth = opts.tokenFile
    ? loadTokenVerifier([
        { file: opts.tokenFile, scopes: [] },
        ...(opts.adminTokenFile ? [{ file: opts.adminTokenFile, scopes: ["admin"] }] : []),
      ])
    : undefined;
  if (auth) {
    app.use(routes, requireBearerAuth({ verifier: auth.verifier }));
    logger.info({ clients: auth.clients }, "bearer-token authentication on");
  }
  // the OpenAI-compatible API and the status page check the same tokens themselves (their own error shapes)
  const chat = new ChatCompletions(
    ctx.harness,
    ctx.prompts.render("system") ?? "",
    logger,
    opts.continuationSeconds ?? 300,
  );
  mountOpenAI(app, { chat, library: ctx.runtime.library, verifier: auth?.verifier, maxBodyBytes, logger });
  mountStatus(app, {
    ctx,
    chat,
    verifier: auth?.verifier,
    hostnames,
    logger,
    connections: () => connections.size,
    logins: opts.statusLogins,
  });
  // the MCP bodies are read only here, after the guards above; the transports get them parsed
  app.use([STREAMABLE_HTTP_PATH, SSE_PATHS.messages], requireJson, express.json({ limit: maxBodyBytes }));

  const modern = modernRequests(ctx, connections.keepaliveMs);
  const transports = { connections, connect: connector(ctx, connections), modern };
  mountStreamableHttp(app, transports);
  mountSse(app, transports);

  /** Liveness and the open-connection count (behind the token when there are tokens). */
  app.get("/health", (_req: Request, res: Response) => void res.json({ status: "ok", connections: connections.size }));
  app.all("/health", methodNotAllowed("GET"));
  app.use(notFound);
  app.use(errorHandler(logger, maxBodyBytes));

  const { bodyTimeoutSeconds } = ctx.runtime.config.server;
  const server: Server = createServer(
    {
      requireHostHeader: false, // refused by requireHost, as JSON
      // a request must arrive whole in seconds, not Node's 5 minutes; its timer is checked every second (Node: 30 s)
      requestTimeout: bodyTimeoutSeconds * 1000,
      headersTimeout: bodyTimeoutSeconds * 1000,
      connectionsCheckingInterval: 1000,
    },
    app,
  );
  answerClientErrors(server, bodyTimeoutSeconds);
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(opts.port, opts.host, () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  const hostForUrl = opts.host.includes(":") ? `[${opts.host}]` : opts.host;
  return {
    url: `http://${hostForUrl}:${port}`,
    close: async () => {
      // stop accepting first, then end every MCP connection (aborting their requests in flight)
      const stopped = new Promise<void>((resolve) => server.close(() => resolve()));
      await connections.closeAll();
      await modern.close();
      chat.close();
      server.closeAllConnections(); // open SSE streams would otherwise keep close() waiting forever
      await stopped;
      logger.info({ url: `http://${hostForUrl}:${port}` }, "HTTP server closed: no new connections");
    },
  };
}
