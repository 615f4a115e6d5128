import type { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { z } from "zod";
import { LibraryChangeError } from "../../library/AdapterLibrary.js";
import { ManifestEntrySchema, describeIssues, saveManifest } from "../../library/manifest.js";
import { resolve, dirname } from "node:path";
import type { ServerContext } from "../context.js";
import { fail, ok, toolCall } from "../toolResult.js";
import { EngineError } from "../../engine/index.js";

/** Decides whether a request may change the library: stdio (the local user) may; over HTTP only an admin token. */
export type AdminGate = (extra: { authInfo?: { scopes: string[] } }) => boolean;

const ADMIN_REFUSAL = "this tool changes the adapter library and needs an admin token (server.adminTokenFile) when served over HTTP";

const adapterInfo = z.object({ alias: z.string(), sha256: z.string(), scale: z.number(), rank: z.number(), file: z.string() });
const infoOf = (i: { alias: string; sha256: string; scale: number; rank: number; filePath: string }) => ({ alias: i.alias, sha256: i.sha256, scale: i.scale, rank: i.rank, file: i.filePath });

/**
 * register_adapter, refresh_adapter, unregister_adapter: the library changed on a running server. Each
 * change is written back to the manifest (so it survives a restart) and announced to clients
 * (notifications/tools/list_changed with the new load_lora enum).
 */
export function registerAdminAdapterTools(server: McpServer, ctx: ServerContext, isAdmin: AdminGate) {
  const manifestPath = ctx.runtime.config.manifestPath;
  const entryFrom = (args: Record<string, unknown>) => {
    const parsed = ManifestEntrySchema.safeParse(args);
    if (!parsed.success) throw new LibraryChangeError(describeIssues(parsed.error).join("; "));
    return { ...parsed.data, filePath: resolve(dirname(manifestPath), parsed.data.file) };
  };
  const guarded = (fn: () => Promise<Record<string, unknown>>) => (extra: { authInfo?: { scopes: string[] } }) =>
    toolCall(async () => {
      if (!isAdmin(extra)) return fail(ADMIN_REFUSAL);
      try {
        const result = await fn();
        saveManifest(manifestPath, ctx.runtime.library.list().map((a) => a.entry));
        return ok(result);
      } catch (err) {
        if (err instanceof LibraryChangeError || err instanceof EngineError) return fail(err.message);
        throw err;
      }
    });
  const entryShape = {
    alias: z.string().min(1).max(32),
    file: z.string().min(1).max(4096).describe("GGUF LoRA file, relative to the manifest's folder or absolute (must be inside adapters.allowedDirs)."),
    description: z.string().min(1).max(1000).describe("The capability, as the model will read it in load_lora's description."),
    scale: z.number().positive().max(16).optional(),
    activation: z.string().max(2000).optional(),
    release: z.string().max(2000).optional(),
  };

  server.registerTool(
    "register_adapter",
    { title: "Register an adapter (admin)", description: "Add a capability adapter to the running server: validated against the base model, loaded, added to load_lora.", inputSchema: entryShape, outputSchema: { registered: adapterInfo } },
    (args, extra) => guarded(async () => ({ registered: infoOf((await ctx.runtime.library.register(entryFrom(args))).info!) }))(extra),
  );
  server.registerTool(
    "refresh_adapter",
    {
      title: "Refresh an adapter (admin)",
      description: "Point an alias at a new file (or scale or texts). New loads use the new version at once; sessions with the old version active keep it until they offload, then it is freed.",
      inputSchema: { ...entryShape, file: entryShape.file.optional(), description: entryShape.description.optional() },
      outputSchema: { previous: adapterInfo, current: adapterInfo },
    },
    (args, extra) =>
      guarded(async () => {
        const known = ctx.runtime.library.get(args.alias);
        if (!known) throw new LibraryChangeError(`no adapter "${args.alias}" to refresh`);
        const { filePath: _resolved, ...entry } = known.entry;
        const { previous, current } = await ctx.runtime.library.refresh(args.alias, entryFrom({ ...entry, ...Object.fromEntries(Object.entries(args).filter(([, v]) => v !== undefined)) }));
        return { previous: infoOf(previous), current: infoOf(current) };
      })(extra),
  );
  server.registerTool(
    "unregister_adapter",
    { title: "Unregister an adapter (admin)", description: "Remove a capability; sessions that have it active keep it until they offload, then its memory is freed.", inputSchema: { alias: z.string().min(1).max(32) }, outputSchema: { unregistered: z.string() } },
    (args, extra) =>
      guarded(async () => {
        await ctx.runtime.library.unregister(args.alias);
        return { unregistered: args.alias };
      })(extra),
  );
}
