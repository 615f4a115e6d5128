import { cpSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_CORPUS, PACKAGE_ROOT } from "../../src/paths.js";
import { resolveConfig } from "../../src/config/loadConfig.js";
import { createLogger } from "../../src/log.js";
import { detectIsolation } from "../../src/externalTools/runCode/index.js";
import { Toolbox } from "../../src/externalTools/Toolbox.js";
import { KNOWN_QUERIES } from "../../testkit/knownQueries.js";
import { tempDir } from "../helpers/files.js";
import { jailTestable } from "../helpers/host.js";
import { spawnHttpServer, type SpawnedHttpServer } from "../../testkit/mcpClient.js";
import {
  call,
  callError,
  connectClient,
  startHttpServer,
  testConfig,
  type Connected,
  type HttpServer,
} from "../helpers/server.js";

interface Hit {
  id: string;
  title: string;
  snippet: string;
  score: number;
  url?: string;
}
interface Read {
  id: string;
  title: string;
  text: string;
  source: string;
  truncated: boolean;
  chars: number;
}

/** The random demo model rarely ends a string argument on its own; a bias on the quote token makes it. */
const CLOSE_STRINGS = { '"': 8 };
const ARTICLE = readFileSync(join(PACKAGE_ROOT, "test", "fixtures", "article.html"), "utf8");

/** A stand-in for a self-hosted SearXNG and for web pages, on 127.0.0.1, speaking SearXNG's real JSON format. */
function fakeWeb(): Promise<{ url: string; server: Server; hits: Record<string, number> }> {
  const hits: Record<string, number> = {};
  const server = createServer((req, res) => {
    const url = new URL(req.url!, "http://x");
    const q = url.searchParams.get("q") ?? "";
    hits[q] = (hits[q] ?? 0) + 1;
    if (url.pathname === "/search") {
      if (url.searchParams.get("format") !== "json") return res.writeHead(403).end("format not allowed");
      if (q === "boom") return res.writeHead(500).end("internal error");
      if (q === "slow") return void setTimeout(() => res.writeHead(200).end("{}"), 5_000);
      if (q === "flaky" && hits[q] === 1) return res.writeHead(502).end("bad gateway");
      res.writeHead(200, { "content-type": "application/json" });
      // SearXNG answers with every result it merged, whatever the caller wants: the backend keeps the top_k
      if (q === "many rivers")
        return res.end(
          JSON.stringify({
            query: q,
            number_of_results: 7,
            results: Array.from({ length: 7 }, (_, i) => ({
              url: `https://example.org/river-${i + 1}`,
              title: `River ${i + 1}`,
              content: `River number ${i + 1}.`,
              engine: "duckduckgo",
              engines: ["duckduckgo"],
              positions: [i + 1],
              score: 7 - i,
              category: "general",
            })),
          }),
        );
      return res.end(
        JSON.stringify({
          query: q,
          number_of_results: 2,
          results: [
            {
              url: "https://example.org/seine",
              title: "Seine - Example",
              content: "The Seine flows through Paris.",
              engine: "duckduckgo",
              engines: ["duckduckgo"],
              positions: [1],
              score: 2.5,
              category: "general",
            },
            {
              url: "https://example.org/rhine",
              title: "Rhine - Example",
              content: "The Rhine rises in the Alps.",
              engine: "wikipedia",
              engines: ["wikipedia"],
              positions: [2],
              score: 1.25,
              category: "general",
            },
          ],
          answers: [],
          corrections: [],
          infoboxes: [],
          suggestions: [],
          unresponsive_engines: [],
        }),
      );
    }
    if (url.pathname === "/article")
      return res.writeHead(200, { "content-type": "text/html; charset=utf-8" }).end(ARTICLE);
    if (url.pathname === "/long")
      return res
        .writeHead(200, { "content-type": "text/html" })
        .end(
          `<html><head><title>Long page</title></head><body>${"<p>The river keeps flowing past the old mill.</p>".repeat(60)}</body></html>`,
        );
    if (url.pathname === "/huge") return res.writeHead(200, { "content-type": "text/plain" }).end("x".repeat(300_000));
    if (url.pathname === "/binary")
      return res.writeHead(200, { "content-type": "application/octet-stream" }).end(Buffer.alloc(64));
    if (url.pathname === "/to-file") return res.writeHead(302, { location: "file:///etc/passwd" }).end();
    res.writeHead(404).end();
  });
  return new Promise((resolve) =>
    server.listen(0, "127.0.0.1", () =>
      resolve({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server, hits }),
    ),
  );
}

