/**
 * Adapters that cannot be merged into one LoRA: `adapter` is the alias at fault (undefined when the merge as a whole
 * is: no adapters, weights that do not match them), `reason` the mismatch or the file problem.
 */
export class LoraMergeError extends Error {
  readonly code = "lora_merge";
  constructor(
    readonly adapter: string | undefined,
    readonly reason: string,
  ) {
    super(`cannot merge the adapters: ${adapter === undefined ? "" : `${adapter}: `}${reason}`);
    this.name = "LoraMergeError";
  }
}
