import { z } from "zod";
import { LONG_TEXT_MAX } from "../config/configSchema.js";
import { nearestKey } from "../nearestKey.js";
import type { InputField } from "../sessions/inputWindow.js";
import { invalid, OpenAIError } from "./errors.js";
import { ParametersSchema, refProblem } from "./parametersSchema.js";

const TextPart = z.object({ type: z.literal("text"), text: z.string().max(LONG_TEXT_MAX) });
/** Message content: a string, or text parts (images and audio are refused: the model reads text). */
const Content = z.union([z.string().max(LONG_TEXT_MAX), z.array(TextPart).max(256)]);
const ToolCall = z.object({
  id: z.string().min(1).max(200),
  type: z.literal("function"),
  function: z.object({ name: z.string().min(1).max(64), arguments: z.string().max(LONG_TEXT_MAX) }),
});

export const MessageSchema = z.discriminatedUnion("role", [
  z.object({ role: z.enum(["system", "developer"]), content: Content, name: z.string().max(64).optional() }),
  z.object({ role: z.literal("user"), content: Content, name: z.string().max(64).optional() }),
  z.object({
    role: z.literal("assistant"),
    content: Content.nullish(),
    tool_calls: z.array(ToolCall).max(64).optional(),
    name: z.string().max(64).optional(),
    refusal: z.string().nullish(),
  }),
  z.object({ role: z.literal("tool"), content: Content, tool_call_id: z.string().min(1).max(200) }),
]);
export type ChatMessage = z.infer<typeof MessageSchema>;

const FUNCTION_NAME = /^[a-zA-Z0-9_-]{1,64}$/;
const ToolSchema = z
  .object({
    type: z.literal("function"),
    function: z.object({
      name: z.string().regex(FUNCTION_NAME, "a function name is 1-64 letters, digits, _ or -"),
      description: z.string().max(4096).optional(),
      parameters: ParametersSchema.optional(),
      strict: z.boolean().nullish(),
    }),
  })
  .superRefine((tool, ctx) => {
    // before any generation: a reference the grammar cannot follow lets any JSON through, or never lets a call end
    const problem = tool.function.parameters && refProblem(tool.function.parameters);
    if (problem)
      ctx.addIssue({
        code: "custom",
        path: ["function", "parameters", ...problem.path],
        message: `function ${tool.function.name}: ${problem.message}`,
      });
  });
export type ChatTool = z.infer<typeof ToolSchema>;

const ToolChoice = z.union([
  z.enum(["none", "auto", "required"]),
  z.object({ type: z.literal("function"), function: z.object({ name: z.string().min(1).max(64) }) }),
]);

export const ChatRequestSchema = z.object({
  model: z.string().min(1).max(100),
  messages: z.array(MessageSchema).min(1).max(10_000),
  tools: z.array(ToolSchema).max(64).optional(),
  tool_choice: ToolChoice.optional(),
  parallel_tool_calls: z.boolean().optional(),
  stream: z.boolean().nullish(),
  stream_options: z.object({ include_usage: z.boolean().optional() }).nullish(),
  max_tokens: z
    .number()
    .int()
    .positive()
    .max(1 << 20)
    .nullish(),
  max_completion_tokens: z
    .number()
    .int()
    .positive()
    .max(1 << 20)
    .nullish(),
  temperature: z.number().min(0).max(2).nullish(),
  seed: z
    .number()
    .int()
    .min(0)
    .max(2 ** 32 - 1)
    .nullish(),
  stop: z.union([z.string().min(1).max(200), z.array(z.string().min(1).max(200)).max(4)]).nullish(),
  user: z.string().max(256).optional(),
  // accepted because they do not change the result (OpenAI's caching, storage and abuse-monitoring hints)
  store: z.boolean().nullish(),
  metadata: z.record(z.string(), z.string()).nullish(),
  safety_identifier: z.string().max(256).nullish(),
  prompt_cache_key: z.string().max(1024).nullish(),
  prompt_cache_retention: z.string().max(64).nullish(),
  prompt_cache_options: z.record(z.string(), z.unknown()).nullish(),
});
export type ChatRequest = z.infer<typeof ChatRequestSchema>;

