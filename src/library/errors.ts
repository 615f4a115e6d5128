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
