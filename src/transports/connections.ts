import type { Logger } from "../log.js";

export interface ConnectionLimits {
  /** Open connections in all (the only cap without tokens). */
  maxConnections: number;
  /** Open connections per token identity. */
  maxConnectionsPerClient: number;
  /** A connection with no request in flight and none for this long is closed. */
  idleSeconds: number;
  /** How often a quiet event stream gets a keepalive comment (server.streamKeepaliveSeconds). */
  keepaliveSeconds: number;
}

export type ConnectionKind = "streamable" | "sse";

/**
 * How long a client whose stream dropped has to open it again (the MCP SDK's client retries after 1 s, then 1.5 s
 * more) before it counts as gone.
 */
export const STREAM_RESUME_GRACE_MS = 5_000;

/** One MCP connection (a Streamable HTTP session or a legacy SSE stream) and who opened it. */
export interface Connection {
  kind: ConnectionKind;
  id: string;
  /** The token identity that opened it; undefined without tokens (the id itself is then the only credential). */
  owner: string | undefined;
  close: () => Promise<void>;
}

interface Tracked extends Connection {
  lastActive: number;
  inFlight: number;
  /** When the client's stream dropped, if it has not come back since. */
  streamLost?: number;
}

/**
 * The open MCP connections: who owns each, how many each identity holds, and which have idled out.
 * A lookup with another identity finds nothing, exactly as an unknown id (ids are no capability across tokens).
 */
export class ConnectionRegistry {
  private readonly open = new Map<string, Tracked>();
  private readonly sweeper: NodeJS.Timeout;

  constructor(
    private readonly limits: ConnectionLimits,
    private readonly logger: Logger,
  ) {
    this.sweeper = setInterval(
      () => this.closeIdle(),
      Math.min(60_000, Math.max(100, (limits.idleSeconds * 1000) / 4)),
    );
    this.sweeper.unref();
  }

  get size(): number {
    return this.open.size;
  }

  get keepaliveMs(): number {
    return this.limits.keepaliveSeconds * 1000;
  }

  /** Why `owner` may not open another connection now, or undefined. */
  refusal(owner: string | undefined): string | undefined {
    if (owner !== undefined) {
      const held = [...this.open.values()].filter((c) => c.owner === owner).length;
      if (held >= this.limits.maxConnectionsPerClient) {
        return `this client holds its maximum of ${this.limits.maxConnectionsPerClient} MCP connections (server.maxConnectionsPerClient); close one (DELETE /mcp) or let idle ones expire (server.connectionIdleSeconds)`;
      }
    }
    if (this.open.size >= this.limits.maxConnections) {
      return `the server holds its maximum of ${this.limits.maxConnections} MCP connections (server.maxConnections); retry after idle ones expire (server.connectionIdleSeconds)`;
    }
    return undefined;
  }

  add(connection: Connection): void {
    this.open.set(key(connection.kind, connection.id), { ...connection, lastActive: Date.now(), inFlight: 0 });
  }

  delete(kind: ConnectionKind, id: string): void {
    this.open.delete(key(kind, id));
  }

  /** The connection if it exists and `owner` opened it; someone else's is undefined like a missing one. */
  lookup(kind: ConnectionKind, id: string, owner: string | undefined): Connection | undefined {
    const connection = this.open.get(key(kind, id));
    if (!connection || connection.owner !== owner) return undefined;
    connection.lastActive = Date.now();
    connection.streamLost = undefined; // a request: its client is there
    return connection;
  }

  /**
   * The client's stream dropped without the client ending the connection (a crash, a killed process): unless the
   * client opens it again or sends a request within STREAM_RESUME_GRACE_MS, with none in flight, the client is
   * gone and the connection is closed, rather than holding its place until it idles out (what becomes of its
   * sessions is the owners' rule: `connector`).
   */
  streamDropped(connection: Connection): void {
    const tracked = this.open.get(key(connection.kind, connection.id));
    if (!tracked) return;
    tracked.streamLost = Date.now();
    this.lookAgainLater(tracked);
  }

  /** A request on the connection is in flight until `done` settles: the connection is not idle meanwhile. */
  busyUntil(connection: Connection, done: Promise<unknown>): void {
    const tracked = this.open.get(key(connection.kind, connection.id));
    if (!tracked) return;
    tracked.inFlight++;
    void done.finally(() => {
      tracked.inFlight--;
      tracked.lastActive = Date.now();
      if (tracked.streamLost !== undefined) this.lookAgainLater(tracked);
    });
  }

  async closeAll(): Promise<void> {
    clearInterval(this.sweeper);
    await Promise.all([...this.open.values()].map((c) => c.close()));
  }

  private lookAgainLater(tracked: Tracked, ms = STREAM_RESUME_GRACE_MS): void {
    setTimeout(() => this.leaveIfGone(tracked), ms).unref();
  }

  private leaveIfGone(tracked: Tracked): void {
    const { streamLost } = tracked;
    if (this.open.get(key(tracked.kind, tracked.id)) !== tracked || streamLost === undefined) return;
    if (tracked.inFlight > 0) return; // the request looks again when it ends (`busyUntil`)
    const quiet = Date.now() - Math.max(streamLost, tracked.lastActive);
    if (quiet < STREAM_RESUME_GRACE_MS) return this.lookAgainLater(tracked, STREAM_RESUME_GRACE_MS - quiet + 1);
    this.logger.info({ kind: tracked.kind, owner: tracked.owner }, "MCP connection closed: its client went away");
    this.open.delete(key(tracked.kind, tracked.id));
    void tracked
      .close()
      .catch((err) => this.logger.error({ err }, "closing a connection whose client went away failed"));
  }

  private closeIdle(): void {
    const cutoff = Date.now() - this.limits.idleSeconds * 1000;
    for (const connection of [...this.open.values()]) {
      if (connection.inFlight > 0 || connection.lastActive >= cutoff) continue;
      this.logger.info({ kind: connection.kind, owner: connection.owner }, "MCP connection closed after idling");
      this.open.delete(key(connection.kind, connection.id));
      void connection.close().catch((err) => this.logger.error({ err }, "closing an idle MCP connection failed"));
    }
  }
}

const key = (kind: ConnectionKind, id: string) => `${kind}:${id}`;
