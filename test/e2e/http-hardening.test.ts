import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { request } from "node:http";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { existsSync, readdirSync, writeFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { spawnHttpServer } from "../../testkit/mcpClient.js";
import { PACKAGE_ROOT } from "../../src/paths.js";
import { tempDir } from "../helpers/files.js";
import { jailTestable, NO_BWRAP } from "../helpers/host.js";
import { call, connectClient, testConfig, type HttpServer } from "../helpers/server.js";

const ALICE = "alice-token-0123456789abcdef";
const BOB = "bob-token-0123456789abcdef";
const CAROL = "carol-token-0123456789abcdef";
const tokenFile = join(tempDir(), "tokens");
writeFileSync(tokenFile, `alice:${ALICE}\nbob:${BOB}\ncarol:${CAROL}\n`);
const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
const ACCEPT = { accept: "application/json, text/event-stream" };
/** A 2026-07-28 request: its revision and the client's capabilities travel in each request's _meta. */
const MODERN_HEADERS = { "content-type": "application/json", "mcp-protocol-version": "2026-07-28" };
const modernRequest = (id: number, method: string, params: Record<string, unknown>, version = "2026-07-28") =>
  JSON.stringify({
    jsonrpc: "2.0",
    id,
    method,
    params: {
      ...params,
      _meta: {
        "io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": { name: "raw", version: "0" },
        ...(params._meta as Record<string, unknown> | undefined),
      },
    },
  });
const INITIALIZE = JSON.stringify({
  jsonrpc: "2.0",
  id: 1,
  method: "initialize",
  params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "raw", version: "0" } },
});

/** A raw request through node:http (fetch cannot set Host, and would decode Content-Encoding itself). */
function raw(
  url: string,
  opts: { method?: string; path: string; headers?: Record<string, string>; body?: string | Buffer },
): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: string }> {
  const { port } = new URL(url);
  return new Promise((resolve, reject) => {
    const req = request(
      { host: "127.0.0.1", port, path: opts.path, method: opts.method ?? "POST", headers: opts.headers },
      (res) => {
        let body = "";
        res.on("data", (d: Buffer) => (body += d.toString()));
        res.on("end", () => resolve({ status: res.statusCode!, headers: res.headers, body }));
      },
    );
    req.once("error", reject);
    req.end(opts.body);
  });
}

/**
 * Bytes written to the server as they are (HTTP that node:http would not send: no Host, a request never finished),
 * then what came back until the server closed the connection (or `giveUpMs` passed), and when.
 */
function rawBytes(
  url: string,
  bytes: string,
  giveUpMs = 10_000,
): Promise<{ status: number; headers: Record<string, string>; body: string; ms: number }> {
  const { port } = new URL(url);
  const started = performance.now();
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), "127.0.0.1", () => socket.write(bytes));
    let received = "";
    socket.on("data", (d: Buffer) => (received += d.toString()));
    socket.once("error", reject);
    const giveUp = setTimeout(() => socket.destroy(), giveUpMs);
    socket.once("close", () => {
      clearTimeout(giveUp);
      const [head = "", body = ""] = received.split("\r\n\r\n", 2);
      const [statusLine = "", ...lines] = head.split("\r\n");
      const headers = Object.fromEntries(
        lines.map((l) => [l.slice(0, l.indexOf(":")).toLowerCase(), l.slice(l.indexOf(":") + 1).trim()]),
      );
      resolve({ status: Number(statusLine.split(" ")[1] ?? 0), headers, body, ms: performance.now() - started });
    });
  });
}

/** An error body must be JSON and say nothing about the server's insides: no HTML, stack frames or file paths. */
function expectCleanJson(res: { status: number; headers: Record<string, unknown>; body: string }, status: number) {
  expect(res.status).toBe(status);
  expect(String(res.headers["content-type"])).toMatch(/^application\/json/);
  expect(() => JSON.parse(res.body)).not.toThrow();
  expect(res.body).not.toMatch(/<html|<pre|<!DOCTYPE/i);
  expect(res.body).not.toMatch(/\bat .+:\d+:\d+|node_modules|\.js:\d+/);
  for (const path of [PACKAGE_ROOT, tmpdir(), "/usr/", "/root/", "/home/"]) expect(res.body).not.toContain(path);
}

