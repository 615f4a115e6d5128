import type { Conversation } from "../src/engine/index.js";

/** A message as Hugging Face chat templates read it (`messages` of `apply_chat_template`). */
export type HfMessage =
  | { role: "system" | "user"; content: string }
  | {
      role: "assistant";
      content: string;
      tool_calls?: { type: "function"; function: { name: string; arguments: Record<string, unknown> } }[];
    }
  | { role: "tool"; content: string };

/** A function as Hugging Face chat templates read it (`tools` of `apply_chat_template`). */
export interface HfTool {
  type: "function";
  function: { name: string; description: string; parameters?: unknown };
}

/**
 * A conversation as `apply_chat_template` takes it: each assistant turn with its calls (arguments as objects: the
 * templates' `tojson` writes them), then one tool message per answered call, in order; the functions as `tools`.
 */
export function hfChat(conversation: Conversation): { messages: HfMessage[]; tools: HfTool[] } {
  const messages: HfMessage[] = [];
  for (const turn of conversation.turns) {
    if (turn.role !== "assistant") {
      messages.push({ role: turn.role, content: turn.text });
      continue;
    }
    const calls = turn.calls ?? [];
    messages.push({
      role: "assistant",
      content: turn.text,
      ...(calls.length
        ? {
            tool_calls: calls.map((c) => ({
              type: "function" as const,
              function: { name: c.name, arguments: c.arguments as Record<string, unknown> },
            })),
          }
        : {}),
    });
    for (const c of calls) messages.push({ role: "tool", content: String(c.result) });
  }
  const tools = Object.entries(conversation.functions).map(([name, spec]) => ({
    type: "function" as const,
    function: { name, description: spec.description, ...(spec.parameters ? { parameters: spec.parameters } : {}) },
  }));
  return { messages, tools };
}
