import { z } from "zod";
import { orNull } from "../../portableSchema.js";
import { LONG_TEXT_MAX } from "../../config/configSchema.js";
import type { ExternalTool } from "../ExternalTool.js";
import type { IsolationInfo } from "./isolation.js";
import { runCode, RunCodeUnavailableError, type RunCodeLimits } from "./runCode.js";

const LANGUAGES = ["python", "javascript"] as const;

function forModel(r: {
  exitCode: number | null;
  signal: string | null;
  timedOut: boolean;
  stdout: string;
  stderr: string;
}): string {
  const status = r.timedOut ? "timed out (killed)" : r.signal ? `killed by ${r.signal}` : `exit code ${r.exitCode}`;
  return [status, r.stdout && `stdout:\n${r.stdout}`, r.stderr && `stderr:\n${r.stderr}`].filter(Boolean).join("\n");
}

/** run_code: a snippet in a fresh sandbox, with the isolation level detected at start-up reported in every result. */
export function runCodeTool(isolation: IsolationInfo, limits: RunCodeLimits): ExternalTool {
  const languages = LANGUAGES.filter((l) => isolation.interpreters[l]);
  return {
    name: "run_code",
    title: "Run code",
    // a jail without network keeps the snippet on this host; under rlimits alone it can reach the network
    openWorld: !isolation.enforces.network,
    description: `Run a ${languages.join(" or ")} snippet in a fresh sandbox (isolation: ${isolation.level}; wall time up to ${limits.maxTimeoutS} s, ${limits.memoryMb} MB memory). Returns stdout, stderr and the exit code.`,
    input: {
      language: z.enum(LANGUAGES),
      code: z.string().min(1).max(LONG_TEXT_MAX),
      stdin: z.string().max(LONG_TEXT_MAX).optional(),
      timeout_s: z
        .number()
        .positive()
        .max(limits.maxTimeoutS)
        .optional()
        .describe(`Wall-time limit (default ${limits.defaultTimeoutS} s).`),
    },
    output: {
      stdout: z.string(),
      stderr: z.string(),
      exit_code: orNull(z.number(), "ended by a signal"),
      signal: orNull(z.string(), "exited by itself"),
      duration_ms: z.number(),
      timed_out: z.boolean(),
      truncated: z.object({ stdout: z.boolean(), stderr: z.boolean() }),
      isolation: z.string(),
    },
    modelParameters: {
      type: "object",
      properties: { language: { type: "string", enum: languages }, code: { type: "string", minLength: 1 } },
    },
    // the snippet's own limit, plus start-up and clean-up
    timeoutMs: (limits.maxTimeoutS + 10) * 1000,
    async run(args) {
      try {
        const r = await runCode(
          {
            language: args.language as (typeof LANGUAGES)[number],
            code: String(args.code),
            stdin: args.stdin as string | undefined,
            timeoutS: args.timeout_s as number | undefined,
          },
          { isolation, limits },
        );
        return {
          ok: true,
          structured: {
            stdout: r.stdout,
            stderr: r.stderr,
            exit_code: r.exitCode,
            signal: r.signal,
            duration_ms: Math.round(r.durationMs),
            timed_out: r.timedOut,
            truncated: r.truncated,
            isolation: r.isolation,
          },
          forModel: forModel(r),
        };
      } catch (err) {
        if (err instanceof RunCodeUnavailableError) return { ok: false, error: err.message };
        throw err;
      }
    },
  };
}
