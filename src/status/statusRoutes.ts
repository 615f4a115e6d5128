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
import { StatusLogins, type StatusLoginLimits } from "./StatusLogins.js";

export interface StatusRoutes {
  ctx: ServerContext;
  chat: ChatCompletions;
  verifier: OAuthTokenVerifier | undefined;
  /** Host names the Origin of the login form must have (the server's own; its port must be the one addressed). */
  hostnames: readonly string[];
  connections: () => number;
  /** How many form logins may live at once (server.maxStatusLoginsPerClient, server.maxStatusLogins). */
  logins: Omit<StatusLoginLimits, "seconds">;
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
 * cookie naming a server-side login, never the token itself), POST /status/logout (ends that login and clears the
 * cookie). Without tokens (loopback only) it is open.
 */
export function mountStatus(app: Express, r: StatusRoutes): void {
  const assets = {
    page: read("status.html"),
    login: read("login.html"),
    js: read("status.js"),
    css: read("status.css"),
  };
  const logins = new StatusLogins({ ...r.logins, seconds: COOKIE_SECONDS });

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
    const login = sid ? logins.find(sid) : undefined;
    return login && { ...login, loggedIn: true };
  };
  /** Form posts must come from this server's own page: a browser sends Origin with each, a missing one is refused. */
  const ownForm = (form: string) => (req: Request, res: Response, next: NextFunction) => {
    // the global check refused foreign Origins; this one also a missing one
    if (!isOwnOrigin(req.headers.origin, req.headers.host, r.hostnames))
      return loginPage(res, 403, `The ${form} form must be posted from this server's own page.`);
    next();
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
  app.post("/status/login", ownForm("login"), (req: Request, res: Response, next: NextFunction) => {
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
      const login = logins.start({ identity: `token:${info.clientId}`, admin: info.scopes.includes("admin") });
      if ("refused" in login) return loginPage(res, 429, login.refused);
      // endedOldest: the client was at server.maxStatusLoginsPerClient, so its own oldest login ended
      r.logger.info({ client: info.clientId, endedOldest: login.endedOldest }, "status page login");
      res.setHeader("Set-Cookie", cookie(login.id, COOKIE_SECONDS));
      res.redirect(303, "/status");
    },
  );
  app.post("/status/logout", ownForm("logout"), (req: Request, res: Response) => {
    const sid = cookieValue(req.headers.cookie, COOKIE);
    if (sid && logins.end(sid)) r.logger.info("status page logout");
    // cleared whether or not the login still lived: the browser forgets it either way
    res.setHeader("Set-Cookie", cookie("", 0));
    res.redirect(303, "/status");
  });
}

/** The login cookie: HttpOnly (no script reads it), SameSite=Strict (no other site's request carries it). */
const cookie = (value: string, maxAge: number) =>
  `${COOKIE}=${value}; HttpOnly; SameSite=Strict; Path=/; Max-Age=${maxAge}`;

const read = (name: string) => readFileSync(join(ASSETS, name), "utf8");

function cookieValue(header: string | undefined, name: string): string | undefined {
  for (const part of (header ?? "").split(";")) {
    const [k, ...v] = part.trim().split("=");
    if (k === name) return v.join("=");
  }
  return undefined;
}

const escapeHtml = (s: string) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
