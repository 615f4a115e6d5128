import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { InvalidTokenError } from "@modelcontextprotocol/sdk/server/auth/errors.js";
import type { OAuthTokenVerifier } from "@modelcontextprotocol/sdk/server/auth/provider.js";

/** The shortest token a token file may hold. */
const MIN_TOKEN_CHARS = 16;

const digest = (token: string) => createHash("sha256").update(token).digest("hex");

/**
 * Bearer tokens from a file: one per line, "name:token" or just "token" (named by its hash prefix).
 * The name is the client identity that owns its sessions. Tokens are kept only as hashes.
 */
export function loadTokenVerifier(sources: readonly { file: string; scopes: string[] }[]): {
  verifier: OAuthTokenVerifier;
  clients: number;
} {
  const byDigest = new Map<string, { name: string; scopes: string[] }>();
  for (const { file, scopes } of sources) {
    const lines = readFileSync(file, "utf8")
      .split(/\r?\n/)
      .map((l) => l.trim())
      .filter((l) => l && !l.startsWith("#"));
    for (const line of lines) {
      const sep = line.indexOf(":");
      const [name, token] =
        sep > 0 ? [line.slice(0, sep), line.slice(sep + 1)] : [`token-${digest(line).slice(0, 8)}`, line];
      // a token is the only thing between a stranger and the server: one short enough to guess is refused
      if (token.length < MIN_TOKEN_CHARS)
        throw new Error(
          `${file}: the token of "${name}" is shorter than ${MIN_TOKEN_CHARS} characters; use a random one (openssl rand -hex 24)`,
        );
      byDigest.set(digest(token), { name, scopes });
    }
    if (!lines.length) throw new Error(`${file}: no tokens in it`);
  }
  const verifier: OAuthTokenVerifier = {
    async verifyAccessToken(token) {
      const client = byDigest.get(digest(token));
      if (!client) throw new InvalidTokenError("unknown bearer token");
      // The SDK's middleware refuses AuthInfo without a numeric expiry; static tokens do not expire.
      return {
        token,
        clientId: client.name,
        scopes: client.scopes,
        expiresAt: Math.floor(Date.now() / 1000) + 365 * 24 * 3600,
      };
    },
  };
  return { verifier, clients: byDigest.size };
}
