import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import type { WeightActionOutcome } from "../../sessions/WeightSwitch.js";
import { switchView } from "./switchView.js";
import { fail, ok } from "./toolResult.js";

/** The MCP result of load_lora / offload_lora: the exchange made, or why nothing changed. */
export function weightActionResult(outcome: WeightActionOutcome): CallToolResult {
  if (!outcome.ok) {
    const recorded = outcome.recordedForCall
      ? ` (recorded as the result of call ${outcome.recordedForCall}, so the model reads it)`
      : "";
    return fail(`${outcome.error}${recorded}`);
  }
  return ok({
    active_adapter: outcome.active,
    previous_adapter: outcome.previous,
    call_id: outcome.callId,
    message: outcome.message,
    switch: switchView(outcome.switch),
  });
}
