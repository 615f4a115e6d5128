import type { McpHost } from "../host.js";
import { z } from "zod";
import { orNull, toolInput } from "../../portableSchema.js";
import type { AdminGate } from "../admin.js";
import { adapterListing, shownPath } from "../results/adapterListing.js";
import type { ServerContext } from "../context.js";
import { ok } from "../results/toolResult.js";

export function registerListAdaptersTool(server: McpHost, ctx: ServerContext, isAdmin: AdminGate) {
  server.registerTool(
    "list_adapters",
    {
      title: "List adapters",
      annotations: {
        title: "List adapters",
        readOnlyHint: true,
        destructiveHint: false,
        idempotentHint: true,
        openWorldHint: false,
      },
      description:
        "The capability library: each adapter's alias, description, rank, scale, file (its path on the server for an admin token, else its name), content hash and whether it is resident.",
      inputSchema: toolInput({}),
      outputSchema: {
        base_model: z.object({ file: z.string(), sha256: z.string(), architecture: z.string() }),
        retired_versions: z
          .array(z.object({ alias: z.string(), sha256: z.string() }))
          .describe("Old versions still in memory because a session has them active."),
        rss_bytes: z.number().describe("The server's resident memory."),
        withdrawn_tools: z
          .array(z.object({ name: z.string(), reason: z.string() }))
          .describe("External tools this server could offer but does not here, and why."),
        adapters: z.array(
          z.object({
            alias: z.string(),
            description: z.string(),
            file: z.string(),
            scale: z.number(),
            rank: orNull(z.number(), "not resident"),
            sha256: orNull(z.string(), "not resident"),
            size_bytes: orNull(z.number(), "not resident"),
            resident: z.boolean(),
            invocation: z
              .string()
              .optional()
              .describe(
                "An activated LoRA's invocation text: it applies from the last occurrence of it in the prompt on (the KV before it is the base's), and not at all without one.",
              ),
            error: z.string().optional(),
          }),
        ),
      },
    },
    async (_args, extra) => {
      const m = ctx.runtime.engine.model;
      const admin = isAdmin(extra);
      return ok({
        base_model: { file: shownPath(m.filePath, admin), sha256: m.sha256, architecture: m.architecture },
        adapters: adapterListing(ctx, admin),
        retired_versions: ctx.runtime.library.retiredVersions().map((v) => ({ alias: v.alias, sha256: v.sha256 })),
        rss_bytes: process.memoryUsage().rss,
        withdrawn_tools: [...ctx.toolbox.withdrawn],
      });
    },
  );
}
