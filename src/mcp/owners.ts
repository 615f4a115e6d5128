import { createHash, createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import { z } from "zod";
import { SessionError } from "../sessions/errors.js";

/** What ownership reads of a request (an `McpCall` has it). */
export interface RequestIdentity {
  authInfo?: { clientId: string };
  /** The MCP connection (a 2025-era transport session) the request came over, if any. */
  sessionId?: string;
  /** stdio serves the one local client; HTTP serves strangers. */
  transport: "stdio" | "http";
  _meta?: Record<string, unknown>;
}

/** Where a resource read (which has no arguments) carries the owner key. */
export const OWNER_KEY_META = "weact-mcp/owner_key";

/** The argument a tool call carries its owner key in. */
export const ownerKey = z
  .string()
  .min(1)
  .max(128)
  .optional()
  .describe(
    "The owner_key create_session returned. Needed without a bearer token when the request comes over no MCP session (MCP 2026-07-28, or a new connection); ignored with a token.",
  );

/** A key this server did not issue, or issued before it restarted. */
export class OwnerKeyError extends SessionError {
  readonly code = "owner_key_invalid";
}

const NONCE_BYTES = 18;
const PREFIX = "wk_";

/**
 * Who owns the sessions and traces a request creates or names. Ownership belongs to an identity, not to a connection:
 *
 * - a bearer token: its name (`token:NAME`); its sessions outlive every connection and close when idle
 *   (sessions.idleMinutes);
 * - no token: an owner key, a secret `create_session` returns and the client sends back (`owner_key`). A request over
 *   an MCP connection that sends none uses the connection's own key, so a 2025-11-25 client needs none. When that
 *   connection ends, the sessions of its key end too unless the key was ever sent back (`claimed`): a client that
 *   never held its key cannot reach them again, and they would hold engine slots until they idled out. A key sent back
 *   is held by its client, which may return from anywhere (or from no connection: 2026-07-28);
 * - stdio: the one local client (`stdio`).
 *
 * Keys are `wk_` + a nonce + its tag (an HMAC under a secret of this process): only keys this server issued are
 * accepted (a client cannot choose a guessable one), and none survives a restart (its sessions do not either). Owners
 * are named by a digest of the nonce, so logs and traces never hold a key.
 */
export class Owners {
  private readonly secret = randomBytes(32);
  /** The owners of the open connections' own keys, and those of them whose key has been sent back. */
  private readonly connectionOwners = new Set<string>();
  private readonly claimed = new Set<string>();

  /** The owner of what the request names; a connectionless, tokenless request must send its key. */
  of(extra: RequestIdentity, key?: string): string {
    const found = this.find(extra, key);
    if (found !== undefined) return found;
    throw new OwnerKeyError(
      `owner_key is required without a bearer token over no MCP session: send the owner_key that create_session (or run_task) returned, as the tool's owner_key argument or a resource read's _meta "${OWNER_KEY_META}"`,
    );
  }

  /**
   * The owner the request names, or none (a connectionless, tokenless request without a key owns nothing); a key this
   * server did not issue is refused (OwnerKeyError).
   */
  find(extra: RequestIdentity, key?: string): string | undefined {
    return this.known(extra, key)?.owner;
  }

  /** The owner a new session (or run) of the request gets, and the key to return to the client (none for a token or stdio). */
  forNew(extra: RequestIdentity, key?: string): { owner: string; key?: string } {
    return this.known(extra, key) ?? this.keyed(randomBytes(NONCE_BYTES));
  }

  /** A connection opened: the owner its own key names. */
  connectionOpened(id: string): string {
    const { owner } = this.ofConnection(id);
    this.connectionOwners.add(owner);
    return owner;
  }

  /** A connection ended: its own key's owner, and whether that key was ever sent back (its sessions then stay). */
  connectionEnded(id: string): { owner: string; claimed: boolean } {
    const { owner } = this.ofConnection(id);
    const claimed = this.claimed.delete(owner);
    this.connectionOwners.delete(owner);
    return { owner, claimed };
  }

  private known(extra: RequestIdentity, key: string | undefined): { owner: string; key?: string } | undefined {
    if (extra.authInfo?.clientId) return { owner: `token:${extra.authInfo.clientId}` };
    if (key !== undefined) {
      const found = this.keyed(this.nonceOf(key));
      if (this.connectionOwners.has(found.owner)) this.claimed.add(found.owner);
      return found;
    }
    if (extra.sessionId) return this.ofConnection(extra.sessionId);
    if (extra.transport === "stdio") return { owner: "stdio" };
    return undefined;
  }

  private ofConnection(id: string): { owner: string; key: string } {
    return this.keyed(this.mac(`connection\0${id}`).subarray(0, NONCE_BYTES));
  }

  private keyed(nonce: Buffer): { owner: string; key: string } {
    const key = `${PREFIX}${nonce.toString("base64url")}${this.tag(nonce).toString("base64url")}`;
    return { owner: `key:${createHash("sha256").update(nonce).digest("base64url").slice(0, 22)}`, key };
  }

  /** The nonce of a key this server issued; anything else is refused. */
  private nonceOf(key: string): Buffer {
    const body = key.startsWith(PREFIX) ? Buffer.from(key.slice(PREFIX.length), "base64url") : Buffer.alloc(0);
    const nonce = body.subarray(0, NONCE_BYTES);
    const tag = body.subarray(NONCE_BYTES);
    // one spelling per key: base64url also decodes padded and other variants of the same bytes
    const canonical = `${PREFIX}${body.toString("base64url")}` === key;
    if (!canonical || tag.length !== NONCE_BYTES || !timingSafeEqual(tag, this.tag(nonce))) {
      throw new OwnerKeyError(
        "owner_key is not a key this server issued (or it was issued before the server restarted, with the sessions it owned): send the owner_key create_session returned, or leave it out to get a new one",
      );
    }
    return nonce;
  }

  private tag(nonce: Buffer): Buffer {
    return this.mac(Buffer.concat([Buffer.from("tag\0"), nonce])).subarray(0, NONCE_BYTES);
  }

  private mac(data: Buffer | string): Buffer {
    return createHmac("sha256", this.secret).update(data).digest();
  }
}

/** The owner key a resource read carries in its `_meta`. */
export const resourceOwnerKey = (extra: RequestIdentity): string | undefined => {
  const value = extra._meta?.[OWNER_KEY_META];
  return typeof value === "string" ? value : undefined;
};