/** Traces alice ran earlier: one whose first line (a 70,000-character task) is over 64 KB, one cut off mid-write. */
const traceDir = tempDir("weact-traces-");
const event = (e: Record<string, unknown>) => `${JSON.stringify(e)}\n`;
const LONG_TASK = "x".repeat(70_000);
writeFileSync(
  join(traceDir, "t_longfirstline.jsonl"),
  event({ type: "run_start", owner: "token:alice", task: LONG_TASK }) + event({ type: "run_end" }),
);
writeFileSync(
  join(traceDir, "t_tornlastline1.jsonl"),
  event({ type: "run_start", owner: "token:alice", task: "torn" }) +
    event({ type: "turn", n: 1 }) +
    '{"type":"turn","n":2,"te',
);

let server: HttpServer;
beforeAll(async () => {
  // NODE_ENV=development is where Express's own error pages print stack traces; ours must not
  server = await spawnHttpServer(
    [
      "--config",
      // a keepalive every second, so a test sees one arrive on a quiet stream; 3 s to send a request
      testConfig({
        server: { maxBodyBytes: 300_000, streamKeepaliveSeconds: 1, bodyTimeoutSeconds: 3 },
        harness: { traceDir },
      }),
      "--token-file",
      tokenFile,
    ],
    { NODE_ENV: "development" },
  );
});
afterAll(async () => server?.stop());

describe("HTTP errors before and after authentication", () => {
  it("checks the token before reading the body: a malformed, oversized or mis-encoded body without a token is a JSON 401", async () => {
    for (const [headers, body] of [
      [{ "content-type": "application/json" }, '{"x":'],
      [{ "content-type": "application/json" }, Buffer.alloc(400_000, 0x61)],
      [{ "content-type": "application/json", "content-encoding": "bogus" }, "{}"],
      [{ "content-type": "text/plain" }, "hello"],
    ] as const) {
      const res = await raw(server.url, { path: "/mcp", headers: { ...ACCEPT, ...headers }, body });
      expectCleanJson(res, 401);
      expect(String(res.headers["www-authenticate"])).toMatch(/^Bearer/);
    }
  });

  it("answers every HTTP error with a JSON body without stack traces or paths", async () => {
    const authed = { ...ACCEPT, ...bearer(ALICE) };
    const json = { ...authed, "content-type": "application/json" };
    expectCleanJson(await raw(server.url, { path: "/mcp", headers: json, body: '{"x":' }), 400);
    expectCleanJson(
      await raw(server.url, {
        path: "/mcp",
        headers: json,
        body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list", params: { pad: "a".repeat(310_000) } }),
      }),
      413,
    );
    expectCleanJson(
      await raw(server.url, { path: "/mcp", headers: { ...json, "content-encoding": "bogus" }, body: "{}" }),
      415,
    );
    expectCleanJson(
      await raw(server.url, {
        path: "/mcp",
        headers: { ...json, "content-encoding": "gzip" },
        body: "not gzip at all",
      }),
      400,
    );
    expectCleanJson(
      await raw(server.url, { path: "/mcp", headers: { ...authed, "content-type": "text/plain" }, body: "hello" }),
      415,
    );
    expectCleanJson(await raw(server.url, { path: "/nowhere", method: "GET", headers: authed }), 404);
    expectCleanJson(await raw(server.url, { path: "/mcp", method: "PUT", headers: json, body: "{}" }), 405);
    expectCleanJson(
      await raw(server.url, { path: "/mcp", headers: { ...json, accept: "text/html" }, body: INITIALIZE }),
      406,
    );
    expectCleanJson(
      await raw(server.url, { path: "/mcp", headers: { ...json, "mcp-session-id": randomUUID() }, body: INITIALIZE }),
      404,
    );
    expectCleanJson(await raw(server.url, { path: "/messages?sessionId=nope", headers: json, body: "{}" }), 404);
    expectCleanJson(
      await raw(server.url, { path: "/mcp", headers: { ...json, host: "evil.example.com" }, body: INITIALIZE }),
      403,
    );
    expectCleanJson(
      await raw(server.url, {
        path: "/mcp",
        headers: { ...json, origin: "http://evil.example.com" },
        body: INITIALIZE,
      }),
      403,
    );
    // a page on another port of a loopback name is another origin (another local app): refused too
    expectCleanJson(
      await raw(server.url, { path: "/mcp", headers: { ...json, origin: "http://localhost:9999" }, body: INITIALIZE }),
      403,
    );
    expectCleanJson(
      await raw(server.url, {
        path: "/mcp",
        headers: { ...json, origin: server.url.replace("http:", "ftp:") },
        body: INITIALIZE,
      }),
      403,
    );
    // a browser page on the server's own origin is fine
    expect(
      (await raw(server.url, { path: "/mcp", headers: { ...json, origin: server.url }, body: INITIALIZE })).status,
    ).toBe(200);
  });

  it("refuses a request without a Host header as JSON, naming the header", async () => {
    for (const request of [
      `POST /mcp HTTP/1.1\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: ${INITIALIZE.length}\r\n\r\n${INITIALIZE}`,
      "GET /health HTTP/1.1\r\nConnection: close\r\n\r\n",
      "GET /health HTTP/1.0\r\n\r\n",
    ]) {
      const res = await rawBytes(server.url, request);
      expectCleanJson(res, 400);
      expect(JSON.parse(res.body)).toMatchObject({
        error: { code: -32600, message: expect.stringMatching(/no Host header.*send Host: <host>:<port>/) },
      });
    }
  });

  it("answers a request whose body or headers never finish with a JSON 408 after server.bodyTimeoutSeconds, not minutes", async () => {
    const { host } = new URL(server.url);
    const headers = [
      `Host: ${host}`,
      `Authorization: Bearer ${ALICE}`,
      "Content-Type: application/json",
      "Accept: application/json, text/event-stream",
    ].join("\r\n");
    for (const request of [
      // authenticated, so its body is being read: 100 bytes announced, 11 sent
      `POST /mcp HTTP/1.1\r\n${headers}\r\nContent-Length: 100\r\n\r\n{"jsonrpc":`,
      // headers that never end
      `GET /health HTTP/1.1\r\n${headers}\r\n`,
    ]) {
      const res = await rawBytes(server.url, request);
      expectCleanJson(res, 408);
      expect(JSON.parse(res.body)).toMatchObject({
        error: { code: -32600, message: expect.stringMatching(/within 3 s \(server\.bodyTimeoutSeconds\)/) },
      });
      expect(res.headers.connection).toBe("close");
      expect(res.ms).toBeGreaterThan(2_500);
      expect(res.ms).toBeLessThan(6_000);
    }
    // the server goes on answering
    expect((await raw(server.url, { path: "/health", method: "GET", headers: bearer(ALICE) })).status).toBe(200);
  });

  it("takes a 200 KB task (a pasted document) under the body limit past every length bound: only the window refuses it", async () => {
    const alice = await connectClient("http", server, bearer(ALICE));
    try {
      const task = `Summarise: ${"lorem ipsum dolor sit amet ".repeat(7_500)}`;
      expect(task.length).toBeGreaterThan(200_000);
      // no zod bound smaller than the body limit refuses it: the window does, its tokens do not fit 4096
      for (const [tool, args] of [
        ["create_session", { task }],
        ["run_task", { task, policy: "base" }],
      ] as const) {
        const refused = await alice.client.callTool({ name: tool, arguments: args });
        expect(refused.isError).toBe(true);
        expect(JSON.stringify(refused.content)).not.toMatch(/too_big|100000/i);
        expect(JSON.stringify(refused.content)).toMatch(
          /task: more tokens than the context window holds \(4096, model\.contextSize\).*input_too_long/,
        );
      }
    } finally {
      await alice.close();
    }
  });
});