const corpus = join(tempDir(), "corpus");
let local: Connected;
let web: { url: string; server: Server; hits: Record<string, number> };
let webServer: HttpServer;
let webClient: Connected;

beforeAll(async () => {
  cpSync(DEFAULT_CORPUS, corpus, { recursive: true });
  cpSync(join(PACKAGE_ROOT, "test", "fixtures", "article.html"), join(corpus, "article.html"));
  web = await fakeWeb();
  const localConfig = testConfig({ tools: { search: { corpus, indexFile: join(tempDir(), "index.json") } } });
  const webConfig = testConfig({
    tools: {
      search: { backend: "searxng", searxng: { url: web.url }, timeoutMs: 800, retries: 1 },
      read: { allowPrivateAddresses: true, maxBytes: 100_000, maxChars: 500 },
    },
  });
  [local, webServer] = await Promise.all([
    connectClient("stdio", undefined, {}, localConfig),
    startHttpServer([], webConfig),
  ]);
  webClient = await connectClient("http", webServer);
});
afterAll(async () => {
  await local?.close();
  await webClient?.close();
  await webServer?.stop();
  web?.server.close();
});

const search = (c: Connected, query: string, extra: Record<string, unknown> = {}) =>
  call<{ backend: string; results: Hit[] }>(c.client, "search", { query, ...extra });

describe("search over the embedded index", () => {
  it("finds the expected document of the shipped corpus for known queries", async () => {
    for (const [query, id] of KNOWN_QUERIES) {
      const { backend, results } = await search(local, query);
      expect(backend).toBe("local");
      expect(results[0]?.id, query).toBe(id);
      expect(results[0]!.score).toBeGreaterThan(0);
    }
    const { results } = await search(local, "river", { top_k: 3 });
    expect(results).toHaveLength(3);
    expect(results[0]!.snippet.toLowerCase()).toContain("river");
  });

  it("re-indexes incrementally when files are added, changed and removed", async () => {
    const until = async (query: string, predicate: (hits: Hit[]) => boolean) => {
      for (let i = 0; i < 40; i++) {
        const { results } = await search(local, query);
        if (predicate(results)) return results;
        await new Promise((r) => setTimeout(r, 100));
      }
      throw new Error(`index never caught up for "${query}"`);
    };
    writeFileSync(
      join(corpus, "zorblax.md"),
      "# Zorblax\n\nZorblax is a fictional mineral found only in test corpora.",
    );
    expect((await until("zorblax", (h) => h.length > 0))[0]!.id).toBe("zorblax.md");
    writeFileSync(join(corpus, "zorblax.md"), "# Quuxite\n\nQuuxite replaced the earlier entry entirely.");
    await until("quuxite", (h) => h[0]?.id === "zorblax.md");
    expect((await search(local, "zorblax fictional mineral")).results.map((h) => h.id)).not.toContain("zorblax.md");
    rmSync(join(corpus, "zorblax.md"));
    await until("quuxite", (h) => h.length === 0);
  });
});

