import type { ErrorRequestHandler, Response } from "express";
import { ZodError } from "zod";
import { ContextOverflowError, SteeredCallError } from "../engine/index.js";
import { InvalidPolicyError } from "../harness/errors.js";
import type { Logger } from "../log.js";
import { BusyError, InputTooLongError, LimitError } from "../sessions/errors.js";

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

/** What limited a run's turns, to name the fix when a forced call could not fit one. */
export interface TurnLimits {
  /**
   * The request's own limit as sent (`max_completion_tokens` or `max_tokens`); undefined on a continuation, whose run
   * keeps the budget of the request that started it.
   */
  requested: { param: "max_tokens" | "max_completion_tokens"; tokens: number } | undefined;
  /** The server's cap on one model turn (`harness.maxTokensPerTurn`). */
  maxTokensPerTurn: number;
}

/** What went wrong in a run, as the OpenAI error a client can act on; the message names the setting to change. */
export function toOpenAIError(err: unknown, cancelled: boolean, limits?: TurnLimits): OpenAIError {
  if (err instanceof OpenAIError) return err;
  if (err instanceof InvalidPolicyError)
    return new OpenAIError(404, err.message, "invalid_request_error", "model", "model_not_found");
  if (err instanceof LimitError) {
    const param = err.message.startsWith("tools:") ? "tools" : null;
    return param
      ? new OpenAIError(400, err.message, "invalid_request_error", param, "invalid_value")
      : new OpenAIError(429, err.message, "rate_limit_error", null, "session_limit");
  }
  // the harness's own argument checks (e.g. the task's length cap)
  if (err instanceof ZodError)
    return new OpenAIError(
      400,
      `messages: ${err.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")}`,
      "invalid_request_error",
      "messages",
      "invalid_value",
    );
  if (err instanceof BusyError) return new OpenAIError(429, err.message, "rate_limit_error", null, "busy");
  if (err instanceof InputTooLongError)
    return new OpenAIError(400, err.message, "invalid_request_error", err.field, "context_length_exceeded");
  if (err instanceof ContextOverflowError)
    return new OpenAIError(400, err.message, "invalid_request_error", "messages", "context_length_exceeded");
  if (err instanceof SteeredCallError) return forcedCallError(err, limits);
  if (cancelled)
    return new OpenAIError(
      499,
      "the run was cancelled (the client went away, or its continuation expired)",
      "invalid_request_error",
      null,
      "cancelled",
    );
  return new OpenAIError(500, "the run failed; its trace records where", "server_error", null, "run_failed");
}

/**
 * A `tool_choice` that forced a call the turn could not hold: refused before anything was generated, so the fix is the
 * request's (or, past what the request asked, the server's limits).
 */
function forcedCallError(err: SteeredCallError, limits: TurnLimits | undefined): OpenAIError {
  const short = err.shortfall;
  if (!short) return new OpenAIError(400, err.message, "invalid_request_error", "tool_choice", "invalid_value");
  const what = `tool_choice forces a call of ${short.call}, which may take ${short.needed} tokens on this model`;
  if (short.limit === "context")
    return new OpenAIError(
      400,
      `${what}, but the context window leaves the turn ${short.available}: shorten the messages or raise model.contextSize`,
      "invalid_request_error",
      "messages",
      "context_length_exceeded",
    );
  const requested = limits?.requested;
  if (requested && requested.tokens < short.needed)
    return new OpenAIError(
      400,
      `${what}, but ${requested.param} is ${requested.tokens}: raise ${requested.param} to ${short.needed} or more`,
      "invalid_request_error",
      requested.param,
      "max_tokens_too_small",
    );
  const cap = limits ? `harness.maxTokensPerTurn (${limits.maxTokensPerTurn})` : "harness.maxTokensPerTurn";
  return new OpenAIError(
    400,
    `${what}, but the turn had ${short.available}: the least of what is left of the run's max_tokens (set by the request that started it), ${cap} and half the room left in the context window; shorten the messages, or raise harness.maxTokensPerTurn or model.contextSize`,
    "invalid_request_error",
    "tool_choice",
    "call_does_not_fit",
  );
}
