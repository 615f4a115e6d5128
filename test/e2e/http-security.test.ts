import { spawn } from "node:child_process";
import { request } from "node:http";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  call,
  callError,
  connectClient,
  MAIN,
  startHttpServer,
  testConfig,
  type HttpServer,
} from "../helpers/server.js";
import { tempDir } from "../helpers/files.js";

const TOKEN = "alice-token-0123456789abcdef";
const tokenFile = join(tempDir(), "tokens");
writeFileSync(tokenFile, `# team tokens\nalice:${TOKEN}\nbob:bob-token-0123456789abcdef\n`);

let server: HttpServer;
beforeAll(async () => {
  server = await startHttpServer(["--token-file", tokenFile]);
});
afterAll(async () => server?.stop());

const initialize = (headers: Record<string, string>) =>
  fetch(`${server.url}/mcp`, {
    method: "POST",
    headers: { "content-type": "application/json", accept: "application/json, text/event-stream", ...headers },
    body: JSON.stringify({
      jsonrpc: "2.0",
      id: 1,
      method: "initialize",
      params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "raw", version: "0" } },
    }),
  });

describe("HTTP authentication and Host validation", () => {
  it("answers 401 with WWW-Authenticate when the bearer token is missing or wrong", async () => {
    for (const headers of [{}, { authorization: "Bearer wrong-token-000000000000" }]) {
      const res = await initialize(headers);
      expect(res.status).toBe(401);
      expect(res.headers.get("www-authenticate")).toMatch(/^Bearer/);
    }
    const sse = await fetch(`${server.url}/sse`);
    expect(sse.status).toBe(401);
  });

  it("accepts a valid token over Streamable HTTP and SSE, and scopes sessions to the token's identity", async () => {
    const alice = await connectClient("http", server, { authorization: `Bearer ${TOKEN}` });
    const aliceAgain = await connectClient("sse", server, { authorization: `Bearer ${TOKEN}` });
    const bob = await connectClient("http", server, { authorization: "Bearer bob-token-0123456789abcdef" });
    try {
      const { session_id } = await call<{ session_id: string }>(alice.client, "create_session", {
        task: "alice's task",
      });
      // the same identity on another connection and transport sees it; another identity does not
      expect(await call(aliceAgain.client, "get_session", { session_id })).toMatchObject({ task: "alice's task" });
      // someone else's session looks exactly like an unknown id, and names nothing of it
      const foreign = await callError(bob.client, "get_session", { session_id });
      const unknownId = `s_${"A".repeat(24)}`;
      const unknown = await callError(bob.client, "get_session", { session_id: unknownId });
      expect(foreign.replaceAll(session_id, "<id>")).toBe(unknown.replaceAll(unknownId, "<id>"));
      expect(foreign).not.toMatch(/alice/);
      expect((await bob.client.listResources()).resources.map((r) => r.uri)).not.toContain(
        `weact://sessions/${session_id}`,
      );
      await expect(bob.client.readResource({ uri: `weact://sessions/${session_id}` })).rejects.toThrow();
    } finally {
      await Promise.all([alice.close(), aliceAgain.close(), bob.close()]);
    }
  });

  it("rejects a foreign Host header (DNS rebinding) before reading the body", async () => {
    // fetch may not set Host, so this goes through node:http
    const { port } = new URL(server.url);
    const status = await new Promise<number>((resolve, reject) => {
      const req = request(
        {
          host: "127.0.0.1",
          port,
          path: "/mcp",
          method: "POST",
          headers: { host: "evil.example.com", authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
        },
        (res) => {
          res.resume();
          resolve(res.statusCode!);
        },
      );
      req.once("error", reject);
      req.end("{}");
    });
    expect(status).toBe(403);
  });

  it("refuses to start on a non-loopback address without a token file", async () => {
    const child = spawn(process.execPath, [MAIN, "--http", "0", "--host", "0.0.0.0", "--config", testConfig()], {
      stdio: ["ignore", "ignore", "pipe"],
    });
    let err = "";
    child.stderr!.on("data", (d: Buffer) => (err += d.toString()));
    const code = await new Promise<number | null>((resolve) => child.once("exit", resolve));
    expect(code).not.toBe(0);
    expect(err).toMatch(/refusing to serve on 0\.0\.0\.0 without authentication: give --token-file/);
  });
});

describe("stdio transport", () => {
  it("writes nothing but JSON-RPC to stdout, even while the model loads and generates", async () => {
    const child = spawn(process.execPath, [MAIN, "--stdio", "--config", testConfig()], {
      stdio: ["pipe", "pipe", "pipe"],
      env: { ...process.env, WEACT_LOG_LEVEL: "debug" },
    });
    let out = "";
    child.stdout!.on("data", (d: Buffer) => (out += d.toString()));
    const send = (msg: object) => child.stdin!.write(JSON.stringify(msg) + "\n");
    const waitFor = (id: number) =>
      new Promise<void>((resolve, reject) => {
        const timer = setInterval(() => {
          if (out.split("\n").some((l) => l.includes(`"id":${id}`))) {
            clearInterval(timer);
            resolve();
          }
          if (child.exitCode !== null) reject(new Error("server exited"));
        }, 50);
      });
    send({
      jsonrpc: "2.0",
      id: 1,
      method: "initialize",
      params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "raw", version: "0" } },
    });
    await waitFor(1);
    send({ jsonrpc: "2.0", method: "notifications/initialized" });
    send({
      jsonrpc: "2.0",
      id: 2,
      method: "tools/call",
      params: { name: "create_session", arguments: { task: "stdout purity" } },
    });
    await waitFor(2);
    const sessionId = JSON.parse(out.split("\n").find((l) => l.includes('"id":2'))!).result.structuredContent
      .session_id;
    send({
      jsonrpc: "2.0",
      id: 3,
      method: "tools/call",
      params: { name: "generate", arguments: { session_id: sessionId, max_tokens: 4 } },
    });
    await waitFor(3);
    child.stdin!.end();
    await new Promise((resolve) => child.once("exit", resolve));
    const lines = out.split("\n").filter(Boolean);
    expect(lines.length).toBeGreaterThanOrEqual(3);
    for (const line of lines) expect(JSON.parse(line)).toMatchObject({ jsonrpc: "2.0" });
  });
});