/** The MCP session id of a connected Streamable HTTP client. */
const sessionIdOf = (connected: Awaited<ReturnType<typeof connectClient>>) => connected.client.transport!.sessionId!;

/** Opens a legacy SSE stream by hand and returns its session id and everything it receives. */
async function openSse(
  url: string,
  token: string,
): Promise<{ sessionId: string; received: () => string; close: () => void }> {
  const abort = new AbortController();
  const res = await fetch(`${url}/sse`, {
    headers: { ...bearer(token), accept: "text/event-stream" },
    signal: abort.signal,
  });
  const reader = res.body!.getReader();
  let text = "";
  const decoder = new TextDecoder();
  const sessionId = await new Promise<string>((resolve, reject) => {
    void (async () => {
      try {
        for (;;) {
          const { value, done } = await reader.read();
          if (done) return;
          text += decoder.decode(value);
          const m = /sessionId=([\w-]+)/.exec(text);
          if (m) resolve(m[1]!);
        }
      } catch (err) {
        if (!abort.signal.aborted) reject(err as Error);
      }
    })();
  });
  return { sessionId, received: () => text, close: () => abort.abort() };
}

describe("connections belong to the token that opened them", () => {
  it("refuses another identity's Streamable HTTP session id for DELETE, GET and POST exactly like an unknown id; the owner keeps working", async () => {
    const alice = await connectClient("http", server, bearer(ALICE));
    try {
      const id = sessionIdOf(alice);
      const asBob = { ...ACCEPT, ...bearer(BOB), "content-type": "application/json" };
      const list = JSON.stringify({ jsonrpc: "2.0", id: 7, method: "tools/list" });
      for (const method of ["DELETE", "GET", "POST"]) {
        const foreign = await raw(server.url, {
          method,
          path: "/mcp",
          headers: { ...asBob, "mcp-session-id": id },
          body: method === "POST" ? list : undefined,
        });
        const unknown = await raw(server.url, {
          method,
          path: "/mcp",
          headers: { ...asBob, "mcp-session-id": randomUUID() },
          body: method === "POST" ? list : undefined,
        });
        expect({ status: foreign.status, body: foreign.body }).toEqual({ status: unknown.status, body: unknown.body });
        expect(foreign.status).toBe(404);
      }
      // alice's connection was neither ended nor taken over
      expect((await alice.client.listTools()).tools.map((t) => t.name)).toContain("create_session");
    } finally {
      await alice.close();
    }
  });

  it("refuses another identity's legacy SSE session id on /messages; the owner's stream gets only its own answers", async () => {
    const alice = await openSse(server.url, ALICE);
    try {
      const post = (token: string, sessionId: string, body: string) =>
        raw(server.url, {
          path: `/messages?sessionId=${sessionId}`,
          headers: { ...bearer(token), "content-type": "application/json" },
          body,
        });
      expect((await post(ALICE, alice.sessionId, INITIALIZE)).status).toBe(202);
      const foreign = await post(
        BOB,
        alice.sessionId,
        JSON.stringify({ jsonrpc: "2.0", id: 99, method: "tools/list" }),
      );
      const unknown = await post(BOB, randomUUID(), JSON.stringify({ jsonrpc: "2.0", id: 99, method: "tools/list" }));
      expect({ status: foreign.status, body: foreign.body }).toEqual({ status: unknown.status, body: unknown.body });
      expect(
        (await post(ALICE, alice.sessionId, JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" })))
          .status,
      ).toBe(202);
      expect(
        (await post(ALICE, alice.sessionId, JSON.stringify({ jsonrpc: "2.0", id: 2, method: "tools/list" }))).status,
      ).toBe(202);
      await expect.poll(() => alice.received(), { timeout: 5_000 }).toMatch(/"id":2/);
      expect(alice.received()).not.toMatch(/"id":99/);
    } finally {
      alice.close();
    }
  });
});

/** The server's work queue as /status.json reports it. */
const workQueue = async (url: string, token: string) =>
  (
    (await (await fetch(`${url}/status.json`, { headers: bearer(token) })).json()) as {
      queue: { pending: number; running: number };
    }
  ).queue;

/**
 * A turn of 2,000 tokens (tens of seconds here) that may not stop on its own, posted raw so its socket can drop:
 * the request, and when the server reports decoding on its response.
 */
function longTurn(url: string, headers: Record<string, string>, body: string) {
  const { port } = new URL(url);
  const post = request({ host: "127.0.0.1", port, path: "/mcp", method: "POST", headers });
  post.on("error", () => undefined); // the socket is destroyed on purpose
  const decoding = new Promise<void>((resolve) =>
    post.on("response", (res) => {
      let text = "";
      res.on("data", (d: Buffer) => {
        text += d.toString();
        if (/decoding: \d+ tokens generated/.test(text)) resolve();
      });
      res.on("error", () => undefined);
    }),
  );
  post.end(body);
  return { post, decoding };
}

/** A session for `longTurn`: a brief system prompt and no tools, so nothing but the turn runs. */
const countingSession = async (c: Awaited<ReturnType<typeof connectClient>>) =>
  (await call<{ session_id: string }>(c.client, "create_session", { task: "count", system: "Be brief.", tools: [] }))
    .session_id;

/** A generate call's params for `longTurn`: up to 2,000 tokens, with every way to stop biased away. */
const longGenerate = (session_id: string) => ({
  name: "generate",
  arguments: {
    session_id,
    max_tokens: 2000,
    token_bias: { "<tool_call>": -100, "<|im_end|>": -100, "<|endoftext|>": -100 },
  },
  _meta: { progressToken: "long-turn" },
});

describe("a client that goes away", () => {
  // id 0 too: the SDK cancels a request by its id and skips a falsy one (issue #52: it ran to its end, slot and CPU)
  it.each([
    { id: 1, name: "1", how: "its socket drops" },
    { id: 0, name: "0", how: "its socket drops" },
    { id: 0, name: "0", how: "the client cancels it" },
  ])(
    "a Streamable HTTP call with id $name is cancelled when $how: its generation stops at once, its turn is not recorded",
    async ({ id, how }) => {
      const bob = await connectClient("http", server, bearer(BOB));
      try {
        const session_id = await countingSession(bob);
        const { post, decoding } = longTurn(
          server.url,
          { ...ACCEPT, ...bearer(BOB), "content-type": "application/json", "mcp-session-id": sessionIdOf(bob) },
          JSON.stringify({ jsonrpc: "2.0", id, method: "tools/call", params: longGenerate(session_id) }),
        );
        await decoding;
        expect((await workQueue(server.url, BOB)).running).toBe(1);
        if (how.includes("drops")) post.destroy();
        else {
          const cancel = { jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: id } };
          const sent = await raw(server.url, {
            path: "/mcp",
            headers: {
              ...ACCEPT,
              ...bearer(BOB),
              "content-type": "application/json",
              "mcp-session-id": sessionIdOf(bob),
            },
            body: JSON.stringify(cancel),
          });
          expect(sent.status).toBe(202);
        }
        const dropped = performance.now();
        await expect
          .poll(async () => (await workQueue(server.url, BOB)).running, { timeout: 3_000, interval: 50 })
          .toBe(0);
        post.destroy();
        console.log(`call ${id}: its generation stopped ${(performance.now() - dropped).toFixed(0)} ms after ${how}`);
        // nothing of the cancelled turn is in the history, and the session goes on
        const { history } = await call<{ history: { role: string }[] }>(bob.client, "get_session", { session_id });
        expect(history.map((m) => m.role)).toEqual(["system", "user"]);
        const next = await call<{ finish_reason: string }>(bob.client, "generate", { session_id, max_tokens: 2 });
        expect(next.finish_reason).toMatch(/stop|length|tool_calls/);
      } finally {
        await bob.close();
      }
    },
  );
});

describe("the 2026-07-28 revision's requests (no MCP session)", () => {
  it("a call with id 0 is cancelled when its socket drops: its generation stops at once, its turn is not recorded", async () => {
    const bob = await connectClient("http", server, bearer(BOB));
    try {
      const session_id = await countingSession(bob);
      // the same turn, as a 2026-07-28 request: its revision in its _meta, no Mcp-Session-Id
      const { post, decoding } = longTurn(
        server.url,
        { ...ACCEPT, ...bearer(BOB), ...MODERN_HEADERS, "mcp-method": "tools/call", "mcp-name": "generate" },
        modernRequest(0, "tools/call", longGenerate(session_id)),
      );
      await decoding;
      expect((await workQueue(server.url, BOB)).running).toBe(1);
      post.destroy();
      await expect
        .poll(async () => (await workQueue(server.url, BOB)).running, { timeout: 3_000, interval: 50 })
        .toBe(0);
      const { history } = await call<{ history: { role: string }[] }>(bob.client, "get_session", { session_id });
      expect(history.map((m) => m.role)).toEqual(["system", "user"]);
      await call(bob.client, "close_session", { session_id });
    } finally {
      await bob.close();
    }
  });

  it("answers a refused request with a JSON body (a missing envelope, an unknown revision, a body that never ends)", async () => {
    const headers = { ...ACCEPT, ...bearer(BOB), ...MODERN_HEADERS, "mcp-method": "tools/list" };
    const missing = await raw(server.url, {
      path: "/mcp",
      headers,
      body: JSON.stringify({ jsonrpc: "2.0", id: 7, method: "tools/list", params: {} }),
    });
    expectCleanJson(missing, 400);
    expect(missing.body).toMatch(/missing the required per-request envelope/);
    const unknown = await raw(server.url, {
      path: "/mcp",
      headers: { ...headers, "mcp-protocol-version": "2099-01-01" },
      body: modernRequest(8, "tools/list", {}, "2099-01-01"),
    });
    expectCleanJson(unknown, 400);
    expect(JSON.parse(unknown.body)).toMatchObject({ id: 8, error: { data: { supported: ["2026-07-28"] } } });
    // a body that never ends is cut off by server.bodyTimeoutSeconds (3 s here), as on the 2025 path
    const body = modernRequest(9, "tools/list", {});
    const slow = await rawBytes(
      server.url,
      `POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${BOB}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\nContent-Length: ${body.length}\r\n\r\n${body.slice(0, 20)}`,
    );
    expect(slow.status).toBe(408);
    expect(slow.ms).toBeLessThan(8_000);
    expect(() => JSON.parse(slow.body)).not.toThrow();
  });
});

/**
 * A client in its own process, as any MCP client would be (the SDK's, over Streamable HTTP with its own stream):
 * it opens connections until the server refuses one, then sessions until one is refused, prints how many, and
 * waits to be killed.
 */
const GREEDY_CLIENT = `
import { callTool, connectClient } from ${JSON.stringify(pathToFileURL(join(PACKAGE_ROOT, "dist", "testkit", "mcpClient.js")).href)};
const [url, token] = process.argv.slice(2);
const held = [];
for (;;) {
  try {
    held.push(await connectClient("http", { url, headers: { authorization: "Bearer " + token } }));
  } catch {
    break;
  }
}
let sessions = 0;
for (;;) {
  try {
    await callTool(held[sessions % held.length].client, "create_session", { task: "left behind" });
    sessions++;
  } catch {
    break;
  }
}
console.log(JSON.stringify({ connections: held.length, sessions }));
setInterval(() => undefined, 60_000);
`;

/** The ids of the sessions `token` holds, as /status.json reports them. */
const mySessions = async (url: string, token: string) =>
  (
    (await (await fetch(`${url}/status.json`, { headers: bearer(token) })).json()) as {
      sessions: { mine: { id: string }[] };
    }
  ).sessions.mine.map((s) => s.id);

describe("a quiet stream", () => {
  it("gets a keepalive comment within server.streamKeepaliveSeconds on the GET /mcp stream and the legacy SSE stream", async () => {
    // Streamable HTTP: a session, then its server stream, on which the server has nothing to say
    const init = await raw(server.url, {
      path: "/mcp",
      headers: { ...ACCEPT, ...bearer(BOB), "content-type": "application/json" },
      body: INITIALIZE,
    });
    const sessionId = String(init.headers["mcp-session-id"]);
    const abort = new AbortController();
    const sse = await openSse(server.url, BOB);
    try {
      const opened = performance.now();
      const stream = await fetch(`${server.url}/mcp`, {
        headers: { ...bearer(BOB), accept: "text/event-stream", "mcp-session-id": sessionId },
        signal: abort.signal,
      });
      expect(stream.status).toBe(200);
      const reader = stream.body!.getReader();
      const { value } = await reader.read();
      expect(new TextDecoder().decode(value)).toBe(": keepalive\n\n");
      expect(performance.now() - opened).toBeLessThan(2_500);
      await expect.poll(() => sse.received(), { timeout: 2_500, interval: 100 }).toMatch(/^: keepalive$/m);
    } finally {
      abort.abort();
      sse.close();
      await raw(server.url, {
        method: "DELETE",
        path: "/mcp",
        headers: { ...bearer(BOB), "mcp-session-id": sessionId },
      });
    }
  });
});

describe("a legacy SSE client whose stream drops", () => {
  it("keeps its sessions: they belong to its token, not its stream, and a new stream reaches them after the grace", async () => {
    const before = await connectClient("sse", server, bearer(ALICE));
    const open = async () =>
      (await call<{ session_id: string }>(before.client, "create_session", { task: "over SSE" })).session_id;
    const used = await open();
    const unused = await open();
    await before.close(); // the stream drops: legacy SSE has no other way to end
    const dropped = performance.now();
    const after = await connectClient("sse", server, bearer(ALICE));
    try {
      await expect(call(after.client, "generate", { session_id: used, max_tokens: 1 })).resolves.toMatchObject({
        finish_reason: expect.any(String),
      });
      // past the grace (5 s) in which a dropped connection's client may come back, the unused one is still there:
      // only idle expiry (sessions.idleMinutes) closes a session nobody uses
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, 6_000 - (performance.now() - dropped))));
      expect(await mySessions(server.url, ALICE)).toEqual(expect.arrayContaining([used, unused]));
      for (const session_id of [used, unused]) await call(after.client, "close_session", { session_id });
    } finally {
      await after.close();
    }
  });
});

