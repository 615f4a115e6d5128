import type { Logger } from "../log.js";
import { LimitError, SessionNotFoundError } from "./errors.js";
import type { Session } from "./Session.js";

/**
 * The config's `sessions` section as sessions read it (src/config declares and checks it; this states what is used).
 */
export interface SessionsConfig {
  keepToolResults: number;
  idleMinutes: number;
  maxSessions: number;
  maxSessionsPerClient: number;
  maxQueuedGenerations: number;
  maxQueuedPerClient: number;
  /** Engine session slots one client may hold (default: the engine's total minus one). */
  maxSlotsPerClient?: number;
  defaultMaxTokens: number;
}

/**
 * The open sessions: who owns which, the limits on how many (server, client, the client's share of the engine's
 * session slots), and expiry of idle ones. Someone else's session looks exactly like a missing one.
 */
export class SessionRegistry {
  private readonly sessions = new Map<string, Session>();
  /** Sessions being opened, per owner (counted against the limits). */
  private readonly opening = new Map<string, number>();
  private readonly maxSlotsPerClient: number;
  private readonly sweeper: NodeJS.Timeout;

  constructor(
    private readonly config: SessionsConfig,
    /** The engine's session slots: every open session holds one. */
    private readonly engineSlots: number,
    private readonly logger: Logger,
  ) {
    // one below the engine's total: another client always finds a slot, and a lone client (stdio) keeps nearly all
    this.maxSlotsPerClient = config.maxSlotsPerClient ?? Math.max(1, engineSlots - 1);
    this.sweeper = setInterval(() => void this.expireIdle(), Math.min(60_000, (config.idleMinutes * 60_000) / 4));
    this.sweeper.unref();
  }

  /** Refuses a new session of `owner` when a limit is reached; sessions still being opened count too. */
  admit(owner: string): void {
    // sessions still being opened count too, so concurrent creates cannot pass the limits together
    const mine = this.list(owner).length + (this.opening.get(owner) ?? 0);
    if (this.sessions.size + this.openingTotal() >= this.config.maxSessions)
      throw new LimitError(
        `the server holds its maximum of ${this.config.maxSessions} sessions (sessions.maxSessions); close one (close_session) or wait for idle ones to expire`,
      );
    if (mine >= this.config.maxSessionsPerClient)
      throw new LimitError(
        `this client holds its maximum of ${this.config.maxSessionsPerClient} sessions (sessions.maxSessionsPerClient); close one with close_session`,
      );
    // every session holds one of the engine's sequences while it is open
    if (mine >= this.maxSlotsPerClient)
      throw new LimitError(
        `this client holds ${mine} of the engine's ${this.engineSlots} session slots, its share (sessions.maxSlotsPerClient = ${this.maxSlotsPerClient}); close one with close_session`,
      );
  }

  /** Adds the session `open` makes; while it is being opened it counts against `owner`'s limits. */
  async add(owner: string, open: () => Promise<Session>): Promise<Session> {
    this.opening.set(owner, (this.opening.get(owner) ?? 0) + 1);
    let session: Session;
    try {
      session = await open();
    } finally {
      const left = (this.opening.get(owner) ?? 1) - 1;
      if (left > 0) this.opening.set(owner, left);
      else this.opening.delete(owner);
    }
    this.sessions.set(session.id, session);
    return session;
  }

  private openingTotal(): number {
    return [...this.opening.values()].reduce((a, b) => a + b, 0);
  }

  /** The caller's session; someone else's is reported exactly like a missing one. */
  get(owner: string, id: string): Session {
    const session = this.sessions.get(id);
    if (!session || session.owner !== owner) throw new SessionNotFoundError(id);
    return session;
  }

  list(owner: string): Session[] {
    return [...this.sessions.values()].filter((s) => s.owner === owner);
  }

  all(): Session[] {
    return [...this.sessions.values()];
  }

  async close(owner: string, id: string): Promise<void> {
    const session = this.get(owner, id);
    await session.lock.run(async () => {
      try {
        await session.engine.close();
      } finally {
        this.sessions.delete(id);
      }
    });
    this.logger.info({ session: id }, "session closed");
  }

  /** Closes every session of `owner`. */
  async closeOwnedBy(owner: string): Promise<void> {
    await Promise.all(this.list(owner).map((s) => this.close(owner, s.id)));
  }

  async dispose(): Promise<void> {
    clearInterval(this.sweeper);
    await Promise.all(this.all().map((s) => this.close(s.owner, s.id)));
  }

  private async expireIdle(): Promise<void> {
    const cutoff = Date.now() - this.config.idleMinutes * 60_000;
    for (const s of this.all()) {
      if (s.lastActiveAt < cutoff && s.lock.depth === 0) {
        this.logger.info({ session: s.id, owner: s.owner }, "session expired after idling");
        await this.close(s.owner, s.id).catch((err) => this.logger.error({ err }, "closing an idle session failed"));
      }
    }
  }
}
