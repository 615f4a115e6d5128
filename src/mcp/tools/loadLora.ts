import type { McpHost } from "../host.js";
import { toolInput } from "../../portableSchema.js";
import { LOAD_LORA } from "../../library/weightActions.js";
import { adapterArgument } from "../adapterArgument.js";
import type { ServerContext } from "../context.js";
import { callId, sessionId, weightActionOutput } from "../schemas.js";
import { ownerKey } from "../owners.js";
import { progressFor } from "../progress.js";
import { toolCall } from "../results/toolResult.js";
import { weightActionResult } from "../results/weightActionResult.js";

const loadLoraInput = (ctx: ServerContext) =>
  toolInput({
    session_id: sessionId,
    owner_key: ownerKey,
    adapter: adapterArgument(ctx, "The adapter to activate; defaults to the one named in the model's call (call_id)."),
    call_id: callId.optional(),
  });

/** Registers load_lora; the returned refresh follows library changes (the adapter enum and descriptions). */
export function registerLoadLoraTool(server: McpHost, ctx: ServerContext): () => void {
  const tool = server.registerTool(
    "load_lora",
    {
      title: "Load a capability adapter",
      // a repeat is refused by the state rule (an adapter is active) and changes nothing
      annotations: {
        title: "Load a capability adapter",
        readOnlyHint: false,
        destructiveHint: false,
        idempotentHint: true,
        openWorldHint: false,
      },
      description:
        "Activate a capability adapter in the session (only from the base model: offload the active one first). Rebuilds the KV cache from the history under the new weights. With call_id it answers the model's own load_lora call; an invalid load changes nothing and, with call_id, is recorded as that call's error result.",
      inputSchema: loadLoraInput(ctx),
      outputSchema: weightActionOutput,
    },
    (args, extra) =>
      toolCall(async () =>
        weightActionResult(
          await progressFor(extra, "switching weights (queued, or rebuilding the KV cache)").run(() =>
            ctx.sessions.weights.switch(ctx.owners.of(extra, args.owner_key), args.session_id, LOAD_LORA, {
              adapter: args.adapter,
              callId: args.call_id,
            }),
          ),
        ),
      ),
  );
  return () => tool.setInput(loadLoraInput(ctx));
}
