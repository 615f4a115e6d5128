import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import express, { type Express, type NextFunction, type Request, type Response } from "express";
import type { OAuthTokenVerifier } from "@modelcontextprotocol/sdk/server/auth/provider.js";
import type { ChatCompletions } from "../openai/completions.js";
import type { Logger } from "../log.js";
import { PACKAGE_ROOT } from "../paths.js";
import type { ServerContext } from "../mcp/context.js";
import { isOwnOrigin } from "../http/origin.js";
import { statusData, type Viewer } from "./statusData.js";

export interface StatusRoutes {
  ctx: ServerContext;
  chat: ChatCompletions;
  verifier: OAuthTokenVerifier | undefined;
  /** Host names the Origin of the login form must have (the server's own; its port must be the one addressed). */
  hostnames: readonly string[];
  connections: () => number;
  logger: Logger;
}

const ASSETS = join(PACKAGE_ROOT, "src", "status", "assets");
const COOKIE = "weact_status";
const COOKIE_SECONDS = 12 * 3600;
/** Everything from this server only: no inline script or style, no framing, forms post only here. */
const CSP = "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/**
 * GET /status (the page), /status.json (its data, for scripts too), /status.js and /status.css (its code, as
 * files so the CSP needs no inline script), POST /status/login (the token form: sets an HttpOnly, SameSite=Strict
 * cookie naming a server-side login, never the token itself). Without tokens (loopback only) it is open.
 */
export function mountStatus(app: Express, r: StatusRoutes): void {
  const assets = {
    page: read("status.html"),
    login: read("login.html"),
    js: read("status.js"),
    css: read("status.css"),
  };
  /** Logins made through the form: cookie value -> who, until when. */
  const logins = new Map<string, Viewer & { expires: number }>();

  const secure = (res: Response) => {
    res.setHeader("Content-Security-Policy", CSP);
    res.setHeader("X-Content-Type-Options", "nosniff");
    // not no-referrer: under it Chromium sends "Origin: null" with the login form, which the Origin check refuses
    res.setHeader("Referrer-Policy", "same-origin");
    res.setHeader("Cache-Control", "no-store");
  };
  const viewerOf = async (req: Request): Promise<Viewer | undefined> => {
    if (!r.verifier) return { identity: undefined, admin: true };
    const bearer = /^Bearer (.+)$/i.exec(req.headers.authorization ?? "")?.[1];
    if (bearer) {
      const info = await r.verifier.verifyAccessToken(bearer).catch(() => undefined);
      return info && { identity: `token:${info.clientId}`, admin: info.scopes.includes("admin") };
    }
    const sid = cookieValue(req.headers.cookie, COOKIE);
    const login = sid ? logins.get(sid) : undefined;
    if (!login || login.expires < Date.now()) return undefined;
    return { identity: login.identity, admin: login.admin };
  };
  const loginPage = (res: Response, status: number, message: string) => {
    secure(res);
    res
      .status(status)
      .type("html")
      .send(assets.login.replace("{{message}}", escapeHtml(message)));
  };

  app.get("/favicon.ico", (_req, res) => void res.status(204).end());
  app.get("/status.js", (_req, res) => void (secure(res), res.type("text/javascript").send(assets.js)));
  app.get("/status.css", (_req, res) => void (secure(res), res.type("text/css").send(assets.css)));
  app.get("/status", async (req, res) => {
    // the form itself is a page, not a failure (200): browsers log failed loads as console errors
    if (!(await viewerOf(req))) return loginPage(res, 200, "This server needs a token.");
    secure(res);
    res.type("html").send(assets.page);
  });
  app.get("/status.json", async (req, res) => {
    secure(res);
    const viewer = await viewerOf(req);
    if (!viewer) {
      res.setHeader("WWW-Authenticate", 'Bearer realm="weact-mcp"');
      return void res
        .status(401)
        .json({ error: { message: "log in at /status, or send Authorization: Bearer <token>", code: "unauthorized" } });
    }
    res.json(statusData(r.ctx, viewer, { connections: r.connections(), suspendedRuns: r.chat.suspended }));
  });
  app.post("/status/login", (req: Request, res: Response, next: NextFunction) => {
    // a browser sends Origin with every form post; the global check refused foreign ones, this one also a missing one
    if (!isOwnOrigin(req.headers.origin, req.headers.host, r.hostnames))
      return loginPage(res, 403, "The login form must be posted from this server's own page.");
    if (!req.is("application/x-www-form-urlencoded"))
      return loginPage(res, 415, "The login form posts application/x-www-form-urlencoded.");
    next();
  });
  app.post(
    "/status/login",
    express.urlencoded({ extended: false, limit: 4096, parameterLimit: 4 }),
    async (req: Request, res: Response) => {
      if (!r.verifier) return void res.redirect(303, "/status");
      const token = typeof req.body?.token === "string" ? req.body.token.trim() : "";
      const info = token ? await r.verifier.verifyAccessToken(token).catch(() => undefined) : undefined;
      if (!info) return loginPage(res, 401, "Unknown token.");
      for (const [sid, l] of logins) if (l.expires < Date.now()) logins.delete(sid);
      const sid = randomBytes(24).toString("base64url");
      logins.set(sid, {
        identity: `token:${info.clientId}`,
        admin: info.scopes.includes("admin"),
        expires: Date.now() + COOKIE_SECONDS * 1000,
      });
      r.logger.info({ client: info.clientId }, "status page login");
      res.setHeader("Set-Cookie", `${COOKIE}=${sid}; HttpOnly; SameSite=Strict; Path=/; Max-Age=${COOKIE_SECONDS}`);
      res.redirect(303, "/status");
    },
  );
}

const read = (name: string) => readFileSync(join(ASSETS, name), "utf8");

function cookieValue(header: string | undefined, name: string): string | undefined {
  for (const part of (header ?? "").split(";")) {
    const [k, ...v] = part.trim().split("=");
    if (k === name) return v.join("=");
  }
  return undefined;
}

const escapeHtml = (s: string) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