describe("a client that crashes", () => {
  it("gives its identity's connections back seconds after its process is killed; its sessions stay its token's, closable from a new connection", async () => {
    const script = join(tempDir(), "greedy-client.mjs");
    writeFileSync(script, GREEDY_CLIENT);
    const child = spawn(process.execPath, [script, server.url, CAROL], { stdio: ["ignore", "pipe", "inherit"] });
    try {
      const held = await new Promise<{ connections: number; sessions: number }>((resolve, reject) => {
        child.stdout.once("data", (d: Buffer) => resolve(JSON.parse(d.toString()) as never));
        child.once("exit", (code) => reject(new Error(`the client exited with ${code}`)));
      });
      // every connection carol may hold (server.maxConnectionsPerClient), and sessions up to a limit
      expect(held.connections).toBe(16);
      expect(held.sessions).toBeGreaterThan(0);
      const initialize = () =>
        raw(server.url, {
          path: "/mcp",
          headers: { ...ACCEPT, ...bearer(CAROL), "content-type": "application/json" },
          body: INITIALIZE,
        });
      expect((await initialize()).status).toBe(429);
      child.kill("SIGKILL");
      const killed = performance.now();
      // a new connection of carol's is let in once the server knows the client is gone
      let opened: Awaited<ReturnType<typeof initialize>> | undefined;
      for (const until = killed + 15_000; performance.now() < until; await new Promise((r) => setTimeout(r, 250))) {
        opened = await initialize();
        if (opened.status !== 429) break;
      }
      const freed = performance.now() - killed;
      console.log(
        `a killed client held ${held.connections} connections and ${held.sessions} sessions; given back ${freed.toFixed(0)} ms after the kill`,
      );
      expect(opened?.status).toBe(200);
      await raw(server.url, {
        method: "DELETE",
        path: "/mcp",
        headers: { ...bearer(CAROL), "mcp-session-id": String(opened!.headers["mcp-session-id"]) },
      });
      // and its sessions: still carol's (sessions belong to identities, not connections); she lists and closes them
      // from a new connection, and a new one opens
      const carol = await connectClient("http", server, bearer(CAROL));
      try {
        const left = await mySessions(server.url, CAROL);
        expect(left).toHaveLength(held.sessions);
        for (const session_id of left) await call(carol.client, "close_session", { session_id });
        await expect(call(carol.client, "create_session", { task: "after the crash" })).resolves.toMatchObject({
          session_id: expect.stringMatching(/^s_/),
        });
        expect(await mySessions(server.url, CAROL)).toHaveLength(1);
      } finally {
        await carol.close();
      }
    } finally {
      child.kill("SIGKILL");
    }
  });
});

