/** Errors of the session layer: each becomes a tool error the client (or model) can read and act on. */
export abstract class SessionError extends Error {
  abstract readonly code: string;
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/** Unknown, closed, expired, or owned by someone else: indistinguishable on purpose. */
export class SessionNotFoundError extends SessionError {
  readonly code = "session_not_found";
  constructor(id: string) {
    super(
      `no session "${id}" for this client (unknown, closed, expired, or owned by another client); create one with create_session`,
    );
  }
}

export class PendingCallsError extends SessionError {
  readonly code = "pending_calls";
  constructor(calls: readonly { id: string; name: string }[]) {
    super(
      `the model's last turn has unanswered calls: ${calls.map((c) => `${c.name} (call_id ${c.id})`).join(", ")}; answer each (load_lora/offload_lora or the external tool with its call_id, or answer_call with an error) before generate`,
    );
  }
}

export class UnknownCallError extends SessionError {
  readonly code = "unknown_call";
}

export class LimitError extends SessionError {
  readonly code = "limit";
}

/** The model work queue is full; try again shortly. */
export class BusyError extends SessionError {
  readonly code = "busy";
  constructor(message: string) {
    super(message);
  }
}

/** A prescribed tool call whose arguments fail the tool's input schema (nothing was recorded). */
export class InvalidArgumentsError extends SessionError {
  readonly code = "invalid_arguments";
}

/** Input that cannot fit a session's context window, refused before anything reads it whole. */
export class InputTooLongError extends SessionError {
  readonly code = "input_too_long";
  constructor(
    /** The field to shorten (the longest of those given). */
    readonly field: string,
    message: string,
  ) {
    super(message);
  }
}
