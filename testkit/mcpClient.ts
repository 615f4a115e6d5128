import { spawn, type ChildProcess } from "node:child_process";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { SSEClientTransport } from "@modelcontextprotocol/sdk/client/sse.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { RequestOptions } from "@modelcontextprotocol/sdk/shared/protocol.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { PACKAGE_ROOT } from "../src/paths.js";

/**
 * Drives a weact-mcp server from another process, as any MCP client would: spawn it, connect over
 * stdio, Streamable HTTP or SSE, call tools. Used by the test suites, the benchmarks and the soak run.
 */

export const MAIN = join(PACKAGE_ROOT, "dist", "src", "cli", "main.js");
export type TransportKind = "stdio" | "http" | "sse";

export interface SpawnedHttpServer {
  url: string;
  process: ChildProcess;
  stderr: () => string;
  stop: () => Promise<void>;
}

/** Spawns the built server on an ephemeral loopback port and waits for its "listening on" line. */
export async function spawnHttpServer(
  args: string[] = [],
  env: Record<string, string> = {},
): Promise<SpawnedHttpServer> {
  const child = spawn(process.execPath, [MAIN, "--http", "0", ...args], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, WEACT_LOG_LEVEL: "warn", ...env },
  });
  let err = "";
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start:\n${err}`)), 60_000);
    child.stderr!.on("data", (d: Buffer) => {
      err += d.toString();
      const m = /listening on (http:\/\/\S+)/.exec(err);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]!);
      }
    });
    child.once("exit", (code) => reject(new Error(`server exited with ${code}:\n${err}`)));
  });
  return {
    url,
    process: child,
    stderr: () => err,
    stop: () =>
      new Promise((resolve) => {
        if (child.exitCode !== null) return resolve();
        child.once("exit", () => resolve());
        child.kill("SIGTERM");
      }),
  };
}

export interface ConnectOptions {
  /** For stdio: arguments of the spawned server. */
  serverArgs?: string[];
  /** For http/sse: the server's base URL. */
  url?: string;
  headers?: Record<string, string>;
}

/** `stderr()` is what a spawned stdio server has logged so far (empty for http/sse: the server is not ours). */
export async function connectClient(
  kind: TransportKind,
  opts: ConnectOptions = {},
): Promise<{ client: Client; close: () => Promise<void>; stderr: () => string }> {
  const client = new Client({ name: "weact-client", version: "0.1.0" });
  const headers = opts.headers ?? {};
  if (kind === "stdio") {
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [MAIN, "--stdio", ...(opts.serverArgs ?? [])],
      env: { ...process.env, WEACT_LOG_LEVEL: "warn" } as Record<string, string>,
      stderr: "pipe",
    });
    let err = "";
    // read as it comes: an unread pipe fills up and blocks the server's logging
    transport.stderr?.on("data", (d: Buffer) => void (err = (err + d.toString()).slice(-100_000)));
    await client.connect(transport);
    return { client, close: () => client.close(), stderr: () => err };
  }
  if (!opts.url) throw new Error("connecting over http or sse needs the server's url");
  const transport =
    kind === "http"
      ? new StreamableHTTPClientTransport(new URL(`${opts.url}/mcp`), { requestInit: { headers } })
      : new SSEClientTransport(new URL(`${opts.url}/sse`), {
          requestInit: { headers },
          eventSourceInit: {
            fetch: (url, init) =>
              fetch(url, { ...init, headers: { ...(init?.headers as Record<string, string>), ...headers } }),
          },
        });
  await client.connect(transport);
  return { client, close: () => client.close(), stderr: () => "" };
}

/** Calls a tool and returns its structured result; an isError result throws with its text. */
export async function callTool<T = Record<string, unknown>>(
  client: Client,
  name: string,
  args: Record<string, unknown> = {},
  options?: RequestOptions,
): Promise<T> {
  const result = (await client.callTool({ name, arguments: args }, undefined, options)) as CallToolResult;
  if (result.isError)
    throw new Error(`${name} failed: ${(result.content as { text?: string }[]).map((c) => c.text).join(" ")}`);
  return result.structuredContent as T;
}
