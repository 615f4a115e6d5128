import { McpServer as McpServer2025 } from "@modelcontextprotocol/sdk/server/mcp.js";
import { McpServer as McpServer2026 } from "@modelcontextprotocol/server";
import { ADMIN_TOOLS, type AdminGate } from "./admin.js";
import type { ServerContext } from "./context.js";
import { Host2025, Host2026, type McpCall, type McpHost } from "./host.js";
import { registerPrompts } from "./prompts.js";
import { registerResources } from "./resources.js";
import { registerAnswerCallTool } from "./tools/answerCall.js";
import { registerCloseSessionTool } from "./tools/closeSession.js";
import { registerCreateSessionTool } from "./tools/createSession.js";
import { registerExternalTool } from "./tools/externalTool.js";
import { registerGenerateTool } from "./tools/generate.js";
import { registerGetSessionTool } from "./tools/getSession.js";
import { registerListAdaptersTool } from "./tools/listAdapters.js";
import { registerLoadLoraTool } from "./tools/loadLora.js";
import { registerOffloadLoraTool } from "./tools/offloadLora.js";
import { registerRefreshAdapterTool } from "./tools/refreshAdapter.js";
import { registerRegisterAdapterTool } from "./tools/registerAdapter.js";
import { registerRunTaskTool } from "./tools/runTask.js";
import { registerUnregisterAdapterTool } from "./tools/unregisterAdapter.js";

export const SERVER_INFO = { name: "weact-mcp", version: "0.1.0" };

const INSTRUCTIONS =
  "weact-mcp serves a local model whose capability adapters (LoRA) switch as actions. create_session with a task, then loop: generate; for each tool call in the result, answer it by its call_id (load_lora, offload_lora, or the external tool; answer_call to answer it with an error instead); generate again. list_adapters shows the library.";

const OPTIONS = {
  capabilities: { tools: { listChanged: true }, resources: { listChanged: true }, prompts: {}, logging: {} },
  instructions: INSTRUCTIONS,
};

/**
 * The MCP surface, defined once for both revisions: every tool, resource and prompt registered on `host`. Returns the
 * refresh of the tools whose input follows the library (the adapter enum of load_lora and offload_lora).
 */
function defineSurface(host: McpHost, ctx: ServerContext, isAdmin: AdminGate): () => void {
  registerCreateSessionTool(host, ctx);
  registerGenerateTool(host, ctx);
  const refreshLoad = registerLoadLoraTool(host, ctx);
  const refreshOffload = registerOffloadLoraTool(host, ctx);
  registerRegisterAdapterTool(host, ctx, isAdmin);
  registerRefreshAdapterTool(host, ctx, isAdmin);
  registerUnregisterAdapterTool(host, ctx, isAdmin);
  registerAnswerCallTool(host, ctx);
  registerListAdaptersTool(host, ctx, isAdmin);
  registerGetSessionTool(host, ctx);
  registerCloseSessionTool(host, ctx);
  registerRunTaskTool(host, ctx);
  for (const tool of ctx.toolbox.tools.values()) registerExternalTool(host, ctx, tool);
  registerResources(host, ctx, isAdmin);
  registerPrompts(host, ctx);
  return () => {
    refreshLoad();
    refreshOffload();
  };
}

/** A 2025-era MCP server object for one client connection (stdio, Streamable HTTP session, legacy SSE stream). */
export function createServer(
  ctx: ServerContext,
  isAdmin: AdminGate,
  transport: McpCall["transport"],
): { server: McpServer2025; cleanup: () => Promise<void> } {
  const server = new McpServer2025(SERVER_INFO, OPTIONS);
  const refresh = defineSurface(new Host2025(server, transport), ctx, isAdmin);
  // a library change updates the adapter enum; the SDK then notifies the client (tools/list_changed)
  const unsubscribe = ctx.runtime.library.onChange(refresh);
  return {
    server,
    cleanup: async () => {
      unsubscribe();
      await server.close();
    },
  };
}

/**
 * A 2026-07-28 MCP server object for one request (the revision has no connections): built from the library as it is
 * now. The admin tools are listed to admin callers only; anyone else calling one gets its refusal, as on a 2025-era
 * connection (`RelayTransport`).
 */
export function createRequestServer(
  ctx: ServerContext,
  isAdmin: AdminGate,
  caller: { authInfo?: { scopes: string[] }; requestInfo?: Request },
): McpServer2026 {
  const server = new McpServer2026(SERVER_INFO, OPTIONS);
  const host = new Host2026(server);
  defineSurface(host, ctx, isAdmin);
  // the revision names each request's method in a header, which the SDK checks against the body
  const listing = caller.requestInfo?.headers.get("mcp-method") === "tools/list";
  if (listing && !isAdmin(caller)) for (const name of ADMIN_TOOLS) host.unlist(name);
  return server;
}
