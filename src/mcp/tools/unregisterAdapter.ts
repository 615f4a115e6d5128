import type { McpHost } from "../host.js";
import { z } from "zod";
import { AdapterFieldsSchema } from "../../library/manifest.js";
import { toolInput } from "../../portableSchema.js";
import { adminCall, type AdminGate } from "../admin.js";
import type { ServerContext } from "../context.js";

const title = "Unregister an adapter (admin)";

/** Registers unregister_adapter: a capability removed from the library and the manifest. */
export function registerUnregisterAdapterTool(server: McpHost, ctx: ServerContext, isAdmin: AdminGate) {
  server.registerTool(
    "unregister_adapter",
    {
      title,
      description:
        "Remove a capability; sessions that have it active keep it until they offload, then its memory is freed.",
      inputSchema: toolInput({ alias: AdapterFieldsSchema.shape.alias }),
      outputSchema: { unregistered: z.string() },
      annotations: { title, readOnlyHint: false, destructiveHint: true, idempotentHint: true, openWorldHint: false },
    },
    (args, extra) =>
      adminCall(isAdmin, extra, async () => {
        await ctx.runtime.library.unregisterEntry(args.alias);
        return { unregistered: args.alias };
      }),
  );
}