describe("read", () => {
  it("reads a corpus document by id, and an HTML fixture as clean text", async () => {
    const doc = await call<Read>(local.client, "read", { id_or_url: "computing/gguf.md" });
    expect(doc).toMatchObject({ title: "GGUF", source: "corpus", truncated: false });
    expect(doc.text).toContain("magic bytes");
    const html = await call<Read>(local.client, "read", { id_or_url: "article.html" });
    expect(html.title).toBe("The Pont Neuf");
    expect(html.text).toContain("oldest standing bridge across the Seine");
    for (const noise of ["window.tracking", "color:red", "Site header", "Copyright notice", "<b>"])
      expect(html.text).not.toContain(noise);
  });

  it("refuses other schemes, loopback and private addresses, and names the reason", async () => {
    expect(await callError(local.client, "read", { id_or_url: "file:///etc/passwd" })).toMatch(
      /only http and https URLs are read, not file:/,
    );
    expect(await callError(local.client, "read", { id_or_url: "ftp://example.org/x" })).toMatch(/not ftp:/);
    expect(await callError(local.client, "read", { id_or_url: `${web.url}/article` })).toMatch(
      /127\.0\.0\.1 is a private or loopback address/,
    );
    expect(await callError(local.client, "read", { id_or_url: "http://localhost:1/x" })).toMatch(
      /localhost resolves to .* private or loopback/,
    );
    expect(await callError(local.client, "read", { id_or_url: "http://169.254.169.254/latest/meta-data" })).toMatch(
      /private or loopback/,
    );
    // IPv6 spellings of loopback and link-local IPv4 addresses (compatible, mapped, NAT64, 6to4)
    for (const url of [
      "http://[::127.0.0.1]/",
      "http://[::ffff:7f00:1]/",
      "http://[64:ff9b::7f00:1]/",
      "http://[2002:a9fe:a9fe::]/",
    ]) {
      expect(await callError(local.client, "read", { id_or_url: url })).toMatch(/is a private or loopback address/);
    }
    expect(await callError(local.client, "read", { id_or_url: "not a url or id" })).toMatch(
      /neither a document id nor a URL/,
    );
  });

  it("fetches web pages when allowed, truncates long text, and refuses oversized or binary bodies and scheme-changing redirects", async () => {
    const page = await call<Read>(webClient.client, "read", { id_or_url: `${web.url}/article` });
    expect(page).toMatchObject({ title: "The Pont Neuf", source: "web" });
    expect(page.text).toContain("twelve arches");
    // a page longer than maxChars (500) is cut there, with a marker saying how long it was
    const long = await call<Read>(webClient.client, "read", { id_or_url: `${web.url}/long` });
    expect(long).toMatchObject({ title: "Long page", truncated: true });
    expect(long.chars).toBeGreaterThan(2_000);
    const marker = `\n[... truncated at 500 of ${long.chars} characters ...]`;
    expect(long.text.endsWith(marker)).toBe(true);
    expect(long.text.slice(0, -marker.length)).toHaveLength(500);
    expect(long.text.startsWith("The river keeps flowing")).toBe(true);
    expect(page).toMatchObject({ truncated: false });
    expect(page.text.length).toBe(page.chars);
    expect(await callError(webClient.client, "read", { id_or_url: `${web.url}/huge` })).toMatch(
      /exceeds the 100000-byte limit|over the 100000-byte limit/,
    );
    expect(await callError(webClient.client, "read", { id_or_url: `${web.url}/binary` })).toMatch(
      /application\/octet-stream, not a text document/,
    );
    expect(await callError(webClient.client, "read", { id_or_url: `${web.url}/to-file` })).toMatch(/not file:/);
  });
});

describe("SearXNG backend against a local server speaking its JSON format", () => {
  it("returns its ranked results", async () => {
    const { backend, results } = await search(webClient, "paris river");
    expect(backend).toBe("searxng");
    expect(results).toEqual([
      {
        id: "https://example.org/seine",
        url: "https://example.org/seine",
        title: "Seine - Example",
        snippet: "The Seine flows through Paris.",
        score: 2.5,
      },
      {
        id: "https://example.org/rhine",
        url: "https://example.org/rhine",
        title: "Rhine - Example",
        snippet: "The Rhine rises in the Alps.",
        score: 1.25,
      },
    ]);
  });

  it("returns exactly top_k results when it has more, and all of them when it has fewer", async () => {
    const urls = async (query: string, topK: number) =>
      (await search(webClient, query, { top_k: topK })).results.map((r) => r.url);
    expect(await urls("many rivers", 3)).toEqual([1, 2, 3].map((i) => `https://example.org/river-${i}`));
    expect(await urls("many rivers", 1)).toEqual(["https://example.org/river-1"]);
    expect(await urls("many rivers", 7)).toHaveLength(7);
    expect(await urls("paris river", 5)).toEqual(["https://example.org/seine", "https://example.org/rhine"]);
  });

  it("retries a failed answer with backoff, and reports 500s and timeouts clearly after the retries", async () => {
    expect((await search(webClient, "flaky")).results).toHaveLength(2);
    expect(web.hits.flaky).toBe(2);
    expect(await callError(webClient.client, "search", { query: "boom" })).toMatch(
      /search backend searxng is unavailable: HTTP 500 .* after 2 attempts/,
    );
    expect(web.hits.boom).toBe(2);
    expect(await callError(webClient.client, "search", { query: "slow" })).toMatch(
      /search backend searxng is unavailable: no answer within 800 ms .* after 2 attempts/,
    );
  });
});

