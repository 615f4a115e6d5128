import { randomBytes } from "node:crypto";
import express, { type Express, type NextFunction, type Request, type Response } from "express";
import type { OAuthTokenVerifier } from "@modelcontextprotocol/sdk/server/auth/provider.js";
import type { AdapterLibrary } from "../library/AdapterLibrary.js";
import type { Logger } from "../log.js";
import type { ChatCompletions } from "./completions.js";
import { OpenAIError, openAIErrorHandler, sendOpenAIError } from "./errors.js";
import { modelNames } from "./models.js";
import { parseChatRequest } from "./request.js";

export interface OpenAIRoutes {
  chat: ChatCompletions;
  library: AdapterLibrary;
  /** The server's bearer tokens; undefined serves without tokens (loopback only). */
  verifier: OAuthTokenVerifier | undefined;
  maxBodyBytes: number;
  logger: Logger;
}

interface Authed extends Request {
  caller?: { identity: string | undefined; owner: string };
}

/**
 * The OpenAI-compatible API under /v1: the server's bearer token before any body is read (errors in OpenAI's
 * shape), the same body limit as MCP, then the routes. Mounted after the Host and Origin checks.
 */
export function mountOpenAI(app: Express, r: OpenAIRoutes): void {
  const router = express.Router();
  router.use(async (req: Authed, res: Response, next: NextFunction) => {
    if (!r.verifier) {
      // no tokens: a loopback server for one user; each run is its own owner, a continuation id its own credential
      req.caller = { identity: undefined, owner: `openai:${randomBytes(9).toString("base64url")}` };
      return next();
    }
    const header = req.headers.authorization ?? "";
    const token = /^Bearer (.+)$/i.exec(header)?.[1];
    try {
      if (!token) throw new Error("missing");
      const info = await r.verifier.verifyAccessToken(token);
      req.caller = { identity: `token:${info.clientId}`, owner: `token:${info.clientId}` };
      next();
    } catch {
      res.setHeader("WWW-Authenticate", 'Bearer realm="weact-mcp"');
      sendOpenAIError(
        res,
        new OpenAIError(
          401,
          token
            ? "unknown bearer token"
            : "missing bearer token: send Authorization: Bearer <token> (the server's server.tokenFile)",
          "authentication_error",
          null,
          "invalid_api_key",
        ),
      );
    }
  });
  router.get("/models", (_req, res) => {
    const created = Math.floor(Date.now() / 1000);
    res.json({
      object: "list",
      data: modelNames(r.library).map((id) => ({ id, object: "model", created, owned_by: "weact-mcp" })),
    });
  });
  router.post("/chat/completions", (req, res, next) => {
    if (!req.is("application/json"))
      return sendOpenAIError(
        res,
        new OpenAIError(
          415,
          "Content-Type must be application/json",
          "invalid_request_error",
          null,
          "unsupported_media_type",
        ),
      );
    next();
  });
  router.post(
    "/chat/completions",
    express.json({ limit: r.maxBodyBytes }),
    async (req: Authed, res: Response, next: NextFunction) => {
      try {
        await r.chat.complete(parseChatRequest(req.body), req.caller!, res);
      } catch (err) {
        next(err);
      }
    },
  );
  router.all("/models", methodNotAllowed("GET"));
  router.all("/chat/completions", methodNotAllowed("POST"));
  router.use((_req, res) =>
    sendOpenAIError(
      res,
      new OpenAIError(
        404,
        "no such route; the OpenAI-compatible API serves GET /v1/models and POST /v1/chat/completions",
        "invalid_request_error",
        null,
        "unknown_url",
      ),
    ),
  );
  router.use(openAIErrorHandler(r.logger, r.maxBodyBytes));
  app.use("/v1", router);
}

const methodNotAllowed = (allow: string) => (_req: Request, res: Response) => {
  res.setHeader("Allow", allow);
  sendOpenAIError(
    res,
    new OpenAIError(
      405,
      `method not allowed here; allowed: ${allow}`,
      "invalid_request_error",
      null,
      "method_not_allowed",
    ),
  );
};