describe("connection caps and idle expiry", () => {
  let capped: HttpServer;
  beforeAll(async () => {
    capped = await spawnHttpServer([
      "--config",
      testConfig({ server: { maxConnectionsPerClient: 2, maxConnections: 3, connectionIdleSeconds: 1 } }),
      "--token-file",
      tokenFile,
    ]);
  });
  afterAll(async () => capped?.stop());

  const open = (token: string) =>
    raw(capped.url, {
      path: "/mcp",
      headers: { ...ACCEPT, ...bearer(token), "content-type": "application/json" },
      body: INITIALIZE,
    });
  const count = async () =>
    JSON.parse((await raw(capped.url, { method: "GET", path: "/health", headers: bearer(ALICE) })).body)
      .connections as number;

  it("caps connections per token and in all, naming the setting, and frees idle ones back to the baseline count", async () => {
    const baseline = await count();
    const alice = [];
    for (let i = 0; i < 20; i++) alice.push(await open(ALICE));
    expect(alice.filter((r) => r.status === 200)).toHaveLength(2);
    const refused = alice.find((r) => r.status === 429)!;
    expectCleanJson(refused, 429);
    expect(refused.body).toMatch(/server\.maxConnectionsPerClient/);
    expect((await open(BOB)).status).toBe(200);
    const full = await open(BOB);
    expect(full.status).toBe(429);
    expect(full.body).toMatch(/server\.maxConnections\b/);
    expect(await count()).toBe(baseline + 3);
    // nobody uses them: after the idle time they are closed and forgotten
    await expect.poll(count, { timeout: 6_000, interval: 250 }).toBe(baseline);
    expect((await open(ALICE)).status).toBe(200);
  });

  it("keeps a legacy SSE connection open while a call on it runs longer than the idle time (the answer comes over the stream)", async ({
    skip,
  }) => {
    if (!jailTestable()) return skip(NO_BWRAP); // run_code is offered on a server with tokens only inside a jail
    await expect.poll(count, { timeout: 6_000, interval: 250 }).toBe(0);
    const alice = await connectClient("sse", capped, bearer(ALICE));
    try {
      // the POST is answered 202 at once; the 3 s call is three idle periods (1 s) long
      const ran = await call<{ stdout: string }>(
        alice.client,
        "run_code",
        { language: "python", code: "import time\ntime.sleep(3)\nprint('done')" },
        { timeout: 15_000 },
      );
      expect(ran.stdout).toBe("done\n");
    } finally {
      await alice.close();
    }
  });
  it("a legacy SSE call the client cancels no longer holds its connection busy: it idles out", async ({ skip }) => {
    if (!jailTestable()) return skip(NO_BWRAP);
    await expect.poll(count, { timeout: 6_000, interval: 250 }).toBe(0);
    const alice = await connectClient("sse", capped, bearer(ALICE));
    try {
      const abort = new AbortController();
      const running = alice.client.callTool(
        { name: "run_code", arguments: { language: "python", code: "import time\ntime.sleep(60)" } },
        undefined,
        { signal: abort.signal, timeout: 90_000 },
      );
      await new Promise((r) => setTimeout(r, 1_500));
      abort.abort();
      await expect(running).rejects.toThrow();
      // the cancelled call is never answered: were it still counted, the connection would stay open for the minute
      await expect.poll(count, { timeout: 8_000, interval: 250 }).toBe(0);
    } finally {
      await alice.close();
    }
  });
});

