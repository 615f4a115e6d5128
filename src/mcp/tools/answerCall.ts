import type { McpHost } from "../host.js";
import { z } from "zod";
import { toolInput } from "../../portableSchema.js";
import type { ServerContext } from "../context.js";
import { sessionId } from "../schemas.js";
import { ownerKey } from "../owners.js";
import { ok, toolCall } from "../results/toolResult.js";

/** Registers answer_call: any pending model call can be answered with an error result of the client's own. */
export function registerAnswerCallTool(server: McpHost, ctx: ServerContext) {
  server.registerTool(
    "answer_call",
    {
      title: "Answer a model call with an error",
      annotations: {
        title: "Answer a model call with an error",
        readOnlyHint: false,
        destructiveHint: false,
        idempotentHint: true,
        openWorldHint: false,
      },
      description:
        "Answer one of the model's pending calls with an error result the model reads on its next turn, without executing it (a call the client will not or cannot run). Any pending call may be answered this way, whatever its tool or arguments.",
      inputSchema: toolInput({
        session_id: sessionId,
        owner_key: ownerKey,
        call_id: z.string().min(1).max(64).describe("The pending call to answer (from generate's tool_calls)."),
        error: z.string().min(1).max(10_000).describe("What the model reads as the call's (error) result."),
      }),
      outputSchema: { call_id: z.string(), name: z.string(), recorded: z.literal(true) },
    },
    (args, extra) =>
      toolCall(async () => {
        const answered = await ctx.sessions.answerCall(
          ctx.owners.of(extra, args.owner_key),
          args.session_id,
          args.call_id,
          args.error,
        );
        return ok({ call_id: answered.callId, name: answered.name, recorded: true });
      }),
  );
}
