import type { HistoryMessage, ToolCallRecord } from "../sessions/history.js";
import { invalid } from "./errors.js";
import { textOf, type ChatMessage } from "./request.js";

/** What a request's messages become on a fresh session: the last user message is the task. */
export interface MappedConversation {
  task: string;
  /** The client's system/developer messages, appended to the server's system prompt. */
  system?: string;
  before: HistoryMessage[];
  after: HistoryMessage[];
}

/**
 * Maps OpenAI messages onto a session: system and developer messages join the system prompt, the last user
 * message is the task, the messages around it are the history (assistant turns attributed to the client).
 */
export function mapConversation(messages: readonly ChatMessage[], defaultSystem: string): MappedConversation {
  const taskAt = messages.findLastIndex((m) => m.role === "user");
  if (taskAt < 0) throw invalid("messages: no user message; the last user message is the task", "messages");
  const task = textOf(messages[taskAt]!.content);
  if (!task.trim())
    throw invalid(
      `messages[${taskAt}].content: the task (the last user message) is empty`,
      `messages[${taskAt}].content`,
    );
  const systems = messages.filter((m) => m.role === "system" || m.role === "developer").map((m) => textOf(m.content));
  const names = new Map<string, string>();
  const convert = (m: ChatMessage, i: number): HistoryMessage[] => {
    switch (m.role) {
      case "system":
      case "developer":
        return [];
      case "user":
        return [{ role: "user", content: textOf(m.content) }];
      case "assistant": {
        const calls = (m.tool_calls ?? []).map((c, j): ToolCallRecord => {
          names.set(c.id, c.function.name);
          return {
            id: c.id,
            name: c.function.name,
            arguments: parseArguments(c.function.arguments, `messages[${i}].tool_calls[${j}].function.arguments`),
          };
        });
        return [{ role: "assistant", content: textOf(m.content), adapter: null, author: "client", toolCalls: calls }];
      }
      case "tool": {
        const name = names.get(m.tool_call_id);
        if (!name)
          throw invalid(
            `messages[${i}].tool_call_id: "${m.tool_call_id}" answers no tool call of an earlier assistant message`,
            `messages[${i}].tool_call_id`,
          );
        return [
          { role: "tool", callId: m.tool_call_id, name, content: textOf(m.content), isError: false, internal: false },
        ];
      }
    }
  };
  // the model cannot go on past a call nobody answered: each assistant's calls need their tool messages
  messages.forEach((m, i) => {
    if (m.role !== "assistant" || !m.tool_calls?.length) return;
    const answered = new Set<string>();
    for (const next of messages.slice(i + 1)) {
      if (next.role !== "tool") break;
      answered.add(next.tool_call_id);
    }
    const open = m.tool_calls.filter((c) => !answered.has(c.id));
    if (open.length)
      throw invalid(
        `messages[${i}].tool_calls: ${open.map((c) => c.id).join(", ")} has no tool message answering it right after`,
        `messages[${i}].tool_calls`,
      );
  });
  const before = messages.slice(0, taskAt).flatMap((m, i) => convert(m, i));
  const after = messages.slice(taskAt + 1).flatMap((m, i) => convert(m, taskAt + 1 + i));
  return { task, ...(systems.length ? { system: `${defaultSystem}\n\n${systems.join("\n\n")}` } : {}), before, after };
}

export function parseArguments(text: string, param: string): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(text || "{}");
  } catch {
    throw invalid(`${param}: not valid JSON`, param);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value))
    throw invalid(`${param}: must be a JSON object`, param);
  return value as Record<string, unknown>;
}

/** A message reduced to what it says, for the exact-prefix check of a continuation. */
export function canonical(m: ChatMessage): string {
  const calls =
    m.role === "assistant" ? (m.tool_calls ?? []).map((c) => [c.id, c.function.name, c.function.arguments]) : [];
  return JSON.stringify([m.role, textOf(m.content), calls, m.role === "tool" ? m.tool_call_id : null]);
}