/**
 * Parameters that would change the result and that this server does not honour: refused by name rather than
 * silently ignored. Their neutral values pass (e.g. `top_p: 1`, `presence_penalty: 0`).
 */
const REFUSED: Record<string, { neutral?: unknown[]; why: string }> = {
  n: { neutral: [1, null], why: "one choice per request (n must be 1)" },
  logit_bias: { neutral: [null], why: "the server's own weight switching controls the logits" },
  logprobs: { neutral: [false, null], why: "log-probs are served by the MCP generate tool (top_logprobs), not here" },
  top_logprobs: { neutral: [null, 0], why: "log-probs are served by the MCP generate tool (top_logprobs), not here" },
  top_p: { neutral: [1, null], why: "only temperature sampling is honoured" },
  presence_penalty: { neutral: [0, null], why: "penalties are not supported" },
  frequency_penalty: { neutral: [0, null], why: "penalties are not supported" },
  response_format: { why: "structured output is not supported; the run's answer is text" },
  functions: { why: "the legacy functions parameter is not supported; use tools" },
  function_call: { why: "the legacy function_call parameter is not supported; use tool_choice" },
  audio: { why: "the model reads and writes text only" },
  modalities: { why: "the model reads and writes text only" },
  prediction: { why: "predicted outputs are not supported" },
  web_search_options: { why: "web search is one of the server's own tools, chosen by the model" },
  reasoning_effort: { why: "not a reasoning model option here" },
  service_tier: { neutral: ["auto", "default", null], why: "one service tier" },
  verbosity: { neutral: ["medium", null], why: "the answer's length follows max_tokens and the stage budgets" },
  moderation: { neutral: [null], why: "the server runs no moderation" },
};
const KNOWN = new Set(Object.keys(ChatRequestSchema.shape));
/** Every request argument this server recognizes: OpenAI's chat-completions fields, honoured or refused by name. */
const RECOGNIZED = [...KNOWN, ...Object.keys(REFUSED)];

/** Reads a chat-completions body: refused parameters and bad fields become OpenAI errors naming the `param`. */
export function parseChatRequest(body: unknown): ChatRequest {
  if (typeof body !== "object" || body === null || Array.isArray(body))
    throw invalid("the request body must be a JSON object", null);
  for (const [key, value] of Object.entries(body)) {
    const refused = REFUSED[key];
    if (refused && !(refused.neutral ?? []).some((n) => n === value || (n === null && value === undefined))) {
      throw new OpenAIError(
        400,
        `${key} is not supported by this server: ${refused.why}`,
        "invalid_request_error",
        key,
        "unsupported_parameter",
      );
    }
    if (!refused && !KNOWN.has(key)) {
      // OpenAI's own wording, so clients that match on it recognize it; the nearest valid one for a typo
      const nearest = nearestKey(key, RECOGNIZED);
      throw new OpenAIError(
        400,
        `Unrecognized request argument supplied: ${key}${nearest ? ` (did you mean ${nearest}?)` : ""}`,
        "invalid_request_error",
        key,
        "unknown_parameter",
      );
    }
  }
  const known = Object.fromEntries(Object.entries(body).filter(([k]) => KNOWN.has(k) && k !== "n"));
  const parsed = ChatRequestSchema.safeParse(known);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const param = issue.path
      .map((p, i) => (typeof p === "number" ? `[${p}]` : i ? `.${String(p)}` : String(p)))
      .join("");
    throw invalid(`${param || "body"}: ${issue.message}`, param || null);
  }
  return parsed.data;
}

export const textOf = (content: ChatMessage["content"]): string =>
  content == null ? "" : typeof content === "string" ? content : content.map((p) => p.text).join("");

/** The texts of a request the model would read, each named as the request's param it came in. */
export function inputFields(request: ChatRequest): InputField[] {
  return [
    ...request.messages.flatMap((m, i) => [
      { name: `messages[${i}].content`, text: textOf(m.content) },
      ...(m.role === "assistant" ? (m.tool_calls ?? []) : []).map((c, j) => ({
        name: `messages[${i}].tool_calls[${j}].function.arguments`,
        text: c.function.arguments,
      })),
    ]),
    ...(request.tools ?? []).map((t, i) => ({ name: `tools[${i}].function`, text: JSON.stringify(t.function) })),
  ];
}
