import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { spawnHttpServer } from "../../testkit/mcpClient.js";
import { tempDir, tempLibrary } from "../helpers/files.js";
import {
  call,
  callError,
  connectClient,
  testConfig,
  type Connected,
  type HttpServer,
  type TransportKind,
} from "../helpers/server.js";

/**
 * Issue #52: what a token holder sees of the MCP surface on a team server. The admin tools are listed to admins only
 * (and refused to anyone else who calls them), server paths are shown to admins only, and an argument a tool does not
 * take is refused by name instead of dropped.
 */
const USER = "carol-token-0123456789abcdef";
const ADMIN = "admin-token-0123456789abcdef";
const ADMIN_TOOLS = ["refresh_adapter", "register_adapter", "unregister_adapter"];

const dir = tempDir("weact-surface-");
const tokenFile = join(dir, "tokens");
const adminTokenFile = join(dir, "admin-tokens");
writeFileSync(tokenFile, `carol:${USER}\n`);
writeFileSync(adminTokenFile, `root:${ADMIN}\n`);
const library = tempLibrary();
// an entry whose file is no GGUF: left out of the library, with the error saying why
writeFileSync(join(library.dir, "broken.gguf"), "not a GGUF file");
const manifest = JSON.parse(readFileSync(library.manifest, "utf8")) as { adapters: Record<string, unknown>[] };
manifest.adapters.push({ alias: "broken", file: "broken.gguf", description: "A file that is no LoRA.", scale: 1 });
writeFileSync(library.manifest, JSON.stringify(manifest));

let server: HttpServer;
beforeAll(async () => {
  const config = testConfig({ adapters: { manifest: library.manifest }, server: { adminTokenFile } });
  server = await spawnHttpServer(["--config", config, "--token-file", tokenFile]);
});
afterAll(async () => server?.stop());

const as = (kind: TransportKind, token: string) => connectClient(kind, server, { authorization: `Bearer ${token}` });

/** Every string in a JSON value that looks like an absolute path (or holds one). */
const pathsIn = (value: unknown) => JSON.stringify(value).match(/(?<![\w.:/])\/[\w.-]+\/[^"\s']*/g) ?? [];

interface Listing {
  base_model: { file: string };
  adapters: { alias: string; file: string; error?: string }[];
}

describe.each<TransportKind>(["http", "sse"])("a user token over %s", (kind) => {
  let user: Connected;
  let admin: Connected;
  beforeAll(async () => {
    [user, admin] = await Promise.all([as(kind, USER), as(kind, ADMIN)]);
  });
  afterAll(async () => {
    await Promise.all([user?.close(), admin?.close()]);
  });

  it("is not shown the admin tools; calling one still gets the refusal naming the admin token", async () => {
    const names = async (c: Connected) => (await c.client.listTools()).tools.map((t) => t.name);
    const userTools = await names(user);
    const adminTools = await names(admin);
    expect(adminTools).toEqual(expect.arrayContaining(ADMIN_TOOLS));
    expect(adminTools.filter((t) => !userTools.includes(t)).sort()).toEqual(ADMIN_TOOLS);
    for (const [tool, args] of [
      ["register_adapter", { alias: "extra", file: "plan.gguf", description: "more" }],
      ["refresh_adapter", { alias: "plan", description: "replaced" }],
      ["unregister_adapter", { alias: "plan" }],
    ] as const)
      expect(await callError(user.client, tool, args)).toMatch(/needs an admin token \(server\.adminTokenFile\)/);
  });

  it("sees adapter and model files by name only; an admin sees their paths", async () => {
    const mine = await call<Listing>(user.client, "list_adapters");
    expect(mine.adapters.map((a) => a.file)).toEqual(["plan.gguf", "search.gguf", "write.gguf", "broken.gguf"]);
    expect(mine.base_model.file).not.toContain("/");
    const broken = mine.adapters.find((a) => a.alias === "broken")!;
    expect(broken.error).toMatch(/^file: broken\.gguf is not a GGUF file/);
    expect(pathsIn(mine)).toEqual([]);
    const resource = await user.client.readResource({ uri: "weact://adapters" });
    expect(pathsIn(resource.contents)).toEqual([]);

    const theirs = await call<Listing>(admin.client, "list_adapters");
    expect(theirs.adapters.map((a) => a.file)).toEqual(
      ["plan", "search", "write", "broken"].map((a) => join(library.dir, `${a}.gguf`)),
    );
    expect(theirs.base_model.file).toMatch(/^\//);
    expect(theirs.adapters.at(-1)!.error).toContain(join(library.dir, "broken.gguf"));
    expect(JSON.stringify((await admin.client.readResource({ uri: "weact://adapters" })).contents)).toContain(
      library.dir,
    );
  });

  it("gets an unknown argument refused by name with the nearest valid one, and nothing runs", async () => {
    const { session_id } = await call<{ session_id: string }>(user.client, "create_session", {
      task: "count",
      tools: [],
    });
    const refused = (await user.client.callTool({
      name: "generate",
      arguments: { session_id, max_token: 5 },
    })) as CallToolResult;
    expect(refused.isError).toBe(true);
    const text = (refused.content as { text: string }[])[0]!.text;
    expect(text).toMatch(/generate/);
    expect(text).toMatch(/unknown argument "max_token": did you mean "max_tokens"\?/);
    const { history } = await call<{ history: unknown[] }>(user.client, "get_session", { session_id });
    expect(history).toHaveLength(2); // system and user: no turn was generated without its limit

    expect(await callError(user.client, "list_adapters", { extra: 1 })).toMatch(
      /unknown argument "extra": this tool takes no arguments/,
    );
    expect(await callError(user.client, "create_session", { taks: "count" })).toMatch(
      /unknown argument "taks": did you mean "task"\?/,
    );
    expect(await callError(user.client, "close_session", { session_id, zzz: 1 })).toMatch(
      /unknown argument "zzz": the arguments are session_id/,
    );
    await call(user.client, "close_session", { session_id });
  });
});

describe("tools/list", () => {
  it("says additionalProperties: false on every tool's arguments, as calls now hold it", async () => {
    const admin = await as("http", ADMIN);
    try {
      const { tools } = await admin.client.listTools();
      expect(tools.length).toBeGreaterThanOrEqual(14);
      for (const t of tools)
        expect({ tool: t.name, additionalProperties: t.inputSchema.additionalProperties }).toEqual({
          tool: t.name,
          additionalProperties: false,
        });
    } finally {
      await admin.close();
    }
  });
});
