import type { McpHost } from "../host.js";
import { z } from "zod";
import { toolInput } from "../../portableSchema.js";
import { OFFLOAD_LORA } from "../../library/weightActions.js";
import { adapterArgument } from "../adapterArgument.js";
import type { ServerContext } from "../context.js";
import { callId, sessionId, weightActionOutput } from "../schemas.js";
import { ownerKey } from "../owners.js";
import { progressFor } from "../progress.js";
import { toolCall } from "../results/toolResult.js";
import { weightActionResult } from "../results/weightActionResult.js";

const offloadLoraInput = (ctx: ServerContext) =>
  toolInput({
    session_id: sessionId,
    owner_key: ownerKey,
    adapter: adapterArgument(ctx, "Must be the active adapter if given (default: the active one)."),
    call_id: callId.optional(),
    handoff: z
      .string()
      .max(20_000)
      .optional()
      .describe("Summary for the next stage (a prescribed exchange's argument)."),
  });

/** Registers offload_lora; the returned refresh follows library changes. */
export function registerOffloadLoraTool(server: McpHost, ctx: ServerContext): () => void {
  const tool = server.registerTool(
    "offload_lora",
    {
      title: "Release the active adapter",
      // a repeat is refused by the state rule (no adapter is active) and changes nothing
      annotations: {
        title: "Release the active adapter",
        readOnlyHint: false,
        destructiveHint: false,
        idempotentHint: true,
        openWorldHint: false,
      },
      description:
        "Release the session's active adapter and return to the base model, rebuilding the KV cache under the base weights. With call_id it answers the model's own offload_lora call; an invalid offload changes nothing and, with call_id, is recorded as that call's error result.",
      inputSchema: offloadLoraInput(ctx),
      outputSchema: weightActionOutput,
    },
    (args, extra) =>
      toolCall(async () =>
        weightActionResult(
          await progressFor(extra, "switching weights (queued, or rebuilding the KV cache)").run(() =>
            ctx.sessions.weights.switch(ctx.owners.of(extra, args.owner_key), args.session_id, OFFLOAD_LORA, {
              adapter: args.adapter,
              callId: args.call_id,
              handoff: args.handoff,
            }),
          ),
        ),
      ),
  );
  return () => tool.setInput(offloadLoraInput(ctx));
}
