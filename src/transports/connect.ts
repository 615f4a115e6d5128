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
   * Connects a fresh server object. Its end ends nothing else: sessions belong to identities, not connections (see
   * `Owners`), and those nobody uses close when they idle out (sessions.idleMinutes).
   */
  return async (transport, kind, id, owner) => {
    const isAdmin: AdminGate = (extra) => extra.authInfo?.scopes.includes("admin") ?? false;
    const { server, cleanup } = createServer(ctx, isAdmin);
    let closed = false;
    const close = async () => {
      if (closed) return;
      closed = true;
      connections.delete(kind, id);
      // aborts the connection's requests in flight, which then end cleanly
      await cleanup();
    };
    const end = async () => {
      await transport.close();
      await close();
    };
    const connection: Connection = { kind, id, owner, close: end };
    connections.add(connection);
    // the server object is connected over the relay, which takes over the transport's handlers when it starts
    const relay = new RelayTransport(transport, isAdmin);
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
