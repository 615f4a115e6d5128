import type { McpHost } from "../host.js";
import { z } from "zod";
import { anyObject, orNull, toolInput } from "../../portableSchema.js";
import { sessionView } from "../../sessions/view.js";
import type { ServerContext } from "../context.js";
import { sessionId } from "../schemas.js";
import { ownerKey } from "../owners.js";
import { ok, toolCall } from "../results/toolResult.js";

const call = z.object({ id: z.string(), name: z.string(), arguments: anyObject() });

export function registerGetSessionTool(server: McpHost, ctx: ServerContext) {
  server.registerTool(
    "get_session",
    {
      title: "Get session",
      annotations: {
        title: "Get session",
        readOnlyHint: true,
        destructiveHint: false,
        idempotentHint: true,
        openWorldHint: false,
      },
      description:
        "The session's state: active adapter, unanswered model calls, and the history as the model reads it (keep_tool_result applied).",
      inputSchema: toolInput({
        session_id: sessionId,
        owner_key: ownerKey,
        include_prompt_tokens: z
          .boolean()
          .optional()
          .describe(
            "Also return the token ids of the prompt the next generate reads (to check log-probs against a reference).",
          ),
      }),
      outputSchema: {
        session_id: z.string(),
        task: z.string(),
        active_adapter: orNull(z.string(), "the base model"),
        pending_calls: z.array(call),
        tools: z.array(z.string()),
        keep_tool_result: z.number(),
        cached_tokens: z.number(),
        kv_lanes: z
          .array(
            z.object({
              weights: z.string(),
              active: z.boolean(),
              state: z.enum(["live", "spilled"]),
              tokens: z.number(),
            }),
          )
          .describe(
            "The session's KV caches, one per weight set it has run under (cache strategy reuse): a return to one evaluates only what it has not seen.",
          ),
        prompt_tokens: z.array(z.number()).optional(),
        created_at: z.string(),
        last_active_at: z.string(),
        history: z.array(
          z.object({
            role: z.enum(["system", "user", "assistant", "tool"]),
            content: z.string(),
            adapter: orNull(z.string(), "the base model").optional(),
            author: z.string().optional(),
            tool_calls: z.array(call).optional(),
            call_id: z.string().optional(),
            name: z.string().optional(),
            is_error: z.boolean().optional(),
            internal: z.boolean().optional(),
          }),
        ),
      },
    },
    (args, extra) =>
      toolCall(async () => {
        const session = ctx.sessions.get(ctx.owners.of(extra, args.owner_key), args.session_id);
        const view = sessionView(session);
        return ok(
          args.include_prompt_tokens
            ? { ...view, prompt_tokens: ctx.runtime.engine.renderTokens(session.conversation()) }
            : view,
        );
      }),
  );
}
