import type { FunctionSpec } from "../engine/index.js";
import type { AssistantMessage, HistoryMessage, ToolCallRecord } from "../sessions/history.js";
import { asReadAt, elisionGroups } from "./elision.js";
import type {
  AxolotlLine,
  ChatAssistantMessage,
  ChatMessage,
  ExportFormat,
  OpenAILine,
  ToolDefinition,
  TrlLine,
} from "./formats.js";
import type { StageSample } from "./segment.js";

/** The functions documented to the model, for the `tools` field; omitted when unknown. */
export type ModelFunctions = Readonly<Record<string, FunctionSpec>>;

/**
 * Arguments as node-llama-cpp renders a call it did not see generated (its jsonDumps, the layout of Python's
 * json.dumps, which Hugging Face templates' `tojson` also produces): ", " and ": " separators.
 */
export function callArguments(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(callArguments).join(", ")}]`;
  if (typeof value === "object" && value !== null)
    return `{${Object.entries(value)
      .map(([k, v]) => `${JSON.stringify(k)}: ${callArguments(v)}`)
      .join(", ")}}`;
  return JSON.stringify(value);
}

const toolCall = (c: ToolCallRecord) => ({
  id: c.id,
  type: "function" as const,
  function: { name: c.name, arguments: callArguments(c.arguments) },
});

function chatAssistant(m: AssistantMessage): ChatAssistantMessage {
  return {
    role: "assistant",
    content: m.content,
    ...(m.toolCalls.length ? { tool_calls: m.toolCalls.map(toolCall) } : {}),
  };
}

/** A history message in the Hugging Face chat format: internal (load/offload) and external calls alike. */
function chatMessage(m: HistoryMessage): ChatMessage {
  switch (m.role) {
    case "assistant":
      return chatAssistant(m);
    case "tool":
      return { role: "tool", tool_call_id: m.callId, name: m.name, content: m.content };
    default:
      return { role: m.role, content: m.content };
  }
}

function toolDefinitions(functions: ModelFunctions): ToolDefinition[] {
  return Object.entries(functions).map(([name, spec]) => ({
    type: "function",
    function: {
      name,
      description: spec.description,
      ...(spec.parameters ? { parameters: spec.parameters as Record<string, unknown> } : {}),
    },
  }));
}

const withTools = (functions?: ModelFunctions) => (functions ? { tools: toolDefinitions(functions) } : {});

/**
 * The sample as whole sequences with per-message flags, one per elision group: each sequence ends with its
 * group's last target and shows the history as those targets read it.
 */
function flaggedSequences(sample: StageSample): { messages: HistoryMessage[]; trained: Set<number> }[] {
  return elisionGroups(sample.messages, sample.targets, sample.keepToolResult).map((group) => ({
    messages: asReadAt(sample.messages, group.at(-1)! + 1, sample.keepToolResult),
    trained: new Set(group),
  }));
}

export function toAxolotl(sample: StageSample, functions?: ModelFunctions): AxolotlLine[] {
  return flaggedSequences(sample).map(({ messages, trained }) => ({
    messages: messages.map((m, i) => ({ ...chatMessage(m), training: trained.has(i) })),
    ...withTools(functions),
  }));
}

export function toOpenAI(sample: StageSample, functions?: ModelFunctions): OpenAILine[] {
  return flaggedSequences(sample).map(({ messages, trained }) => ({
    messages: messages.map((m, i) => {
      if (m.role === "assistant") return { ...chatAssistant(m), weight: trained.has(i) ? 1 : 0 };
      if (m.role === "tool") return { role: "tool", tool_call_id: m.callId, content: m.content };
      return { role: m.role, content: m.content };
    }),
    ...withTools(functions),
  }));
}

/** TRL cannot mask single messages: one prompt/completion line per target, the prompt as that target read it. */
export function toTrl(sample: StageSample, functions?: ModelFunctions): TrlLine[] {
  return sample.targets.map((t) => ({
    prompt: asReadAt(sample.messages, t, sample.keepToolResult).map(chatMessage),
    completion: [chatAssistant(sample.messages[t] as AssistantMessage)],
    ...withTools(functions),
  }));
}

export const CONVERTERS: Record<ExportFormat, (sample: StageSample, functions?: ModelFunctions) => object[]> = {
  axolotl: toAxolotl,
  openai: toOpenAI,
  trl: toTrl,
};
