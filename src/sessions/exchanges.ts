import { randomBytes } from "node:crypto";
import type { HistoryMessage, ToolCallRecord } from "./history.js";

/** An unguessable id: sessions (`s_`) and calls (`call_`) are named by them. */
export const newId = (prefix: string, bytes: number) => `${prefix}${randomBytes(bytes).toString("base64url")}`;
export const newCallId = () => newId("call_", 9);

/**
 * The result of a weight action (or a refusal of the model's call): internal, the model reads it but it is no tool's
 * output.
 */
export function internalResult(call: ToolCallRecord, content: string, isError: boolean): HistoryMessage {
  return { role: "tool", callId: call.id, name: call.name, content, isError, internal: true };
}