describe("traces on a server with small limits", () => {
  const ownTraces = join(tempDir(), "traces");
  let small: HttpServer;
  beforeAll(async () => {
    small = await spawnHttpServer([
      "--config",
      testConfig({
        sessions: { maxSessionsPerClient: 1 },
        // about 1 KB: a client's newest trace alone is over it
        harness: { traceDir: ownTraces, maxTraceMiBPerClient: 0.001, maxTokensPerTurn: 8 },
      }),
      "--token-file",
      tokenFile,
    ]);
  });
  afterAll(async () => small?.stop());

  it("a run_task refused before it had a session writes no trace and takes no row of the status page", async () => {
    const alice = await connectClient("http", small, bearer(ALICE));
    try {
      await call(alice.client, "create_session", { task: "holds the one session alice may have" });
      for (let i = 0; i < 3; i++) {
        const refused = await alice.client.callTool({
          name: "run_task",
          arguments: { task: "no room", policy: "base" },
        });
        expect(refused.isError).toBe(true);
        expect(JSON.stringify(refused.content)).toMatch(/maxSessionsPerClient/);
      }
      expect(existsSync(ownTraces) ? readdirSync(ownTraces) : []).toEqual([]);
      const status = (await (await fetch(`${small.url}/status.json`, { headers: bearer(ALICE) })).json()) as {
        runs: { mine: unknown[] };
      };
      expect(status.runs.mine).toEqual([]);
    } finally {
      await alice.close();
    }
  });

  it("a client's run deletes its own oldest traces past harness.maxTraceMiBPerClient, never another client's", async () => {
    // alice's earlier trace, larger than the quota: bob's runs must not count it nor delete it
    writeFileSync(
      join(ownTraces, "t_aliceearlier.jsonl"),
      event({ type: "run_start", owner: "token:alice", task: "y".repeat(4096) }),
    );
    const bob = await connectClient("http", small, bearer(BOB));
    try {
      const run = async () =>
        (await call<{ trace_id: string }>(bob.client, "run_task", { task: "Which river?", policy: "base" })).trace_id;
      const first = await run();
      expect(readdirSync(ownTraces)).toContain(`${first}.jsonl`);
      const second = await run();
      await expect
        .poll(() => readdirSync(ownTraces).sort())
        .toEqual([`${second}.jsonl`, "t_aliceearlier.jsonl"].sort());
    } finally {
      await bob.close();
    }
  });
});

