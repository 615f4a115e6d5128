import { randomBytes } from "node:crypto";
import type { AdapterLibrary } from "../library/AdapterLibrary.js";
import type { HistoryMessage, ToolCallRecord } from "./history.js";
import { LOAD_LORA } from "./modelFunctions.js";

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

/** What the model reads after a load or a release: the manifest entry's own text, else the default. */
export function exchangeMessage(library: AdapterLibrary, action: string, alias: string): string {
  const entry = library.get(alias)?.entry;
  return action === LOAD_LORA
    ? (entry?.activation ?? `Capability "${alias}" is active. Call offload_lora when this stage is done.`)
    : (entry?.release ?? `Capability "${alias}" released; the base model continues.`);
}
