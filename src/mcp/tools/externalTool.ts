import type { McpHost } from "../host.js";
import { z, type ZodRawShape } from "zod";
import { toolInput } from "../../portableSchema.js";
import { parseArguments, runWithTimeLimit, type ExternalTool } from "../../externalTools/ExternalTool.js";
import type { ServerContext } from "../context.js";
import { callId, sessionId } from "../schemas.js";
import { ownerKey } from "../owners.js";
import { fail, ok, toolCall } from "../results/toolResult.js";

/**
 * Registers an external tool (search, read, run_code) as an MCP tool. With session_id the exchange is
 * recorded in that session's history (answering the model's call call_id, or as a prescribed exchange).
 */
export function registerExternalTool(server: McpHost, ctx: ServerContext, tool: ExternalTool) {
  server.registerTool(
    tool.name,
    {
      title: tool.title,
      // with a session_id the exchange is appended to its history: not read-only, and each call adds one
      annotations: {
        title: tool.title,
        readOnlyHint: false,
        destructiveHint: false,
        idempotentHint: false,
        openWorldHint: tool.openWorld,
      },
      description: `${tool.description} With session_id, the exchange is recorded in that session's history; with call_id it answers the model's own call with the call's own arguments (any given here override them), and arguments that fail this schema are recorded as the call's error result.`,
      inputSchema: toolInput({
        ...documentedOnly(tool.input),
        session_id: sessionId.optional(),
        owner_key: ownerKey,
        call_id: callId.optional(),
      }),
      outputSchema: { ...tool.output, call_id: z.string().optional() },
    },
    (args, extra) =>
      toolCall(async () => {
        const { session_id, owner_key, call_id, ...toolArgs } = args as Record<string, unknown> & {
          session_id?: string;
          owner_key?: string;
          call_id?: string;
        };
        if (call_id && !session_id) return fail("call_id needs the session_id of the session whose call it answers");
        if (!session_id) {
          const parsed = parseArguments(tool, toolArgs);
          if (!parsed.ok) return fail(parsed.error);
          const outcome = await runWithTimeLimit(tool, parsed.args, extra.signal);
          return outcome.ok ? ok(outcome.structured) : fail(outcome.error);
        }
        const outcome = await ctx.sessions.runExternalTool(ctx.owners.of(extra, owner_key), session_id, {
          tool,
          args: toolArgs,
          callId: call_id,
          signal: extra.signal,
        });
        return outcome.ok
          ? ok({ ...outcome.structured, call_id: outcome.callId })
          : fail(`${outcome.error} (recorded as the result of call ${outcome.callId})`);
      }),
  );
}

/**
 * The tool's arguments as MCP documents them, checked by the session layer instead of the SDK: answering a
 * model call needs no arguments (the call has them), and a call whose arguments fail the schema must still
 * be answered (by the validation error) rather than refused before it reaches the session.
 */
function documentedOnly(shape: ZodRawShape): ZodRawShape {
  return Object.fromEntries(
    Object.entries(shape).map(([key, field]) => {
      const { $schema: _, ...documented } = z.toJSONSchema(field, { io: "input", unrepresentable: "any" }) as Record<
        string,
        unknown
      >;
      return [key, z.unknown().optional().meta(documented)];
    }),
  );
}
