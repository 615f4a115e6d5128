import { writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import {
  callTool,
  connectClient as connect,
  spawnHttpServer,
  type SpawnedHttpServer,
  type TransportKind,
} from "../../testkit/mcpClient.js";
import { TEST_THREADS } from "./engine.js";
import { tempDir, tempLibrary } from "./files.js";

export { MAIN, type TransportKind } from "../../testkit/mcpClient.js";
export type HttpServer = SpawnedHttpServer;
export type Connected = Awaited<ReturnType<typeof connect>>;
export const call = callTool;
export type { RequestOptions } from "@modelcontextprotocol/sdk/shared/protocol.js";

type Section = Record<string, unknown>;

/**
 * A config for spawned test servers: CPU only, small contexts, one thread. vitest runs two test
 * files at once on two cores; two servers at two threads each would oversubscribe them, and
 * llama.cpp's spinning threads slow down many times over when they do.
 * Everything a server may write goes to temporary places unless the test says otherwise: a private copy of
 * the adapter library, traces and the search index. No test writes into the repository.
 */
export function testConfig(
  extra: Record<string, unknown> & {
    model?: Section;
    adapters?: Section;
    harness?: Section;
    tools?: Section & { search?: Section };
  } = {},
): string {
  const dir = tempDir();
  const path = join(dir, "weact.json");
  const { tools = {} } = extra;
  writeFileSync(
    path,
    JSON.stringify({
      ...extra,
      model: { gpu: false, contextSize: 4096, threads: TEST_THREADS, demo: "random", ...extra.model },
      adapters: { manifest: tempLibrary().manifest, ...extra.adapters },
      harness: { traceDir: join(dir, "traces"), ...extra.harness },
      tools: { ...tools, search: { indexFile: join(dir, "search-index.json"), ...tools.search } },
    }),
  );
  return path;
}

export const startHttpServer = (args: string[] = [], config = testConfig()) =>
  spawnHttpServer(["--config", config, ...args]);

export const connectClient = (
  kind: TransportKind,
  server?: HttpServer,
  headers: Record<string, string> = {},
  config = testConfig(),
  args: string[] = [],
) => connect(kind, { url: server?.url, headers, serverArgs: ["--config", config, ...args] });

/** Calls a tool expected to fail and returns its error text (an isError result or a protocol error). */
export async function callError(client: Client, name: string, args: Record<string, unknown> = {}): Promise<string> {
  let result: CallToolResult;
  try {
    result = (await client.callTool({ name, arguments: args })) as CallToolResult;
  } catch (err) {
    return (err as Error).message;
  }
  if (!result.isError) throw new Error(`${name} unexpectedly succeeded: ${JSON.stringify(result.structuredContent)}`);
  return (result.content as { text: string }[]).map((c) => c.text).join("\n");
}
