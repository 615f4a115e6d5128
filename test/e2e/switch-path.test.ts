import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, beforeAll, expect, it } from "vitest";
import { PACKAGE_ROOT } from "../../src/paths.js";
import { tempDir } from "../helpers/files.js";
import { call, connectClient, testConfig, type Connected, type HttpServer } from "../helpers/server.js";
import { spawnHttpServer } from "../../testkit/mcpClient.js";

/** The most files under src/ a load_lora may cross from the MCP tool to llama.cpp's adapter call (docs/ARCHITECTURE.md). */
const MAX_FILES = 12;
const stacks = join(tempDir(), "adapter-stacks.jsonl");
let server: HttpServer;
let c: Connected;

beforeAll(async () => {
  // no work ahead of time: the one adapter call recorded is the switch's own
  const config = testConfig({ cache: { background: false } });
  server = await spawnHttpServer(["--config", config], {
    NODE_OPTIONS: `--import=${pathToFileURL(join(PACKAGE_ROOT, "test/helpers/adapterCallStacks.mjs")).href}`,
    WEACT_ADAPTER_STACKS: stacks,
  });
  c = await connectClient("http", server);
}, 120_000);

afterAll(async () => {
  await c?.close();
  await server?.stop();
});

/** The files under src/ a stack passes through, in order from llama.cpp's call outwards (the built .js named as .ts). */
function srcFiles(stack: string): string[] {
  const files: string[] = [];
  for (const m of stack.matchAll(/\/dist\/(src\/[^:)]+)\.js:\d+:\d+/g)) {
    const file = `${m[1]}.ts`;
    if (!files.includes(file)) files.push(file);
  }
  return files;
}

it(`a load_lora over MCP reaches llama.cpp's adapter call through at most ${MAX_FILES} files under src/`, async () => {
  const { session_id } = await call<{ session_id: string }>(c.client, "create_session", { task: "Where is Paris?" });
  await call(c.client, "load_lora", { session_id, adapter: "plan" });
  expect(existsSync(stacks)).toBe(true);
  const recorded = readFileSync(stacks, "utf8")
    .trim()
    .split("\n")
    .map((l) => (JSON.parse(l) as { stack: string }).stack);
  // the switch's own call: its stack runs back to the MCP tool (async frames included)
  const path = recorded.map(srcFiles).find((files) => files.includes("src/mcp/tools/loadLora.ts"));
  expect(path, `no adapter call ran back to the tool; stacks:\n${recorded.join("\n\n")}`).toBeDefined();
  expect(path![0]).toBe("src/engines/local/decoding/internals.ts");
  expect(path!.length, path!.join("\n")).toBeLessThanOrEqual(MAX_FILES);
  // the walk in docs/ARCHITECTURE.md names every one of them
  const walk = readFileSync(join(PACKAGE_ROOT, "docs", "ARCHITECTURE.md"), "utf8").split("## The layers")[0]!;
  for (const file of path!) expect(walk, `${file} is on the path but not in ARCHITECTURE.md's walk`).toContain(file);
}, 120_000);
