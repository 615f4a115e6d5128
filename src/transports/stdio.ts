import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import type { ServerContext } from "../mcp/context.js";
import { createServer } from "../mcp/createServer.js";

/** One client over stdin/stdout (what MCP clients spawn). Nothing but JSON-RPC may reach stdout. */
export async function serveStdio(ctx: ServerContext): Promise<{ close: () => Promise<void>; closed: Promise<void> }> {
  // the stdio client is the local user who started the server: it may change the library
  const { server, cleanup } = createServer(ctx, () => true);
  const transport = new StdioServerTransport();
  const closed = new Promise<void>((resolve) => (transport.onclose = resolve));
  await server.connect(transport);
  return { close: cleanup, closed };
}
