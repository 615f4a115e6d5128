import { createHash, createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import { z } from "zod";
import { SessionError } from "../sessions/errors.js";

/** Request metadata the SDK passes to handlers, as far as ownership needs it. */
export interface RequestIdentity {
  authInfo?: { clientId: string };
  /** The MCP transport session (Streamable HTTP, legacy SSE), if the request came over one. */
  sessionId?: string;
  /** Set by the HTTP transports; absent on stdio. */
  requestInfo?: unknown;
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
 * Who owns the sessions and traces a request creates or names. Ownership belongs to an identity, never to a connection,
 * so nothing is lost when a connection ends (idle expiry closes what nobody uses):
 *
 * - a bearer token: its name (`token:NAME`);
 * - no token: an owner key, a secret `create_session` returns and the client sends back (`owner_key`); a request over
 *   an MCP transport session that sends none uses its connection's own key, so a 2025-11-25 client needs none;
 * - stdio: the one local client (`stdio`).
 *
 * Keys are `wk_` + a nonce + its HMAC under a secret of this process: only keys this server issued are accepted (a
 * client cannot choose a guessable one), and none survives a restart (its sessions do not either). Owners are named
 * by a digest of the nonce, so logs and traces never hold a key.
 */
export class Owners {
  private readonly secret = randomBytes(32);

  /** The owner of what the request names; a connectionless, tokenless request must send its key. */
  of(extra: RequestIdentity, key?: string): string {
    const found = this.find(extra, key);
    if (found !== undefined) return found;
    throw new OwnerKeyError(
      `owner_key is required without a bearer token over no MCP session: send the owner_key that create_session (or run_task) returned, as the tool's owner_key argument or a resource read's _meta "${OWNER_KEY_META}"`,
    );
  }

  /** The owner the request names, or none (a connectionless, tokenless request without a key: it owns nothing). */
  find(extra: RequestIdentity, key?: string): string | undefined {
    return this.known(extra, key)?.owner;
  }

  /** The owner a new session (or run) of the request gets, and the key to return to the client (none for a token or stdio). */
  forNew(extra: RequestIdentity, key?: string): { owner: string; key?: string } {
    return this.known(extra, key) ?? this.keyed(randomBytes(NONCE_BYTES));
  }

  private known(extra: RequestIdentity, key: string | undefined): { owner: string; key?: string } | undefined {
    if (extra.authInfo?.clientId) return { owner: `token:${extra.authInfo.clientId}` };
    if (key !== undefined) return this.keyed(this.nonceOf(key));
    if (extra.sessionId) return this.keyed(this.mac(`connection\0${extra.sessionId}`).subarray(0, NONCE_BYTES));
    if (extra.requestInfo === undefined) return { owner: "stdio" };
    return undefined;
  }

  private keyed(nonce: Buffer): { owner: string; key: string } {
    const key = `${PREFIX}${nonce.toString("base64url")}${this.mac(nonce).subarray(0, NONCE_BYTES).toString("base64url")}`;
    return { owner: `key:${createHash("sha256").update(nonce).digest("base64url").slice(0, 22)}`, key };
  }

  /** The nonce of a key this server issued; anything else is refused. */
  private nonceOf(key: string): Buffer {
    const body = key.startsWith(PREFIX) ? Buffer.from(key.slice(PREFIX.length), "base64url") : Buffer.alloc(0);
    const nonce = body.subarray(0, NONCE_BYTES);
    const mac = body.subarray(NONCE_BYTES);
    if (mac.length !== NONCE_BYTES || !timingSafeEqual(mac, this.mac(nonce).subarray(0, NONCE_BYTES))) {
      throw new OwnerKeyError(
        "owner_key is not a key this server issued (or it was issued before the server restarted, with the sessions it owned): send the owner_key create_session returned, or leave it out to get a new one",
      );
    }
    return nonce;
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
