import { ResourceTemplate, type McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { sessionView } from "../sessions/view.js";
import { ownerOf, type ServerContext } from "./context.js";
import { adapterListing } from "./tools/listAdapters.js";

const json = (uri: string, value: unknown) => ({ contents: [{ uri, mimeType: "application/json", text: JSON.stringify(value, null, 2) }] });

/** The adapter library, and each of the caller's sessions (history and state); others' sessions stay invisible. */
export function registerResources(server: McpServer, ctx: ServerContext) {
  server.registerResource(
    "adapters",
    "weact://adapters",
    { title: "Adapter library", description: "The base model and every adapter with its identity (alias, content hash, scale).", mimeType: "application/json" },
    async (uri) => json(uri.href, { base_model: ctx.runtime.engine.model, adapters: adapterListing(ctx) }),
  );
  server.registerResource(
    "session",
    new ResourceTemplate("weact://sessions/{session_id}", {
      list: async (extra) => ({
        resources: ctx.sessions.list(ownerOf(extra)).map((s) => ({ uri: `weact://sessions/${s.id}`, name: `session ${s.id}`, description: s.task.slice(0, 120), mimeType: "application/json" })),
      }),
    }),
    { title: "Session", description: "A session's state and its history as the model reads it.", mimeType: "application/json" },
    async (uri, variables, extra) => json(uri.href, sessionView(ctx.sessions.get(ownerOf(extra), String(variables.session_id)))),
  );
}