describe("traces", () => {
  it("lists and reads its owner's traces with a first line of any length, and reads a torn trace up to the torn line, reporting it", async () => {
    const alice = await connectClient("http", server, bearer(ALICE));
    const bob = await connectClient("http", server, bearer(BOB));
    try {
      const uris = (await alice.client.listResources()).resources
        .map((r) => r.uri)
        .filter((u) => u.startsWith("weact://traces/"));
      expect(uris.sort()).toEqual(["weact://traces/t_longfirstline", "weact://traces/t_tornlastline1"]);
      const read = async (uri: string) =>
        JSON.parse(((await alice.client.readResource({ uri })).contents[0] as { text: string }).text) as Record<
          string,
          unknown
        >[];
      const long = await read("weact://traces/t_longfirstline");
      expect(long.map((e) => e.type)).toEqual(["run_start", "run_end"]);
      expect(long[0]!.task).toBe(LONG_TASK);
      const torn = await read("weact://traces/t_tornlastline1");
      expect(torn.slice(0, 2)).toEqual([
        { type: "run_start", owner: "token:alice", task: "torn" },
        { type: "turn", n: 1 },
      ]);
      expect(torn[2]).toMatchObject({
        type: "unreadable_line",
        line: 3,
        reason: expect.stringMatching(/last line ends mid-event/),
      });
      expect(torn).toHaveLength(3);
      // still nobody else's
      expect((await bob.client.listResources()).resources.filter((r) => r.uri.startsWith("weact://traces/"))).toEqual(
        [],
      );
      await expect(bob.client.readResource({ uri: "weact://traces/t_longfirstline" })).rejects.toThrow(/no trace/);
    } finally {
      await Promise.all([alice.close(), bob.close()]);
    }
  });
});
