import type { McpHost } from "../host.js";
import { AdapterFieldsSchema } from "../../library/manifest.js";
import { toolInput } from "../../portableSchema.js";
import { adapterInfo, adminCall, infoOf, type AdminGate } from "../admin.js";
import type { ServerContext } from "../context.js";

const title = "Refresh an adapter (admin)";
const fields = AdapterFieldsSchema.shape;

/**
 * Registers refresh_adapter: an alias pointed at a new file (or scale or texts); the fields left out keep their values.
 */
export function registerRefreshAdapterTool(server: McpHost, ctx: ServerContext, isAdmin: AdminGate) {
  server.registerTool(
    "refresh_adapter",
    {
      title,
      description:
        "Point an alias at a new file (or scale or texts). New loads use the new version at once; sessions with the old version active keep it until they offload, then it is freed.",
      // every field but the alias keeps its value when left out (no default scale here)
      inputSchema: toolInput({
        ...fields,
        file: fields.file.optional(),
        description: fields.description.optional(),
        scale: fields.scale.unwrap().optional(),
      }),
      outputSchema: { previous: adapterInfo, current: adapterInfo },
      // the alias's previous version is replaced for every later load
      annotations: { title, readOnlyHint: false, destructiveHint: true, idempotentHint: true, openWorldHint: false },
    },
    (args, extra) =>
      adminCall(isAdmin, extra, async () => {
        const { alias, ...given } = args;
        const { previous, current } = await ctx.runtime.library.refreshEntry(alias, given);
        return { previous: infoOf(previous), current: infoOf(current) };
      }),
  );
}
