import type { McpHost } from "../host.js";
import { z } from "zod";
import { toolInput } from "../../portableSchema.js";
import type { ServerContext } from "../context.js";
import { sessionId } from "../schemas.js";
import { ownerKey } from "../owners.js";
import { ok, toolCall } from "../results/toolResult.js";

export function registerCloseSessionTool(server: McpHost, ctx: ServerContext) {
  server.registerTool(
    "close_session",
    {
      title: "Close session",
      // the session's history and caches are gone; closing it again changes nothing
      annotations: {
        title: "Close session",
        readOnlyHint: false,
        destructiveHint: true,
        idempotentHint: true,
        openWorldHint: false,
      },
      description: "Close the session and free its slot on the engine.",
      inputSchema: toolInput({ session_id: sessionId, owner_key: ownerKey }),
      outputSchema: { session_id: z.string(), closed: z.boolean() },
    },
    (args, extra) =>
      toolCall(async () => {
        await ctx.sessions.close(ctx.owners.of(extra, args.owner_key), args.session_id);
        return ok({ session_id: args.session_id, closed: true });
      }),
  );
}
