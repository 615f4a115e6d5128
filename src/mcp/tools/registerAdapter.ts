import type { McpHost } from "../host.js";
import { AdapterFieldsSchema } from "../../library/manifest.js";
import { toolInput } from "../../portableSchema.js";
import { adapterInfo, adminCall, infoOf, type AdminGate } from "../admin.js";
import type { ServerContext } from "../context.js";

const title = "Register an adapter (admin)";

/**
 * Registers register_adapter: a manifest entry's fields, validated against the base model, loaded, added to load_lora.
 */
export function registerRegisterAdapterTool(server: McpHost, ctx: ServerContext, isAdmin: AdminGate) {
  server.registerTool(
    "register_adapter",
    {
      title,
      description:
        "Add a capability adapter to the running server: validated against the base model, loaded, added to load_lora.",
      inputSchema: toolInput(AdapterFieldsSchema.shape),
      outputSchema: { registered: adapterInfo },
      // adds and never replaces; registering an alias again is refused, so a repeat changes nothing
      annotations: { title, readOnlyHint: false, destructiveHint: false, idempotentHint: true, openWorldHint: false },
    },
    (args, extra) =>
      adminCall(isAdmin, extra, async () => ({ registered: infoOf(await ctx.runtime.library.registerEntry(args)) })),
  );
}
