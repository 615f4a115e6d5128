import { z } from "zod";
import type { HistoryMessage } from "../sessions/history.js";

/**
 * The trace events an export reads (src/harness/runTaskUnderPolicy.ts writes them); every other event is ignored.
 * The history messages are `historyView(session, { elide: false })`: every tool result in full.
 */
const ViewMessageSchema = z.discriminatedUnion("role", [
  z.object({ role: z.literal("system"), content: z.string() }),
  z.object({ role: z.literal("user"), content: z.string() }),
  z.object({
    role: z.literal("assistant"),
    content: z.string(),
    adapter: z.string().nullable(),
    author: z.enum(["model", "client", "harness"]),
    tool_calls: z.array(
      z.object({ id: z.string().min(1), name: z.string().min(1), arguments: z.record(z.string(), z.unknown()) }),
    ),
  }),
  z.object({
    role: z.literal("tool"),
    call_id: z.string().min(1),
    name: z.string().min(1),
    content: z.string(),
    is_error: z.boolean(),
    /** Weight actions and rejected calls: never elided, never counted by keep_tool_result. */
    internal: z.boolean(),
    /** Elided to make room in the context window (read as the marker from then on). */
    elided: z.boolean().optional(),
  }),
]);
type ViewMessage = z.infer<typeof ViewMessageSchema>;

export const AnswerEventSchema = z.object({
  type: z.literal("answer"),
  /** Present only when the run knew the expected answer (eval). */
  correct: z.object({ exact: z.boolean(), contains: z.boolean() }).optional(),
});

export const HistoryEventSchema = z.object({
  type: z.literal("history"),
  keepToolResult: z.number().int().nonnegative(),
  /** The capabilities the prompt's load_lora docs listed, when not every one of the library (a hard run's). */
  capabilities: z.array(z.string()).optional(),
  messages: z.array(ViewMessageSchema),
});

/** One recorded run, as an export needs it. */
export interface Trajectory {
  /** The trace id: the file name without `.jsonl`. */
  id: string;
  file: string;
  correct?: { exact: boolean; contains: boolean };
  /** The run's keep_tool_result: how many external results the model read verbatim. */
  keepToolResult: number;
  /** The capabilities the prompt listed, when not every one of the library. */
  capabilities?: string[];
  /** The full history (no result elided), in the server's own message type. */
  messages: HistoryMessage[];
}

/** The inverse of historyView: a trace message back in the server's history type (raw call tokens are not traced). */
export function fromView(m: ViewMessage): HistoryMessage {
  switch (m.role) {
    case "assistant":
      return {
        role: "assistant",
        content: m.content,
        adapter: m.adapter,
        author: m.author,
        toolCalls: m.tool_calls.map((c) => ({ id: c.id, name: c.name, arguments: c.arguments })),
      };
    case "tool":
      return {
        role: "tool",
        callId: m.call_id,
        name: m.name,
        content: m.content,
        isError: m.is_error,
        internal: m.internal,
        ...(m.elided ? { elided: true } : {}),
      };
    default:
      return { role: m.role, content: m.content };
  }
}
