/**
 * Errors of the harness: a run refused before anything ran (no session, no trace). `code` is stable for programs;
 * the message names the field (a run argument or a config key) and what it may be.
 */
export abstract class HarnessError extends Error {
  abstract readonly code: string;
  constructor(
    /** The run argument or config key at fault, e.g. `workflow[1]` or `harness.workflow[0]`. */
    readonly field: string,
    message: string,
  ) {
    super(`${field}: ${message}`);
    this.name = new.target.name;
  }
}

/** A comparison policy naming no adapter of the library (`single:<alias>`). */
export class InvalidPolicyError extends HarnessError {
  readonly code = "invalid_policy";
}

/** A run argument the harness cannot run: an empty task, a workflow stage naming no adapter of the library. */
export class InvalidRunInputError extends HarnessError {
  readonly code = "invalid_run_input";
}
