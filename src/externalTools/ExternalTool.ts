import { z, type ZodRawShape } from "zod";
import type { JsonSchemaObject } from "../engine/index.js";

export type ToolOutcome =
  | {
      ok: true;
      structured: Record<string, unknown>;
      /** What the local model reads as the call's result. */ forModel: string;
    }
  | { ok: false; error: string };

/**
 * An action outside the model's weights (search, read, run_code). One definition serves both faces: the MCP
 * tool clients call and the function the local model calls; when a session is named, the exchange is
 * recorded in its history.
 */
export interface ExternalTool {
  readonly name: string;
  readonly title: string;
  readonly description: string;
  /** MCP arguments (session_id and call_id are added by the server). */
  readonly input: ZodRawShape;
  readonly output: ZodRawShape;
  /** The function's parameters as the model reads them (node-llama-cpp's grammar subset: every property required). */
  readonly modelParameters: JsonSchemaObject;
  readonly timeoutMs: number;
  /** Whether it reaches beyond this server (the web, another host): MCP's openWorldHint. */
  readonly openWorld: boolean;
  run(args: Record<string, unknown>, signal: AbortSignal): Promise<ToolOutcome>;
}

/** `args` checked against the tool's own input schema (defaults applied), or why they fail it, each field named. */
export function parseArguments(
  tool: ExternalTool,
  args: Record<string, unknown>,
): { ok: true; args: Record<string, unknown> } | { ok: false; error: string } {
  const parsed = z.object(tool.input).strict().safeParse(args);
  if (parsed.success) return { ok: true, args: parsed.data };
  const issues = parsed.error.issues.map((i) => `${i.path.join(".") || "(arguments)"}: ${i.message}`);
  return { ok: false, error: `${tool.name} refused: invalid arguments ${JSON.stringify(args)}: ${issues.join("; ")}` };
}

/**
 * Runs a tool under its own time limit (`timeoutMs`) and the caller's signal; an unexpected failure becomes an error
 * outcome the model (or client) can read. The one way a tool runs, with or without a session.
 */
export async function runWithTimeLimit(
  tool: ExternalTool,
  args: Record<string, unknown>,
  outer: AbortSignal,
): Promise<ToolOutcome> {
  const signal = AbortSignal.any([outer, AbortSignal.timeout(tool.timeoutMs)]);
  try {
    return await tool.run(args, signal);
  } catch (err) {
    if (signal.aborted && !outer.aborted)
      return { ok: false, error: `${tool.name} timed out after ${tool.timeoutMs} ms` };
    return { ok: false, error: `${tool.name} failed: ${(err as Error).message}` };
  }
}
