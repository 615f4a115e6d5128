import { spawn, execFileSync } from "node:child_process";
import { readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GgufFormatError, readGgufHeader } from "../native/gguf/reader.js";
import { MAIN, spawnHttpServer } from "../src/client/mcpClient.js";
import { privateAdapters, tempDir } from "./helpers/files.js";
import { call, callError, connectClient, testConfig, type HttpServer } from "./helpers/server.js";

const USER = "erin-token-0123456789abcdef";
const ADMIN = "admin-token-0123456789abcdef";

const fifoIn = (dir: string, name: string) => {
  const path = join(dir, name);
  execFileSync("mkfifo", [path]);
  return path;
};

describe("files that are not regular files", () => {
  const adapters = privateAdapters();
  const fifo = fifoIn(adapters.dir, "fifo.gguf");
  symlinkSync(fifo, join(adapters.dir, "link.gguf"));
  let server: HttpServer;
  beforeAll(async () => {
    const dir = tempDir();
    writeFileSync(join(dir, "tokens"), `erin:${USER}\n`);
    writeFileSync(join(dir, "admin"), `root:${ADMIN}\n`);
    server = await spawnHttpServer(["--config", testConfig({ adapters: { manifest: adapters.manifest }, server: { adminTokenFile: join(dir, "admin") } }), "--token-file", join(dir, "tokens")]);
  });
  afterAll(async () => server?.stop());

  it("refuses a FIFO adapter (also behind a symlink) while every other client is answered within a second", async () => {
    const admin = await connectClient("http", server, { authorization: `Bearer ${ADMIN}` });
    const user = await connectClient("http", server, { authorization: `Bearer ${USER}` });
    try {
      for (const file of ["fifo.gguf", "link.gguf"]) {
        const refused = callError(admin.client, "register_adapter", { alias: "piped", file, description: "a FIFO" });
        const started = performance.now();
        const [listed, anonymous] = await Promise.all([
          user.client.callTool({ name: "list_adapters", arguments: {} }),
          fetch(`${server.url}/mcp`, { method: "POST", headers: { "content-type": "application/json" }, body: "{}" }),
        ]);
        expect(performance.now() - started).toBeLessThan(1_000);
        expect(listed.isError).toBeFalsy();
        expect(anonymous.status).toBe(401);
        expect(await refused).toMatch(/is a FIFO, not a regular file/);
      }
      // nothing half-registered
      const names = ((await user.client.callTool({ name: "list_adapters", arguments: {} })).structuredContent as { adapters: { alias: string }[] }).adapters.map((a) => a.alias);
      expect(names).not.toContain("piped");
    } finally {
      await Promise.all([admin.close(), user.close()]);
    }
  });

  it("lets only an admin token (server.adminTokenFile) change the library; a user token's attempts change nothing", async () => {
    const user = await connectClient("http", server, { authorization: `Bearer ${USER}` });
    const admin = await connectClient("http", server, { authorization: `Bearer ${ADMIN}` });
    try {
      const manifestBefore = readFileSync(adapters.manifest, "utf8");
      for (const [tool, args] of [
        ["register_adapter", { alias: "extra", file: "demo/code.gguf", description: "more" }],
        ["refresh_adapter", { alias: "plan", file: "demo/write-v2.gguf", description: "replaced" }],
        ["unregister_adapter", { alias: "plan" }],
      ] as const) {
        expect(await callError(user.client, tool, args)).toMatch(/needs an admin token \(server\.adminTokenFile\)/);
      }
      expect(readFileSync(adapters.manifest, "utf8")).toBe(manifestBefore);
      const aliases = async () => ((await user.client.callTool({ name: "list_adapters", arguments: {} })).structuredContent as { adapters: { alias: string }[] }).adapters.map((a) => a.alias);
      expect(await aliases()).toEqual(["plan", "search", "write"]);
      await call(admin.client, "register_adapter", { alias: "extra", file: "demo/code.gguf", description: "more" });
      expect(await aliases()).toContain("extra");
      expect(readFileSync(adapters.manifest, "utf8")).toMatch(/"extra"/);
    } finally {
      await Promise.all([user.close(), admin.close()]);
    }
  });

  it("refuses a FIFO as the GGUF reader's input without waiting for a writer", () => {
    const started = performance.now();
    expect(() => readGgufHeader(fifo)).toThrow(GgufFormatError);
    expect(() => readGgufHeader(fifo)).toThrow(/not a regular file \(a FIFO\)/);
    expect(() => readGgufHeader(adapters.dir)).toThrow(/not a regular file \(a directory\)/);
    expect(performance.now() - started).toBeLessThan(1_000);
  });

  it("refuses a FIFO as the base model at start-up, naming it", async () => {
    const model = fifoIn(tempDir(), "model.gguf");
    const child = spawn(process.execPath, [MAIN, "--http", "0", "--config", testConfig(), "--model", model], { stdio: ["ignore", "ignore", "pipe"] });
    let err = "";
    child.stderr!.on("data", (d: Buffer) => (err += d.toString()));
    const code = await new Promise<number | null>((resolve) => child.once("exit", resolve));
    expect(code).not.toBe(0);
    expect(err).toMatch(/not a regular file \(a FIFO\)/);
  });
});
