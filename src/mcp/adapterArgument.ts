import type { RegisteredTool } from "@modelcontextprotocol/sdk/server/mcp.js";
import { z } from "zod";
import type { ServerContext } from "./context.js";

/**
 * The adapter argument of load_lora and offload_lora: an enum of the resident aliases, each described by its
 * capability.
 */
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

/**
 * The refresh of a tool whose input holds `adapterArgument` (the library changed): the SDK's `update({paramsSchema})`
 * would rebuild the schema from a bare shape and lose `toolInput`'s `additionalProperties`, so the whole input object
 * is set on the tool, then `update({})` tells clients the list changed.
 */
export function inputRefresher(tool: RegisteredTool, input: () => RegisteredTool["inputSchema"]): () => void {
  return () => {
    tool.inputSchema = input();
    tool.update({});
  };
}
