import type { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { z } from "zod";
import type { ExternalTool } from "../../tools/ExternalTool.js";
import { ownerOf, type ServerContext } from "../context.js";
import { callId, sessionId } from "../schemas.js";
import { fail, ok, toolCall } from "../toolResult.js";

/**
 * Registers an external tool (search, read, run_code) as an MCP tool. With session_id the exchange is
 * recorded in that session's history (answering the model's call call_id, or as a prescribed exchange).
 */
export function registerExternalTool(server: McpServer, ctx: ServerContext, tool: ExternalTool) {
  server.registerTool(
    tool.name,
    {
      title: tool.title,
      description: `${tool.description} With session_id, the exchange is recorded in that session's history; with call_id it answers the model's own call.`,
      inputSchema: {
        ...tool.input,
        session_id: sessionId.optional(),
        call_id: callId.optional(),
      },
      outputSchema: { ...tool.output, call_id: z.string().optional() },
    },
    (args, extra) =>
      toolCall(async () => {
        const { session_id, call_id, ...toolArgs } = args as Record<string, unknown> & { session_id?: string; call_id?: string };
        if (call_id && !session_id) return fail("call_id needs the session_id of the session whose call it answers");
        if (!session_id) {
          const outcome = await tool.run(toolArgs, AbortSignal.any([extra.signal, AbortSignal.timeout(tool.timeoutMs)]));
          return outcome.ok ? ok(outcome.structured) : fail(outcome.error);
        }
        const outcome = await ctx.sessions.runExternalTool(ownerOf(extra), session_id, { tool, args: toolArgs, callId: call_id, signal: extra.signal });
        return outcome.ok ? ok({ ...outcome.structured, call_id: outcome.callId }) : fail(`${outcome.error} (recorded as the result of call ${outcome.callId})`);
      }),
  );
}
