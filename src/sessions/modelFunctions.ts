import type { FunctionSpec } from "../engine/index.js";
import type { AdapterLibrary } from "../library/AdapterLibrary.js";

export const LOAD_LORA = "load_lora";
export const OFFLOAD_LORA = "offload_lora";
export const WEIGHT_ACTIONS = new Set([LOAD_LORA, OFFLOAD_LORA]);

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

/** load_lora and offload_lora as the model reads them, listing `capabilities` (alias and description) in order. */
export function weightFunctions(
  capabilities: readonly { alias: string; description: string }[],
): Record<string, FunctionSpec> {
  const catalogue = capabilities.map((c) => `- ${c.alias}: ${c.description}`).join("\n");
  return {
    [LOAD_LORA]: {
      description: `Activate one capability adapter; callable only while no adapter is active. Available capabilities:\n${catalogue}`,
      parameters: {
        type: "object",
        properties: { adapter: { type: "string", enum: capabilities.map((c) => c.alias) } },
      },
    },
    [OFFLOAD_LORA]: {
      description:
        "Release the active capability adapter and hand control back to the base model; callable only while an adapter is active. Summarise what the next stage needs in handoff.",
      // no maxLength: node-llama-cpp expands it into a grammar that slows sampling several-fold; max_tokens bounds it
      parameters: { type: "object", properties: { handoff: { type: "string" } } },
    },
  };
}

/** What the model may call in the given state. */
export function callableFunctions(active: string | null, external: readonly string[]): string[] {
  return [active === null ? LOAD_LORA : OFFLOAD_LORA, ...external];
}
