import type { FunctionSpec } from "../engine/index.js";
import type { AdapterLibrary } from "../library/AdapterLibrary.js";
import { LOAD_LORA, OFFLOAD_LORA, weightFunctions } from "../library/weightActions.js";

/**
 * The functions the local model reads in its prompt: the weight actions plus the session's external tools.
 * Both weight actions are always documented (the prompt prefix, and its KV cache, then survive switches);
 * the paper's state rule decides which one the model may call: load only from the base, offload only
 * the active adapter. `documented` narrows the capabilities listed (a hard run's workflow), in library order.
 */
export function modelFunctions(
  library: AdapterLibrary,
  external: Readonly<Record<string, FunctionSpec>>,
  documented?: readonly string[],
): Record<string, FunctionSpec> {
  const adapters = library.capabilities().filter((a) => !documented || documented.includes(a.entry.alias));
  return { ...weightFunctions(adapters.map((a) => a.entry)), ...external };
}

/** What the model may call in the given state. */
export function callableFunctions(active: string | null, external: readonly string[]): string[] {
  return [active === null ? LOAD_LORA : OFFLOAD_LORA, ...external];
}
