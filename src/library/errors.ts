/** A change of the library that was refused (or, for a subclass, applied with a caveat); the message says why. */
export class LibraryChangeError extends Error {}

/** Why an adapter's path was refused; stable for programs, each with its own fix in the message. */
export type AdapterPathCode =
  | "adapter_outside"
  | "adapter_missing"
  | "adapter_changed"
  | "adapter_symlink_loop"
  | "adapter_not_regular"
  | "adapter_unreadable"
  | "adapter_not_gguf"
  | "adapter_copy_failed";

/** The entry field a path came from: the GGUF LoRA (`file`) or its PEFT folder (`peft`). */
export type PathField = "file" | "peft";

/**
 * An adapter path the library will not read: outside the adapter folders, missing, swapped while it was opened, not a
 * regular GGUF file, or not copyable into the server's private folder. The message names the field and the path,
 * says what to do, and ends with the code (the admin tools show only the message).
 */
export class AdapterPathError extends LibraryChangeError {
  constructor(
    readonly code: AdapterPathCode,
    readonly field: PathField,
    readonly path: string,
    problem: string,
    fix: string,
  ) {
    super(`${field}: ${path} ${problem}; ${fix} [${code}]`);
    this.name = "AdapterPathError";
  }
}

/**
 * An adapter recorded for another base model (its entry's `baseSha256`) than the one served: refused before its bytes
 * are read, whatever its shapes (two checkpoints of one architecture have the same).
 */
export class AdapterBaseMismatchError extends LibraryChangeError {
  readonly code = "adapter_base_mismatch";
  constructor(
    readonly alias: string,
    readonly recorded: string,
    readonly served: { sha256: string; name: string },
  ) {
    super(
      `adapter "${alias}" was made for the base model with SHA-256 ${recorded}, but this server serves ${served.name} (SHA-256 ${served.sha256}); serve it on its own base (model.path), or retrain or re-import it for this one (weact-mcp import-peft), which records baseSha256 [adapter_base_mismatch]`,
    );
    this.name = "AdapterBaseMismatchError";
  }
}

/**
 * An activated LoRA whose invocation sequence is not in its load exchange as the served model renders it: the
 * adapter would apply nowhere, and a session that loads it would silently run on the base. Refused at
 * registration; the fix is the entry's `activation` text (what the model reads when it is loaded).
 */
export class AdapterInvocationError extends LibraryChangeError {
  readonly code = "adapter_invocation_missing";
  constructor(
    readonly alias: string,
    readonly invocation: string,
    activation: string,
  ) {
    super(
      `adapter "${alias}" is an activated LoRA (adapter.alora.invocation_tokens) whose invocation sequence ${JSON.stringify(invocation)} is not in its load exchange as this model renders it (activation: ${JSON.stringify(activation)}), so it would apply nowhere; set the entry's "activation" to a text that holds the sequence as the adapter was trained (e.g. one that starts with it), or serve the adapter on the model it was trained for [adapter_invocation_missing]`,
    );
    this.name = "AdapterInvocationError";
  }
}
