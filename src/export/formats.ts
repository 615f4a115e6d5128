import { z } from "zod";

/**
 * The exported JSONL lines, one schema per trainer (strict: an unknown key is an error). Tool calls use the
 * OpenAI structure chat templates render (Qwen3: <tool_call>{"name": ..., "arguments": ...}</tool_call>), with
 * `arguments` a JSON string in every format: `datasets` would otherwise unify the argument objects of different
 * tools into one struct and fill the missing keys with nulls; Axolotl parses the string back, Qwen3-style
 * templates print it as is.
 */
export const ExportFormatSchema = z.enum(["axolotl", "openai", "trl"]);
export type ExportFormat = z.infer<typeof ExportFormatSchema>;

const isJsonObject = (s: string) => {
  try {
    const v: unknown = JSON.parse(s);
    return typeof v === "object" && v !== null && !Array.isArray(v);
  } catch {
    return false;
  }
};

const ToolCallSchema = z.strictObject({
  id: z.string().min(1),
  type: z.literal("function"),
  function: z.strictObject({
    name: z.string().min(1),
    arguments: z.string().refine(isJsonObject, "arguments must be a JSON object string"),
  }),
});

/** A function the model was offered, as chat templates and the OpenAI API take it. */
const ToolDefinitionSchema = z.strictObject({
  type: z.literal("function"),
  function: z.strictObject({
    name: z.string().min(1),
    description: z.string(),
    parameters: z.record(z.string(), z.unknown()).optional(),
  }),
});
export type ToolDefinition = z.infer<typeof ToolDefinitionSchema>;

const SystemMessage = z.strictObject({ role: z.literal("system"), content: z.string() });
const UserMessage = z.strictObject({ role: z.literal("user"), content: z.string() });
const AssistantMessage = z.strictObject({
  role: z.literal("assistant"),
  content: z.string(),
  tool_calls: z.array(ToolCallSchema).min(1).optional(),
});
/** Hugging Face chat templates read the function name of a result; OpenAI's fine-tuning format has no such key. */
const ToolMessage = z.strictObject({
  role: z.literal("tool"),
  tool_call_id: z.string().min(1),
  name: z.string().min(1),
  content: z.string(),
});
const OpenAIToolMessage = ToolMessage.omit({ name: true });

/** A message in the Hugging Face chat format (Axolotl's and TRL's messages). */
const ChatMessageSchema = z.discriminatedUnion("role", [SystemMessage, UserMessage, AssistantMessage, ToolMessage]);
export type ChatMessage = z.infer<typeof ChatMessageSchema>;
export type ChatAssistantMessage = z.infer<typeof AssistantMessage>;

/** Every tool result answers a call made earlier in the same line, as a chat template requires. */
function answersEarlierCalls(
  messages: readonly { role: string; tool_call_id?: string; tool_calls?: readonly { id: string }[] }[],
  ctx: z.core.$RefinementCtx<unknown>,
  path: string,
) {
  const called = new Set<string>();
  messages.forEach((m, i) => {
    for (const c of m.tool_calls ?? []) called.add(c.id);
    if (m.role === "tool" && !called.has(m.tool_call_id!))
      ctx.addIssue({ code: "custom", path: [path, i, "tool_call_id"], message: "answers no earlier tool call" });
  });
}

const flagged = <S extends z.core.$ZodShape, C extends z.core.$ZodObjectConfig>(schema: z.ZodObject<S, C>) =>
  schema.extend({ training: z.boolean() }).strict();

/**
 * Axolotl `type: chat_template` with per-message training flags (`message_field_training: training`): every
 * message carries the flag, so `roles_to_train` never decides; only the capability's own turns are true.
 */
export const AxolotlLineSchema = z
  .strictObject({
    messages: z
      .array(
        z.discriminatedUnion("role", [
          flagged(SystemMessage),
          flagged(UserMessage),
          flagged(AssistantMessage),
          flagged(ToolMessage),
        ]),
      )
      .min(1),
    tools: z.array(ToolDefinitionSchema).optional(),
  })
  .superRefine((line, ctx) => {
    answersEarlierCalls(line.messages, ctx, "messages");
    line.messages.forEach((m, i) => {
      if (m.training && m.role !== "assistant")
        ctx.addIssue({
          code: "custom",
          path: ["messages", i, "training"],
          message: "only assistant turns are trained",
        });
    });
    if (!line.messages.at(-1)!.training)
      ctx.addIssue({ code: "custom", path: ["messages"], message: "the last message must be a trained turn" });
  });
export type AxolotlLine = z.infer<typeof AxolotlLineSchema>;

/** OpenAI fine-tuning chat format: `weight` (0 or 1) on every assistant message says whether it is trained. */
export const OpenAILineSchema = z
  .strictObject({
    messages: z
      .array(
        z.discriminatedUnion("role", [
          SystemMessage,
          UserMessage,
          AssistantMessage.extend({ weight: z.union([z.literal(0), z.literal(1)]) }).strict(),
          OpenAIToolMessage,
        ]),
      )
      .min(1),
    tools: z.array(ToolDefinitionSchema).optional(),
  })
  .superRefine((line, ctx) => {
    answersEarlierCalls(line.messages, ctx, "messages");
    const last = line.messages.at(-1)!;
    if (last.role !== "assistant" || last.weight !== 1)
      ctx.addIssue({
        code: "custom",
        path: ["messages"],
        message: "the last message must be a trained (weight 1) assistant turn",
      });
  });
export type OpenAILine = z.infer<typeof OpenAILineSchema>;

/** TRL conversational prompt-completion: the loss covers the completion only (SFTConfig completion_only_loss). */
export const TrlLineSchema = z
  .strictObject({
    prompt: z.array(ChatMessageSchema).min(1),
    completion: z.tuple([AssistantMessage]),
    tools: z.array(ToolDefinitionSchema).optional(),
  })
  .superRefine((line, ctx) => answersEarlierCalls(line.prompt, ctx, "prompt"));
export type TrlLine = z.infer<typeof TrlLineSchema>;

export const LINE_SCHEMAS = { axolotl: AxolotlLineSchema, openai: OpenAILineSchema, trl: TrlLineSchema } as const;