/**
 * A stand-in for the Brave Search API on 127.0.0.1, speaking its web search format; it wants the key "brave-test-key".
 */
function fakeBrave(): Promise<{
  url: string;
  server: Server;
  requests: { q: string; count: string; token: string | undefined }[];
}> {
  const requests: { q: string; count: string; token: string | undefined }[] = [];
  const server = createServer((req, res) => {
    const url = new URL(req.url!, "http://x");
    const q = url.searchParams.get("q") ?? "";
    requests.push({
      q,
      count: url.searchParams.get("count") ?? "",
      token: req.headers["x-subscription-token"] as string | undefined,
    });
    if (url.pathname !== "/res/v1/web/search") return res.writeHead(404).end();
    if (req.headers["x-subscription-token"] !== "brave-test-key")
      return res
        .writeHead(401, { "content-type": "application/json" })
        .end('{"type":"ErrorResponse","error":{"code":"SUBSCRIPTION_TOKEN_INVALID"}}');
    if (q === "rate limited" && requests.filter((r) => r.q === q).length === 1) return res.writeHead(429).end();
    if (q === "not brave")
      return res.writeHead(200, { "content-type": "application/json" }).end('{"web":{"results":"nope"}}');
    const results = [
      {
        title: "Seine - Wikipedia",
        url: "https://en.wikipedia.org/wiki/Seine",
        description: "The <strong>Seine</strong> flows through <strong>Paris</strong>.",
        is_source_local: false,
        language: "en",
        profile: { name: "Wikipedia" },
      },
      {
        title: "Paris rivers",
        url: "https://example.org/paris",
        description: "Rivers of Paris.",
        is_source_local: false,
        language: "en",
      },
      { title: "Third", url: "https://example.org/third", description: "Third hit.", language: "en" },
    ];
    res.writeHead(200, { "content-type": "application/json" }).end(
      JSON.stringify({
        type: "search",
        query: { original: q },
        mixed: { type: "mixed", main: [] },
        web: { type: "search", results },
      }),
    );
  });
  return new Promise((resolve) =>
    server.listen(0, "127.0.0.1", () =>
      resolve({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server, requests }),
    ),
  );
}

describe("Brave backend against a local server speaking its web search format (tools.search.brave.url)", () => {
  let brave: Awaited<ReturnType<typeof fakeBrave>>;
  let server: SpawnedHttpServer;
  let client: Connected;
  const config = () =>
    testConfig({
      tools: {
        search: {
          backend: "brave",
          brave: { url: brave.url, apiKeyEnv: "WEACT_TEST_BRAVE_KEY" },
          timeoutMs: 2000,
          retries: 1,
        },
      },
    });
  beforeAll(async () => {
    brave = await fakeBrave();
    server = await spawnHttpServer(["--config", config()], { WEACT_TEST_BRAVE_KEY: "brave-test-key" });
    client = await connectClient("http", server);
  });
  afterAll(async () => {
    await client?.close();
    await server?.stop();
    brave?.server.close();
  });

  it("sends the key from the configured environment variable and returns the ranked results, markup removed", async () => {
    const { backend, results } = await search(client, "paris river", { top_k: 2 });
    expect(backend).toBe("brave");
    expect(results).toEqual([
      {
        id: "https://en.wikipedia.org/wiki/Seine",
        url: "https://en.wikipedia.org/wiki/Seine",
        title: "Seine - Wikipedia",
        snippet: "The Seine flows through Paris.",
        score: 1,
      },
      {
        id: "https://example.org/paris",
        url: "https://example.org/paris",
        title: "Paris rivers",
        snippet: "Rivers of Paris.",
        score: 0.5,
      },
    ]);
    expect(brave.requests.at(-1)).toEqual({ q: "paris river", count: "2", token: "brave-test-key" });
  });

  it("retries a 429, and names the backend when an answer is not in its format", async () => {
    expect((await search(client, "rate limited")).results).toHaveLength(3);
    expect(brave.requests.filter((r) => r.q === "rate limited")).toHaveLength(2);
    expect(await callError(client.client, "search", { query: "not brave" })).toMatch(
      /search backend brave is unavailable: its answer is not the Brave web search format/,
    );
  });

  it("refuses to start without the key, naming the variable and the config key", async () => {
    // the check the server makes at start-up, run in-process: a spawned server would load the model first
    const { tools } = resolveConfig(
      { tools: { search: { backend: "brave", brave: { url: brave.url, apiKeyEnv: "WEACT_TEST_BRAVE_KEY_UNSET" } } } },
      "test",
      tempDir(),
    );
    await expect(Toolbox.create(tools, createLogger("silent"))).rejects.toThrow(
      /environment variable WEACT_TEST_BRAVE_KEY_UNSET \(tools\.search\.brave\.apiKeyEnv\) holds no API key/,
    );
  });
});

