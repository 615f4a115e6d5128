/**
 * A PEFT folder that cannot become a GGUF LoRA for the configured base. `file` is the file at fault (the
 * folder, `adapter_config.json`, `adapter_model.safetensors`, the output or the base model), `field` the
 * config field, tensor or check that failed, `reason` why; `problems` lists every mismatch when there are
 * several (the message shows them all, the list is for programs).
 */
export class PeftImportError extends Error {
  readonly code = "peft_import";
  constructor(
    readonly file: string,
    readonly field: string | undefined,
    readonly reason: string,
    readonly problems: readonly string[] = [],
  ) {
    super(`cannot import PEFT adapter: ${file}${field ? ` (${field})` : ""}: ${reason}`);
    this.name = "PeftImportError";
  }
}

const MAX_LISTED = 5;

/** "a, b, c, d, e and 7 more": enough to find the problem without flooding a terminal. */
export function listSome(items: readonly string[], max = MAX_LISTED): string {
  if (items.length <= max) return items.join(", ");
  return `${items.slice(0, max).join(", ")} and ${items.length - max} more`;
}
