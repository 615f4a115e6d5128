import { randomBytes } from "node:crypto";
import type { Viewer } from "./statusData.js";

export interface StatusLoginLimits {
  /** Live logins per token identity (server.maxStatusLoginsPerClient): past it, its own oldest ends. */
  maxPerClient: number;
  /** Live logins in all (server.maxStatusLogins): past it, a new one is refused. */
  max: number;
  /** How long a login lives. */
  seconds: number;
}

interface Login {
  viewer: Viewer & { identity: string };
  expires: number;
}

/**
 * The status page's logins through its token form: a random id (the cookie's value, never the token) for who logged in,
 * until it expires or is logged out. Bounded, since every login is memory a client makes by posting its token: an
 * identity at its cap ends its own oldest login (a person's new browser is never locked out by a forgotten one, and
 * nobody ends another's login); a server at its cap refuses new ones, since ending the oldest there would let one
 * client's logins end everyone else's (reaching it takes many identities, each at most at its own cap).
 */
export class StatusLogins {
  /** By id, in the order made: the first of an identity is its oldest. */
  private readonly logins = new Map<string, Login>();

  constructor(private readonly limits: StatusLoginLimits) {}

  /**
   * A new login for `viewer`: its id, and whether it ended the identity's own oldest login to stay within its cap; or
   * why none can be made now.
   */
  start(viewer: Viewer & { identity: string }): { id: string; endedOldest: boolean } | { refused: string } {
    this.forgetExpired();
    const own = [...this.logins].filter(([, l]) => l.viewer.identity === viewer.identity).map(([id]) => id);
    const ended = own.length >= this.limits.maxPerClient ? own[0] : undefined;
    if (ended === undefined && this.logins.size >= this.limits.max)
      return {
        refused: `the server holds its maximum of ${this.limits.max} status page logins (server.maxStatusLogins); retry after some log out or expire, or send Authorization: Bearer <token>`,
      };
    if (ended !== undefined) this.logins.delete(ended);
    const id = randomBytes(24).toString("base64url");
    this.logins.set(id, { viewer, expires: Date.now() + this.limits.seconds * 1000 });
    return { id, endedOldest: ended !== undefined };
  }

  /** Who logged in with `id`, while the login lives. */
  find(id: string): Viewer | undefined {
    const login = this.logins.get(id);
    if (!login) return undefined;
    if (login.expires > Date.now()) return login.viewer;
    this.logins.delete(id);
    return undefined;
  }

  /** Ends the login `id`; false when there was none. */
  end(id: string): boolean {
    return this.logins.delete(id);
  }

  private forgetExpired(): void {
    const now = Date.now();
    for (const [id, l] of this.logins) if (l.expires <= now) this.logins.delete(id);
  }
}
