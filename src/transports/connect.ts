import type { Request, Response } from "express";
import type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js";
import type { AdminGate } from "../mcp/admin.js";
import type { ServerContext } from "../mcp/context.js";
import { createServer } from "../mcp/createServer.js";
import { RelayTransport } from "../mcp/relay.js";
import type { Connection, ConnectionKind, ConnectionRegistry } from "./connections.js";

/** Opens one MCP connection over `transport` for `owner` and registers it under `kind` and `id`. */
export type Connect = (
  transport: Transport,
  kind: ConnectionKind,
  id: string,
  owner: string | undefined,
) => Promise<Connection>;

/** What the HTTP transports (Streamable HTTP, legacy SSE) share: the open connections and how to open one. */
export interface HttpTransportDeps {
  connections: ConnectionRegistry;
  connect: Connect;
}

/** The one connect of both HTTP transports; a token with the admin scope may change the library. */
export function connector(ctx: ServerContext, connections: ConnectionRegistry): Connect {
  /**
   * Connects a fresh server object; when the connection ends, the sessions it owned end with it, and when its client
   * went away without ending it, also those the client opened over it and left behind (see `closeLeftBehind`).
   */
  return async (transport, kind, id, owner) => {
    const isAdmin: AdminGate = (extra) => extra.authInfo?.scopes.includes("admin") ?? false;
    const { server, cleanup } = createServer(ctx, isAdmin);
    let closed = false;
    let serverEnds = false;
    let leftAt: number | undefined;
    const close = async () => {
      if (closed) return;
      closed = true;
      connections.delete(kind, id);
      // the server object first: that aborts the connection's requests in flight, which then end cleanly
      await cleanup();
      await ctx.sessions.closeOwnedBy(`connection:${id}`);
      // not before the grace: a client that comes back and uses its sessions keeps them (closeLeftBehind spares those)
      const since = leftAt;
      if (since !== undefined) await connections.afterResumeGrace(since, () => ctx.sessions.closeLeftBehind(id, since));
    };
    const end = async (since?: number) => {
      serverEnds = true;
      leftAt = since;
      await transport.close();
      await close();
    };
    const connection: Connection = { kind, id, owner, close: () => end(), leave: (since) => end(since) };
    connections.add(connection);
    // the server object is connected over the relay, which takes over the transport's handlers when it starts
    const relay = new RelayTransport(transport, isAdmin);
    const earlier = transport.onclose; // the caller's own bookkeeping, if any
    relay.onclose = () => {
      earlier?.();
      // the client ended it: a Streamable HTTP session by its DELETE, a legacy SSE stream only by going away (its
      // connection cannot be resumed, so it closes now and only what it left behind waits for the grace)
      if (!serverEnds && kind === "sse") leftAt = Date.now();
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
