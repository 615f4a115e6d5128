import { spawn, type ChildProcess } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { SSEClientTransport } from "@modelcontextprotocol/sdk/client/sse.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { PACKAGE_ROOT } from "../../src/paths.js";
import { tempDir } from "./files.js";

export const MAIN = join(PACKAGE_ROOT, "dist", "src", "cli", "main.js");
export type TransportKind = "stdio" | "http" | "sse";

/** A config for spawned test servers: CPU only, small contexts, short handoffs. */
export function testConfig(extra: Record<string, unknown> = {}): string {
  const path = join(tempDir(), "weact.json");
  writeFileSync(path, JSON.stringify({ model: { gpu: false, contextSize: 4096 }, sessions: { handoffMaxChars: 24 }, ...extra }));
  return path;
}

export interface HttpServer {
  url: string;
  process: ChildProcess;
  stderr: () => string;
  stop: () => Promise<void>;
}

/** Spawns the built server on an ephemeral loopback port and waits for its "listening on" line. */
export async function startHttpServer(args: string[] = [], config = testConfig()): Promise<HttpServer> {
  const child = spawn(process.execPath, [MAIN, "--http", "0", "--config", config, ...args], { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, WEACT_LOG_LEVEL: "warn" } });
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

export interface Connected {
  client: Client;
  close: () => Promise<void>;
}

export async function connectClient(kind: TransportKind, server?: HttpServer, headers: Record<string, string> = {}, config = testConfig()): Promise<Connected> {
  const client = new Client({ name: "weact-test", version: "0.0.0" });
  if (kind === "stdio") {
    const transport = new StdioClientTransport({ command: process.execPath, args: [MAIN, "--stdio", "--config", config], env: { ...process.env, WEACT_LOG_LEVEL: "warn" } as Record<string, string>, stderr: "pipe" });
    await client.connect(transport);
    return { client, close: () => client.close() };
  }
  if (!server) throw new Error("an HTTP server is needed for http/sse clients");
  const init = { headers };
  const transport =
    kind === "http"
      ? new StreamableHTTPClientTransport(new URL(`${server.url}/mcp`), { requestInit: init })
      : new SSEClientTransport(new URL(`${server.url}/sse`), { requestInit: init, eventSourceInit: { fetch: (url, i) => fetch(url, { ...i, headers: { ...(i?.headers as Record<string, string>), ...headers } }) } });
  await client.connect(transport);
  return { client, close: () => client.close() };
}

/** Calls a tool and returns its structured result, failing loudly on isError. */
export async function call<T = Record<string, unknown>>(client: Client, name: string, args: Record<string, unknown> = {}): Promise<T> {
  const result = (await client.callTool({ name, arguments: args })) as CallToolResult;
  if (result.isError) throw new Error(`${name} failed: ${JSON.stringify(result.content)}`);
  return result.structuredContent as T;
}

/** Calls a tool expected to fail and returns its error text. */
export async function callError(client: Client, name: string, args: Record<string, unknown> = {}): Promise<string> {
  try {
    const result = (await client.callTool({ name, arguments: args })) as CallToolResult;
    if (!result.isError) throw new Error(`${name} unexpectedly succeeded: ${JSON.stringify(result.structuredContent)}`);
    return (result.content as { text: string }[]).map((c) => c.text).join("\n");
  } catch (err) {
    if ((err as Error).message.includes("unexpectedly succeeded")) throw err;
    return (err as Error).message; // protocol-level errors (e.g. invalid params) count as clear errors too
  }
}
