import type { ErrorRequestHandler, Response } from "express";
import type { Logger } from "../log.js";

export type OpenAIErrorType =
  | "invalid_request_error"
  | "authentication_error"
  | "permission_error"
  | "not_found_error"
  | "rate_limit_error"
  | "server_error";

/** An error in the OpenAI API's shape: `{error: {message, type, param, code}}`, with the HTTP status it goes with. */
export class OpenAIError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly type: OpenAIErrorType,
    readonly param: string | null = null,
    readonly code: string | null = null,
  ) {
    super(message);
    this.name = "OpenAIError";
  }

  get body() {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}

export const invalid = (message: string, param: string | null, code: string | null = "invalid_value") =>
  new OpenAIError(400, message, "invalid_request_error", param, code);

export function sendOpenAIError(res: Response, err: OpenAIError): void {
  if (res.headersSent) {
    res.end();
    return;
  }
  res.status(err.status).json(err.body);
}

interface BodyParserError {
  type?: string;
  status?: number;
}

/** Body-reading failures and anything a route throws, as OpenAI errors without internals (no stack, no path). */
export function openAIErrorHandler(logger: Logger, maxBodyBytes: number): ErrorRequestHandler {
  return (err: unknown, req, res, _next) => {
    if (err instanceof OpenAIError) return sendOpenAIError(res, err);
    const e = (err ?? {}) as BodyParserError;
    if (e.type === "entity.too.large")
      return sendOpenAIError(
        res,
        new OpenAIError(
          413,
          `the request body is over the ${maxBodyBytes}-byte limit (server.maxBodyBytes)`,
          "invalid_request_error",
          null,
          "request_too_large",
        ),
      );
    if (e.type === "entity.parse.failed")
      return sendOpenAIError(res, invalid("the request body is not valid JSON", null, "invalid_json"));
    if (e.status && e.status >= 400 && e.status < 500)
      return sendOpenAIError(
        res,
        invalid("the request body could not be read (its encoding, charset or length)", null, "invalid_body"),
      );
    logger.error({ err, path: req.path }, "OpenAI-compatible request failed");
    sendOpenAIError(res, new OpenAIError(500, "internal server error", "server_error", null, "internal_error"));
  };
}