describe("external tools in sessions", () => {
  it("records prescribed and model-called tool exchanges in the history", async () => {
    const { session_id } = await call<{ session_id: string; tools: string[] }>(local.client, "create_session", {
      task: "Which river flows through Paris?",
    });
    const prescribed = await call<{ call_id: string; results: Hit[] }>(local.client, "search", {
      query: "Seine navigable Rouen",
      session_id,
    });
    expect(prescribed.call_id).toMatch(/^call_/);
    const turn = await call<{ tool_calls: { id: string; name: string; arguments: { query: string } }[] }>(
      local.client,
      "generate",
      {
        session_id,
        max_tokens: 200,
        tool_call: { name: "search" },
        seed: 2,
        token_bias: CLOSE_STRINGS,
      },
    );
    expect(turn.tool_calls.map((c) => c.name)).toEqual(["search"]);
    const query = turn.tool_calls[0]!.arguments.query;
    expect(typeof query).toBe("string");
    await call(local.client, "search", { query: query || "?", session_id, call_id: turn.tool_calls[0]!.id });
    const { history } = await call<{ history: { role: string; name?: string; author?: string; content: string }[] }>(
      local.client,
      "get_session",
      { session_id },
    );
    const tools = history.filter((m) => m.role === "tool");
    expect(tools.map((m) => m.name)).toEqual(["search", "search"]);
    expect(tools[0]!.content).toMatch(/^1\. \[geography\/seine\.md\] Seine/);
    expect(history.filter((m) => m.role === "assistant").map((m) => m.author)).toEqual(["client", "model"]);
    expect(
      (await call<{ tokens: { generated: number } }>(local.client, "generate", { session_id, max_tokens: 2 })).tokens
        .generated,
    ).toBeGreaterThan(0);
  });

  it("offers a session only the tools it was created with", async () => {
    const { session_id, tools } = await call<{ session_id: string; tools: string[] }>(local.client, "create_session", {
      task: "no search here",
      tools: ["read"],
    });
    expect(tools).toEqual(["read"]);
    expect(await callError(local.client, "search", { query: "Seine", session_id })).toMatch(
      /search is not enabled in this session \(its tools: read\)/,
    );
    // the grammar does not let the model call it either: steered towards search, the model calls what it may
    const turn = await call<{ tool_calls: { name: string }[] }>(local.client, "generate", {
      session_id,
      max_tokens: 200,
      tool_call: { name: "search" },
      seed: 4,
      token_bias: CLOSE_STRINGS,
    });
    expect(turn.tool_calls.length).toBeGreaterThan(0);
    for (const c of turn.tool_calls) expect(["load_lora", "read"]).toContain(c.name);
    expect(await callError(local.client, "create_session", { task: "x", tools: ["teleport"] })).toMatch(
      /unknown external tool\(s\) teleport; available: search, read, run_code/,
    );
  });

  it("keeps only the last keep_tool_result (5) results verbatim in what the model reads", async () => {
    const { session_id } = await call<{ session_id: string }>(local.client, "create_session", {
      task: "many searches",
    });
    for (let i = 0; i < 7; i++) await call(local.client, "search", { query: `river ${i}`, session_id });
    const { history } = await call<{ history: { role: string; content: string }[] }>(local.client, "get_session", {
      session_id,
    });
    const results = history.filter((m) => m.role === "tool").map((m) => m.content);
    expect(results).toHaveLength(7);
    expect(
      results
        .slice(0, 2)
        .every((c) =>
          /^\[result of search elided \(\d+ characters\): only the last 5 tool results are kept\]$/.test(c),
        ),
    ).toBe(true);
    expect(results.slice(2).every((c) => c.startsWith("1. ["))).toBe(true);
  });
});

