import type { Request, Response } from "express";
import type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js";
import { toNodeHandler, type NodeMcpRequestHandler } from "@modelcontextprotocol/node";
import { createMcpHandler } from "@modelcontextprotocol/server";
import type { AdminGate } from "../mcp/admin.js";
import type { ServerContext } from "../mcp/context.js";
import { createRequestServer, createServer } from "../mcp/createServer.js";
import { RelayTransport } from "../mcp/relay.js";
import type { Connection, ConnectionKind, ConnectionRegistry } from "./connections.js";

/** Opens one MCP connection over `transport` for `owner` and registers it under `kind` and `id`. */
export type Connect = (
  transport: Transport,
  kind: ConnectionKind,
  id: string,
  owner: string | undefined,
) => Promise<Connection>;

/**
 * What the HTTP transports share: the open connections and how to open one (2025-era: Streamable HTTP sessions, legacy
 * SSE), and how a 2026-07-28 request is answered (it opens none).
 */
export interface HttpTransportDeps {
  connections: ConnectionRegistry;
  connect: Connect;
  modern: ModernRequests;
}

/** The 2026-07-28 revision's requests: each answered by a server object of its own. */
export interface ModernRequests {
  serve: NodeMcpRequestHandler;
  close: () => Promise<void>;
}

/** Only an admin token may change the library over HTTP. */
const httpAdmin: AdminGate = (extra) => extra.authInfo?.scopes.includes("admin") ?? false;

/**
 * Answers 2026-07-28 requests (`server/discover`, stateless calls), each with a fresh server object built from the
 * same definitions as a connection's (`createRequestServer`); a library change is announced on their
 * `subscriptions/listen` streams. Callers route only modern requests here (`isLegacyRequest`): 2025-era ones keep
 * their sessions.
 */
export function modernRequests(ctx: ServerContext, keepaliveMs: number): ModernRequests {
  const handler = createMcpHandler((caller) => createRequestServer(ctx, httpAdmin, caller), {
    legacy: "reject",
    keepAliveMs: keepaliveMs,
    // the SDK reports here both the requests it refused (a bad envelope) and its own failures
    onerror: (err) => ctx.runtime.logger.warn({ err }, "a 2026-07-28 request was refused or failed"),
  });
  const unsubscribe = ctx.runtime.library.onChange(() => handler.notify.toolsChanged());
  return {
    serve: toNodeHandler(handler, {
      onerror: (err) => ctx.runtime.logger.error({ err }, "answering a 2026-07-28 request failed"),
    }),
    close: async () => {
      unsubscribe();
      await handler.close();
    },
  };
}

/** The one connect of both HTTP transports; a token with the admin scope may change the library. */
export function connector(ctx: ServerContext, connections: ConnectionRegistry): Connect {
  /**
   * Connects a fresh server object. Sessions belong to identities, not connections (see `Owners`): when the connection
   * ends, only the sessions of its own key end with it, and only if its client never sent that key back (nobody else
   * can reach them); the rest close when they idle out (sessions.idleMinutes).
   */
  return async (transport, kind, id, owner) => {
    const { server, cleanup } = createServer(ctx, httpAdmin, "http");
    ctx.owners.connectionOpened(id);
    let closed = false;
    const close = async () => {
      if (closed) return;
      closed = true;
      connections.delete(kind, id);
      // aborts the connection's requests in flight, which then end cleanly
      await cleanup();
      const own = ctx.owners.connectionEnded(id);
      if (!own.claimed) await ctx.sessions.closeOwnedBy(own.owner);
    };
    const end = async () => {
      await transport.close();
      await close();
    };
    const connection: Connection = { kind, id, owner, close: end };
    connections.add(connection);
    // the server object is connected over the relay, which takes over the transport's handlers when it starts
    const relay = new RelayTransport(transport, httpAdmin);
    const earlier = transport.onclose; // the caller's own bookkeeping, if any
    relay.onclose = () => {
      earlier?.();
      void close();
    }; // set before connect: the SDK chains its own handler after it
    await server.connect(relay);
    return connection;
  };
}

/** The identity a request's connection is bound to: its token's name, or none without tokens. */
export const identityOf = (req: Request): string | undefined =>
  req.auth?.clientId ? `token:${req.auth.clientId}` : undefined;

/** Counts a request as activity on its connection until its response is finished. */
export const inFlight = (connections: ConnectionRegistry, connection: Connection, res: Response): void =>
  connections.busyUntil(connection, new Promise((resolve) => res.once("close", resolve)));
