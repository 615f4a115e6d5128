import type { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { z } from "zod";
import { ownerOf, type ServerContext } from "../context.js";
import { callId, sessionId, weightActionOutput } from "../schemas.js";
import { progressFor } from "../progress.js";
import { toolCall } from "../toolResult.js";
import { weightActionResult } from "./weightActionResult.js";

/** The adapter argument: an enum of the resident aliases, each described by its capability. */
export function adapterArgument(ctx: ServerContext, purpose: string) {
  const aliases = ctx.runtime.library.aliases();
  const catalogue = ctx.runtime.library
    .list()
    .filter((a) => a.info)
    .map((a) => `${a.entry.alias}: ${a.entry.description}`)
    .join("; ");
  const base = aliases.length ? z.enum(aliases as [string, ...string[]]) : z.string().min(1).max(64);
  return base.optional().describe(`${purpose} Library: ${catalogue || "(empty)"}`);
}

const loadLoraInput = (ctx: ServerContext) => ({
  session_id: sessionId,
  adapter: adapterArgument(ctx, "The adapter to activate; defaults to the one named in the model's call (call_id)."),
  call_id: callId.optional(),
});

/** Registers load_lora; the returned refresh follows library changes (the adapter enum and descriptions). */
export function registerLoadLoraTool(server: McpServer, ctx: ServerContext): () => void {
  const tool = server.registerTool(
    "load_lora",
    {
      title: "Load a capability adapter",
      description:
        "Activate a capability adapter in the session (only from the base model: offload the active one first). Rebuilds the KV cache from the history under the new weights. With call_id it answers the model's own load_lora call; an invalid load changes nothing and, with call_id, is recorded as that call's error result.",
      inputSchema: loadLoraInput(ctx),
      outputSchema: weightActionOutput,
    },
    (args, extra) =>
      toolCall(async () =>
        weightActionResult(await progressFor(extra, "switching weights (queued, or rebuilding the KV cache)").run(() => ctx.sessions.loadLora(ownerOf(extra), args.session_id, { adapter: args.adapter, callId: args.call_id }))),
      ),
  );
  return () => tool.update({ paramsSchema: loadLoraInput(ctx) });
}