interface Ran {
  stdout: string;
  stderr: string;
  exit_code: number | null;
  signal: string | null;
  duration_ms: number;
  timed_out: boolean;
  truncated: { stdout: boolean; stderr: boolean };
  isolation: string;
  call_id?: string;
}

describe("run_code through MCP", () => {
  const run = (args: Record<string, unknown>) => call<Ran>(local.client, "run_code", args);

  it("runs python and javascript, reports syntax errors, timeouts, memory hogs and huge output", async () => {
    const detected = await detectIsolation();
    const py = await run({
      language: "python",
      code: "import sys; print(sum(range(10))); print(sys.stdin.read().upper())",
      stdin: "piped",
    });
    expect(py).toMatchObject({ stdout: "45\nPIPED\n", exit_code: 0, timed_out: false, isolation: detected.level });
    expect((await run({ language: "javascript", code: "console.log([1,2,3].map(x => x * 2).join(','))" })).stdout).toBe(
      "2,4,6\n",
    );
    const bad = await run({ language: "python", code: "def broken(:\n  pass" });
    expect(bad.exit_code).not.toBe(0);
    expect(bad.stderr).toMatch(/SyntaxError/);
    const loop = await run({ language: "python", code: "while True: pass", timeout_s: 1 });
    expect(loop.timed_out).toBe(true);
    expect(loop.duration_ms).toBeLessThan(4_000);
    const hog = await run({
      language: "python",
      code: "x = bytearray(8 * 1024**3)\nprint('allocated')",
      timeout_s: 10,
    });
    expect(hog.exit_code).not.toBe(0);
    expect(hog.stdout).not.toContain("allocated");
    expect(hog.stderr).toMatch(/MemoryError/);
    const flood = await run({ language: "javascript", code: "process.stdout.write('y'.repeat(1_000_000))" });
    expect(flood.truncated.stdout).toBe(true);
    expect(flood.stdout).toMatch(/\[\.\.\. output truncated at 65536 bytes \.\.\.\]$/);
  });

  it("contains file reads outside the workdir and the network exactly as the detected isolation level promises", async () => {
    const detected = await detectIsolation();
    // decided apart from the detection under test: with bwrap on PATH only the jail is acceptable (in CI it must be)
    if (jailTestable()) expect(detected.level).toBe("bubblewrap");
    const secret = join(tempDir(), "secret.txt");
    writeFileSync(secret, "top secret");
    const read = await run({ language: "python", code: `print(open(${JSON.stringify(secret)}).read())` });
    const net = await run({
      language: "python",
      code: "import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=2)\nprint('connected')",
      timeout_s: 5,
    });
    expect(read.isolation).toBe(detected.level);
    if (detected.enforces.filesystem) {
      expect(read.exit_code).not.toBe(0);
      expect(read.stdout).not.toContain("top secret");
    } else {
      expect(read.stdout).toContain("top secret"); // the rlimits level says it does not prevent this
    }
    if (detected.enforces.network) {
      expect(net.exit_code).not.toBe(0);
      expect(net.stdout).not.toContain("connected");
    }
  });

  it("records a run in the session's history", async () => {
    const { session_id } = await call<{ session_id: string }>(local.client, "create_session", { task: "compute" });
    const r = await run({ language: "python", code: "print(6*7)", session_id });
    expect(r.call_id).toMatch(/^call_/);
    const { history } = await call<{ history: { role: string; name?: string; content: string }[] }>(
      local.client,
      "get_session",
      { session_id },
    );
    expect(history.at(-1)).toMatchObject({ role: "tool", name: "run_code", content: "exit code 0\nstdout:\n42\n" });
  });
});
