import type { AnsweredCall, ChatTurn, Conversation, FunctionSpec } from "../engine/index.js";

export interface ToolCallRecord {
  id: string;
  name: string;
  arguments: Record<string, unknown>;
  /** The call as the model emitted it, so re-rendering reproduces its exact tokens. */
  raw?: unknown;
}

/**
 * Who wrote an assistant message: the local model, or a client/harness acting on its behalf (a prescribed exchange).
 */
export type Author = "model" | "client" | "harness";

export type HistoryMessage =
  | { role: "system"; content: string }
  | { role: "user"; content: string }
  | { role: "assistant"; content: string; adapter: string | null; author: Author; toolCalls: ToolCallRecord[] }
  | {
      role: "tool";
      callId: string;
      name: string;
      content: string;
      isError: boolean;
      internal: boolean;
      /** Read as the keep_tool_result marker from now on, whatever `keep` says: elided to make room in the window. */
      elided?: boolean;
    };

export type AssistantMessage = Extract<HistoryMessage, { role: "assistant" }>;
export type ToolMessage = Extract<HistoryMessage, { role: "tool" }>;

/** Calls of the last assistant message that have no result yet. */
export function pendingCalls(history: readonly HistoryMessage[]): ToolCallRecord[] {
  const lastAssistant = history.findLastIndex((m) => m.role === "assistant");
  if (lastAssistant < 0) return [];
  const message = history[lastAssistant] as AssistantMessage;
  const answered = new Set(history.slice(lastAssistant + 1).flatMap((m) => (m.role === "tool" ? [m.callId] : [])));
  return message.toolCalls.filter((c) => !answered.has(c.id));
}

/**
 * The external tool results the model reads as a marker: all but the last `keep`, and any elided to make room
 * in the context window (weight-action results always stay).
 */
export function elidedResults<T extends { role: string; internal?: boolean; elided?: boolean }>(
  messages: readonly T[],
  keep: number,
): Set<T> {
  const external = messages.filter((m) => m.role === "tool" && !m.internal);
  return new Set([...external.slice(0, Math.max(0, external.length - keep)), ...external.filter((m) => m.elided)]);
}

/**
 * What the model reads in place of an elided result, with the reason: keep_tool_result's count, or room in the window.
 */
export const elisionMarker = (m: { name: string; content: string; elided?: boolean }, keep: number) =>
  `[result of ${m.name} elided (${m.content.length} characters): ${m.elided ? "it made room in the context window" : `only the last ${keep} tool results are kept`}]`;

/**
 * The conversation the model reads. External tool results older than the last `keepToolResults` are
 * replaced by a short marker (the paper's keep_tool_result); weight-action results are always kept.
 */
export function toConversation(
  history: readonly HistoryMessage[],
  functions: Readonly<Record<string, FunctionSpec>>,
  keepToolResults: number,
): Conversation {
  const elided = elidedResults(history, keepToolResults);
  const results = new Map<string, string>();
  for (const m of history) {
    if (m.role === "tool") results.set(m.callId, elided.has(m) ? elisionMarker(m, keepToolResults) : m.content);
  }
  const turns: ChatTurn[] = [];
  for (const m of history) {
    if (m.role === "system" || m.role === "user") turns.push({ role: m.role, text: m.content });
    else if (m.role === "assistant") {
      const calls: AnsweredCall[] = m.toolCalls.map((c) => ({
        name: c.name,
        arguments: c.arguments,
        result: results.get(c.id) as string,
        ...(c.raw !== undefined ? { raw: c.raw } : {}),
      }));
      turns.push({ role: "assistant", text: m.content, calls });
    }
  }
  return { turns, functions };
}
