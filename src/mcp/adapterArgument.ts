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
