import type { McpHost } from "../host.js";
import { z } from "zod";
import { orNull, toolInput } from "../../portableSchema.js";
import { LONG_TEXT_MAX } from "../../config/configSchema.js";
import type { ServerContext } from "../context.js";
import { ownerKey } from "../owners.js";
import { ok, toolCall } from "../results/toolResult.js";

export function registerCreateSessionTool(server: McpHost, ctx: ServerContext) {
  server.registerTool(
    "create_session",
    {
      title: "Create session",
      annotations: {
        title: "Create session",
        readOnlyHint: false,
        destructiveHint: false,
        idempotentHint: false,
        openWorldHint: false,
      },
      description: `Open a session on the local model with a task. The session holds the shared history that every adapter reads and the active adapter (none = base model).${ctx.toolbox.withdrawn.map((t) => ` Not offered here: ${t.reason}`).join("")}`,
      inputSchema: toolInput({
        task: z.string().min(1).max(LONG_TEXT_MAX).describe("The user's task; becomes the first user message."),
        system: z.string().min(1).max(LONG_TEXT_MAX).optional().describe("System prompt (default: prompts/system.md)."),
        tools: z
          .array(z.string().min(1).max(64))
          .max(32)
          .optional()
          .describe("External tools the model may use in this session (default: all)."),
        owner_key: ownerKey.describe(
          "Open it under this owner key (from an earlier create_session), so that one key reaches all of a client's sessions.",
        ),
      }),
      outputSchema: {
        session_id: z.string(),
        active_adapter: orNull(z.string(), "the base model"),
        adapters: z.array(z.string()),
        tools: z.array(z.string()),
        keep_tool_result: z.number().int(),
        owner_key: z
          .string()
          .optional()
          .describe(
            "Without a bearer token: the secret that owns this session. Send it back as owner_key from any connection, or with none (MCP 2026-07-28); the connection that opened the session needs none.",
          ),
      },
    },
    (args, extra) =>
      toolCall(async () => {
        await ctx.sessions.refuseUnfittable([
          { name: "task", text: args.task },
          { name: "system", text: args.system ?? "" },
        ]);
        const { owner_key, ...input } = args;
        const { owner, key } = ctx.owners.forNew(extra, owner_key);
        const session = await ctx.sessions.create(owner, input);
        return ok({
          session_id: session.id,
          active_adapter: session.activeAdapter,
          adapters: ctx.runtime.library.aliases(),
          tools: [...session.externalTools],
          keep_tool_result: session.settings.keepToolResults,
          ...(key ? { owner_key: key } : {}),
        });
      }),
  );
}
