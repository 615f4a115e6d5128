import { maxHeaderSize, STATUS_CODES, type Server, type ServerResponse } from "node:http";
import type { Duplex } from "node:stream";
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
  res.status(status).json(errorBody(code, message));
}

const errorBody = (code: number, message: string) => ({ jsonrpc: "2.0", error: { code, message }, id: null });

/**
 * Answers, as JSON like every other error, what Node's HTTP server would answer with an empty body: a request that
 * did not arrive whole within `bodyTimeoutSeconds` (the server's `requestTimeout` and `headersTimeout`), headers too
 * large, bytes that are not HTTP. A socket whose response has already started, or that cannot be written, is closed.
 */
export function answerClientErrors(server: Server, bodyTimeoutSeconds: number): void {
  /** The response in progress on each socket, until its request was read whole and it finished. */
  const responding = new WeakMap<Duplex, ServerResponse>();
  server.on("request", (req, res: ServerResponse) => {
    responding.set(req.socket, res);
    res.once("finish", () => {
      if (req.complete && responding.get(req.socket) === res) responding.delete(req.socket);
    });
  });
  server.on("clientError", (err: NodeJS.ErrnoException, socket: Duplex) => {
    if (err.code === "ECONNRESET" || !socket.writable || responding.get(socket)?.headersSent)
      return void socket.destroy();
    const [status, message] =
      err.code === "ERR_HTTP_REQUEST_TIMEOUT"
        ? [
            408,
            `the request did not arrive whole within ${bodyTimeoutSeconds} s (server.bodyTimeoutSeconds); send its headers and body at once`,
          ]
        : err.code === "HPE_HEADER_OVERFLOW"
          ? [431, `the request's headers are over ${maxHeaderSize} bytes; send fewer or shorter headers`]
          : [400, "the request is not valid HTTP/1.1"];
    const body = JSON.stringify(errorBody(RPC.invalidRequest, message));
    socket.end(
      `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: application/json; charset=utf-8\r\n` +
        `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
      () => socket.destroy(),
    );
  });
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
