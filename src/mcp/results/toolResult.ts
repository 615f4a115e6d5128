import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { EngineError } from "../../engine/index.js";
import { SessionError } from "../../sessions/errors.js";

/** A successful result: JSON text for people and older clients, structuredContent for programs. */
export function ok(structured: Record<string, unknown>): CallToolResult {
  return { content: [{ type: "text", text: JSON.stringify(structured, null, 2) }], structuredContent: structured };
}

/** A tool error the caller (or the local model) can read and recover from. */
export function fail(message: string, structured?: Record<string, unknown>): CallToolResult {
  return {
    isError: true,
    content: [{ type: "text", text: message }],
    ...(structured ? { structuredContent: structured } : {}),
  };
}

/** Runs a tool body; expected failures become isError results, anything else propagates as an MCP error. */
export async function toolCall(fn: () => Promise<CallToolResult>): Promise<CallToolResult> {
  try {
    return await fn();
  } catch (err) {
    if (err instanceof SessionError) return fail(`${err.message} [${err.code}]`);
    if (err instanceof EngineError) return fail(`${err.message} [${err.code}]`);
    throw err;
  }
}
