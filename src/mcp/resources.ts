import { ErrorCode, McpError } from "@modelcontextprotocol/sdk/types.js";
import { TraceStore } from "../harness/trace/TraceStore.js";
import { SessionError } from "../sessions/errors.js";
import { sessionView } from "../sessions/view.js";
import type { AdminGate } from "./admin.js";
import type { McpCall, McpHost } from "./host.js";
import type { ServerContext } from "./context.js";
import { resourceOwnerKey } from "./owners.js";
import { adapterListing, shownPath } from "./results/adapterListing.js";

/** A session-layer refusal (an unknown session, a bad owner key) as the invalid-params error it is, with its code. */
function clientError<T>(fn: () => T): T {
  try {
    return fn();
  } catch (err) {
    if (err instanceof SessionError) throw new McpError(ErrorCode.InvalidParams, `${err.message} [${err.code}]`);
    throw err;
  }
}

const json = (uri: string, value: unknown) => ({
  contents: [{ uri, mimeType: "application/json", text: JSON.stringify(value, null, 2) }],
});

/**
 * The adapter library, the KV cache's occupancy, and each of the caller's sessions (history and state); others'
 * sessions stay invisible. Server paths only to an admin.
 */
export function registerResources(server: McpHost, ctx: ServerContext, isAdmin: AdminGate) {
  // a request that names no owner (no token, MCP session or key) owns nothing to list
  const listOwner = (extra: McpCall) => ctx.owners.find(extra, resourceOwnerKey(extra));
  /** The owner of a resource read: a missing or foreign key is the caller's error, as an unknown session is. */
  const readOwner = (extra: McpCall) => clientError(() => ctx.owners.of(extra, resourceOwnerKey(extra)));
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
  server.registerResourceTemplate(
    "session",
    "weact://sessions/{session_id}",
    async (extra) => {
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
    {
      title: "Session",
      description: "A session's state and its history as the model reads it.",
      mimeType: "application/json",
    },
    async (uri, variables, extra) => {
      const owner = readOwner(extra);
      return json(uri.href, sessionView(clientError(() => ctx.sessions.get(owner, String(variables.session_id)))));
    },
  );
  const traces = new TraceStore(ctx.harness.traceDir);
  server.registerResourceTemplate(
    "trace",
    "weact://traces/{trace_id}",
    async (extra) => {
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
    {
      title: "Trace",
      description:
        "A run_task trajectory: every model call, tool call, adapter action and cache rebuild, with the time decomposition.",
      mimeType: "application/json",
    },
    async (uri, variables, extra) => {
      const events = await traces.read(readOwner(extra), String(variables.trace_id));
      if (!events)
        throw new McpError(ErrorCode.InvalidParams, `no trace "${String(variables.trace_id)}" for this client`);
      return json(uri.href, events);
    },
  );
}
