import type { ErrorRequestHandler, RequestHandler, Response } from "express";
import type { Logger } from "../log.js";

/** JSON-RPC error codes the HTTP layer answers with (the request never reached an MCP server object). */
export const RPC = { parseError: -32700, invalidRequest: -32600, serverError: -32000, internalError: -32603 } as const;

/**
 * Every HTTP error this server sends: a JSON-RPC error object, never an HTML page, a stack trace or a path.
 * (Express's defaults show all three, and `NODE_ENV` does not change what is written here.)
 */
export function sendError(res: Response, status: number, message: string, code: number = RPC.serverError): void {
  if (res.headersSent) {
    res.end();
    return;
  }
  res.status(status).json({ jsonrpc: "2.0", error: { code, message }, id: null });
}

/** POST bodies must be JSON; anything else is refused before a byte of it is read. */
export const requireJson: RequestHandler = (req, res, next) => {
  if (req.method !== "POST") return next();
  if (!req.is("application/json"))
    return sendError(res, 415, "Content-Type must be application/json", RPC.invalidRequest);
  next();
};

export const notFound: RequestHandler = (_req, res) =>
  sendError(
    res,
    404,
    "no such route; MCP is served at /mcp (Streamable HTTP) and /sse + /messages (legacy SSE)",
    RPC.invalidRequest,
  );

export const methodNotAllowed =
  (allow: string): RequestHandler =>
  (_req, res) => {
    res.setHeader("Allow", allow);
    sendError(res, 405, `method not allowed here; allowed: ${allow}`, RPC.invalidRequest);
  };

interface BodyParserError {
  type?: string;
  status?: number;
  statusCode?: number;
  limit?: number;
  encoding?: string;
  charset?: string;
}

/** Errors of body reading (express.json) and anything thrown by a route, as JSON without internals. */
export function errorHandler(logger: Logger, maxBodyBytes: number): ErrorRequestHandler {
  return (err: unknown, req, res, _next) => {
    const e = (err ?? {}) as BodyParserError;
    switch (e.type) {
      case "entity.too.large":
        return sendError(
          res,
          413,
          `the request body is over the ${maxBodyBytes}-byte limit (server.maxBodyBytes)`,
          RPC.invalidRequest,
        );
      case "entity.parse.failed":
        return sendError(res, 400, "the request body is not valid JSON", RPC.parseError);
      case "encoding.unsupported":
        return sendError(
          res,
          415,
          `unsupported Content-Encoding "${String(e.encoding ?? "").slice(0, 40)}"; send identity, gzip, deflate or br`,
          RPC.invalidRequest,
        );
      case "charset.unsupported":
        return sendError(
          res,
          415,
          `unsupported charset "${String(e.charset ?? "").slice(0, 40)}"; send utf-8`,
          RPC.invalidRequest,
        );
      case "request.aborted":
      case "request.size.invalid":
        return sendError(res, 400, "the request body ended early or its length is wrong", RPC.invalidRequest);
    }
    const status = e.status ?? e.statusCode;
    if (status && status >= 400 && status < 500) return sendError(res, status, "bad request", RPC.invalidRequest);
    logger.error({ err, method: req.method, path: req.path }, "HTTP request failed");
    sendError(res, 500, "internal server error", RPC.internalError);
  };
}
