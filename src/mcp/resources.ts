import { ResourceTemplate, type McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { ErrorCode, McpError } from "@modelcontextprotocol/sdk/types.js";
import { TraceStore } from "../harness/trace/TraceStore.js";
import { sessionView } from "../sessions/view.js";
import type { AdminGate } from "./admin.js";
import type { ServerContext } from "./context.js";
import { resourceOwnerKey, type RequestIdentity } from "./owners.js";
import { adapterListing, shownPath } from "./results/adapterListing.js";

const json = (uri: string, value: unknown) => ({
  contents: [{ uri, mimeType: "application/json", text: JSON.stringify(value, null, 2) }],
});

/**
 * The adapter library, the KV cache's occupancy, and each of the caller's sessions (history and state); others'
 * sessions stay invisible. Server paths only to an admin.
 */
export function registerResources(server: McpServer, ctx: ServerContext, isAdmin: AdminGate) {
  // a request that names no owner (no token, MCP session or key) owns nothing to list
  const listOwner = (extra: RequestIdentity) => ctx.owners.find(extra, resourceOwnerKey(extra));
  server.registerResource(
    "adapters",
    "weact://adapters",
    {
      title: "Adapter library",
      description: "The base model and every adapter with its identity (alias, content hash, scale).",
      mimeType: "application/json",
    },
    async (uri, extra) => {
      const admin = isAdmin(extra);
      const model = ctx.runtime.engine.model;
      return json(uri.href, {
        base_model: { ...model, filePath: shownPath(model.filePath, admin) },
        adapters: adapterListing(ctx, admin),
      });
    },
  );
  server.registerResource(
    "kv-cache",
    "weact://cache",
    {
      title: "KV cache",
      description:
        "The cache strategy and what it holds across all sessions: contexts and sequences, idle and spilled lanes, spill bytes, evictions (counts only, no content).",
      mimeType: "application/json",
    },
    async (uri) => json(uri.href, ctx.runtime.engine.cacheStats()),
  );
  server.registerResource(
    "session",
    new ResourceTemplate("weact://sessions/{session_id}", {
      list: async (extra) => {
        const owner = listOwner(extra);
        const sessions = owner === undefined ? [] : ctx.sessions.list(owner);
        return {
          resources: sessions.map((s) => ({
            uri: `weact://sessions/${s.id}`,
            name: `session ${s.id}`,
            description: s.task.slice(0, 120),
            mimeType: "application/json",
          })),
        };
      },
    }),
    {
      title: "Session",
      description: "A session's state and its history as the model reads it.",
      mimeType: "application/json",
    },
    async (uri, variables, extra) => {
      const owner = ctx.owners.of(extra, resourceOwnerKey(extra));
      return json(uri.href, sessionView(ctx.sessions.get(owner, String(variables.session_id))));
    },
  );
  const traces = new TraceStore(ctx.harness.traceDir);
  server.registerResource(
    "trace",
    new ResourceTemplate("weact://traces/{trace_id}", {
      list: async (extra) => {
        const owner = listOwner(extra);
        const ids = owner === undefined ? [] : await traces.list(owner);
        return {
          resources: ids.map((id) => ({
            uri: `weact://traces/${id}`,
            name: `trace ${id}`,
            mimeType: "application/json",
          })),
        };
      },
    }),
    {
      title: "Trace",
      description:
        "A run_task trajectory: every model call, tool call, adapter action and cache rebuild, with the time decomposition.",
      mimeType: "application/json",
    },
    async (uri, variables, extra) => {
      const events = await traces.read(ctx.owners.of(extra, resourceOwnerKey(extra)), String(variables.trace_id));
      if (!events)
        throw new McpError(ErrorCode.InvalidParams, `no trace "${String(variables.trace_id)}" for this client`);
      return json(uri.href, events);
    },
  );
}
