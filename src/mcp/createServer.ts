import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import type { AdminGate } from "./admin.js";
import type { ServerContext } from "./context.js";
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

/** One MCP server object per client connection, all sharing the engine and the sessions. */
export function createServer(
  ctx: ServerContext,
  isAdmin: AdminGate,
): { server: McpServer; cleanup: () => Promise<void> } {
  const server = new McpServer(SERVER_INFO, {
    capabilities: { tools: { listChanged: true }, resources: { listChanged: true }, prompts: {}, logging: {} },
    instructions: INSTRUCTIONS,
  });
  registerCreateSessionTool(server, ctx);
  registerGenerateTool(server, ctx);
  const refreshLoad = registerLoadLoraTool(server, ctx);
  const refreshOffload = registerOffloadLoraTool(server, ctx);
  // a library change updates the adapter enum; the SDK then notifies the client (tools/list_changed)
  const unsubscribe = ctx.runtime.library.onChange(() => {
    refreshLoad();
    refreshOffload();
  });
  registerRegisterAdapterTool(server, ctx, isAdmin);
  registerRefreshAdapterTool(server, ctx, isAdmin);
  registerUnregisterAdapterTool(server, ctx, isAdmin);
  registerAnswerCallTool(server, ctx);
  registerListAdaptersTool(server, ctx, isAdmin);
  registerGetSessionTool(server, ctx);
  registerCloseSessionTool(server, ctx);
  registerRunTaskTool(server, ctx);
  for (const tool of ctx.toolbox.tools.values()) registerExternalTool(server, ctx, tool);
  registerResources(server, ctx, isAdmin);
  registerPrompts(server, ctx);
  return {
    server,
    cleanup: async () => {
      unsubscribe();
      await server.close();
    },
  };
}
