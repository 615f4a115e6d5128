import { z } from "zod";
import { orNull } from "../portableSchema.js";

/** Argument fields shared by several tools, with the bounds that keep oversize input out. */
export const sessionId = z.string().min(1).max(64).describe("The session id returned by create_session.");
export const callId = z
  .string()
  .min(1)
  .max(64)
  .describe(
    "The id of the model's tool call this answers (from generate's tool_calls). Omit to drive the action yourself (a prescribed exchange).",
  );

/** A switch's figures in MCP results (`switchView` makes them from a switch report). */
export const switchShape = {
  switch_ms: z.number().describe("The weight change itself (no file I/O, no model reload)."),
  cache_strategy: z
    .enum(["rebuild", "reuse", "unchanged"])
    .describe(
      "rebuild: history re-prefilled; reuse: the session's cache under these weights continued (or started); unchanged: same weights.",
    ),
  rebuild_ms: z.number().describe("Bringing the KV cache up to the history under the new weights."),
  rebuilt_tokens: z.number().int().describe("Tokens evaluated under the new weights."),
  reused_tokens: z.number().int().describe("Tokens whose KV, computed earlier under the same weights, was kept."),
  restored_tokens: z
    .number()
    .int()
    .describe("Of the reused tokens, those read back from a saved state (a spilled cache, or a shared prompt prefix)."),
  shared_tokens: z
    .number()
    .int()
    .describe(
      "Of the restored tokens, those of a prompt prefix (system prompt and function docs) computed once for these weights and shared within the prompt's scope.",
    ),
  queue_ms: z.number(),
};

export const weightActionOutput = {
  active_adapter: orNull(z.string(), "the base model"),
  previous_adapter: orNull(z.string(), "the base model"),
  call_id: z.string(),
  message: z.string().describe("The activation/release message recorded as the call's result."),
  switch: z.object(switchShape),
};
