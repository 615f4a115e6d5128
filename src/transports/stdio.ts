import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import type { AdminGate } from "../mcp/admin.js";
import type { ServerContext } from "../mcp/context.js";
import { createServer } from "../mcp/createServer.js";
import { RelayTransport } from "../mcp/relay.js";

/** One client over stdin/stdout (what MCP clients spawn). Nothing but JSON-RPC may reach stdout. */
export async function serveStdio(ctx: ServerContext): Promise<{ close: () => Promise<void>; closed: Promise<void> }> {
  // the stdio client is the local user who started the server: it may change the library
  const isAdmin: AdminGate = () => true;
  const { server, cleanup } = createServer(ctx, isAdmin, "stdio");
  const relay = new RelayTransport(new StdioServerTransport(), isAdmin);
  const closed = new Promise<void>((resolve) => (relay.onclose = resolve)); // before connect: the SDK chains after it
  await server.connect(relay);
  return { close: cleanup, closed };
}
