import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { z } from "zod";
import { EngineError } from "../engine/index.js";
import { LibraryChangeError } from "../library/AdapterLibrary.js";
import { fail, ok, toolCall } from "./results/toolResult.js";

/**
 * Decides whether a request may change the library (and sees the admin tools listed and server paths): stdio (the
 * local user) may; over HTTP only an admin token.
 */
export type AdminGate = (extra: { authInfo?: { scopes: string[] } }) => boolean;

/** The tools that change the library: listed to admin callers only (`RelayTransport`), refused to anyone else. */
export const ADMIN_TOOLS: ReadonlySet<string> = new Set(["register_adapter", "refresh_adapter", "unregister_adapter"]);

const ADMIN_REFUSAL =
  "this tool changes the adapter library and needs an admin token (server.adminTokenFile) when served over HTTP";

/**
 * Runs an admin tool's library change for an admin caller. The library writes each change back to the manifest
 * and announces it (notifications/tools/list_changed with the new load_lora enum); a refused change is a tool error.
 */
export function adminCall(
  isAdmin: AdminGate,
  extra: { authInfo?: { scopes: string[] } },
  change: () => Promise<Record<string, unknown>>,
): Promise<CallToolResult> {
  return toolCall(async () => {
    if (!isAdmin(extra)) return fail(ADMIN_REFUSAL);
    try {
      return ok(await change());
    } catch (err) {
      if (err instanceof LibraryChangeError || err instanceof EngineError) return fail(err.message);
      throw err;
    }
  });
}

/** An adapter version in the admin tools' results. */
export const adapterInfo = z.object({
  alias: z.string(),
  sha256: z.string(),
  scale: z.number(),
  rank: z.number(),
  file: z.string(),
});
export const infoOf = (i: { alias: string; sha256: string; scale: number; rank: number; filePath: string }) => ({
  alias: i.alias,
  sha256: i.sha256,
  scale: i.scale,
  rank: i.rank,
  file: i.filePath,
});
