import type { FunctionSpec } from "../engine/index.js";

/**
 * The weight actions as the model reads them: the two functions that load and release the library's capabilities,
 * and the texts the model reads after each (a manifest entry's `activation` and `release`).
 */
export const LOAD_LORA = "load_lora";
export const OFFLOAD_LORA = "offload_lora";
export const WEIGHT_ACTIONS = new Set([LOAD_LORA, OFFLOAD_LORA]);

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

/** What the model reads after a load or a release of `alias`: its manifest entry's own text, else the default. */
export function exchangeMessage(
  entry: { activation?: string; release?: string } | undefined,
  action: string,
  alias: string,
): string {
  return action === LOAD_LORA
    ? (entry?.activation ?? `Capability "${alias}" is active. Call offload_lora when this stage is done.`)
    : (entry?.release ?? `Capability "${alias}" released; the base model continues.`);
}

/** An exchange's text with the reason a switch was given (by the harness or a client), as the model reads it. */
export const withReason = (text: string, reason?: string): string => (reason ? `${text} [${reason}]` : text);
