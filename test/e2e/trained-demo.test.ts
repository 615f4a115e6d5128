import { execFile } from "node:child_process";
import { Client as Client2026, StreamableHTTPClientTransport as Transport2026 } from "@modelcontextprotocol/client";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { judge } from "../../src/harness/answer.js";
import { PACKAGE_ROOT } from "../../src/paths.js";
import { trainedLibraryCopy } from "../helpers/files.js";
import { factAsked, SDK_EXAMPLE_ADDRESS, sdkExample } from "../helpers/readme.js";
import { LONG, readTrace, type RunResult } from "../helpers/results.js";
import {
  call,
  connectClient,
  startHttpServer,
  testConfig,
  type Connected,
  type HttpServer,
} from "../helpers/server.js";

/**
 * The shipped trained library with no steering at all: no `steering`, no token bias, no prescribed stage. Every
 * weight action in these tests is a call the model wrote itself. The task is a held-out question (a phrasing
 * training never used) about an entity training never saw.
 */
const TASK = "I would like to learn the country of Wuhan.";

/** The library `npm start` serves (the default config's model.demo and contextSize), over Streamable HTTP as it does. */
let server: HttpServer;
let c: Connected;
beforeAll(async () => {
  server = await startHttpServer(
    [],
    testConfig({
      model: { demo: "trained", contextSize: 8192 },
      adapters: { manifest: trainedLibraryCopy().manifest },
    }),
  );
  c = await connectClient("http", server);
});
afterAll(async () => {
  await c?.close();
  await server?.stop();
});

/** What run_task adds about a run's output. */
interface Degenerate {
  marked: boolean;
  text: string;
  grounded?: boolean;
  degenerate?: { rule: string; detail: string; stage: string; adapter: string; turn: number; turns: number };
}

interface Turn {
  text: string;
  tool_calls: { id: string; name: string; arguments: Record<string, unknown> }[];
}

describe("the trained demo library chooses its own weights", () => {
  it("soft run_task: the model opens and releases every capability itself, plan -> search -> write, and answers", async () => {
    const r = await call<RunResult & { answer?: string }>(c.client, "run_task", { task: TASK, policy: "soft" }, LONG);
    const events = await readTrace(c.client, r.trace_uri);
    const control = events
      .filter((e) => e.type === "adapter_control")
      .map((e) => `${e.action}:${e.author}:${e.active ?? "base"}`);
    expect(control).toEqual([
      "load:model:plan",
      "offload:model:base",
      "load:model:search",
      "offload:model:base",
      "load:model:write",
      "offload:model:base",
    ]);
    const search = events.find((e) => e.type === "tool_call")!;
    expect(search).toMatchObject({ name: "search", adapter: "search", ok: true });
    expect(JSON.stringify(search.arguments)).toContain("Wuhan");
    // the value is read from the search result: no training sample stated any fact about Wuhan
    expect(events.find((e) => e.type === "answer")).toMatchObject({
      finish: "answer",
      marked: true,
      answer: expect.stringContaining("China"),
      grounded: true,
    });
    expect(r).toMatchObject({ finish: "answer", grounded: true });
  });

  it("off-pattern wording: the plan adapter loops, and the run ends degenerate with its junk kept out of the answer", async () => {
    // phrased unlike any training sample; the stage token budget only keeps the loop short (it loops from the start)
    const r = await call<RunResult & Degenerate>(
      c.client,
      "run_task",
      {
        task: "yo whats the deal w/ the place called Wuhan, like what nation is it in??",
        policy: "hard",
        budgets: { tokens: 128, noToolTurns: 1 },
      },
      LONG,
    );
    expect(r.finish).toBe("degenerate");
    expect(r).toMatchObject({
      answer: "",
      marked: false,
      degenerate: { rule: "repetition", stage: "1:plan", adapter: "plan", turn: 1 },
    });
    expect(r.degenerate!.detail).toMatch(/^\d+ % of the turn's \d+ runs of 16 characters repeat one earlier/);
    // what the final stage wrote is still there, as text, not as an answer
    expect(r.text.trim()).not.toBe("");
    const events = await readTrace(c.client, r.trace_uri);
    // the plan's first turn is the loop, whether the budget cut it or the model stopped after repeating itself
    expect(events.find((e) => e.type === "model_call")).toMatchObject({ stage: "1:plan" });
    expect(events.find((e) => e.type === "degenerate")).toMatchObject({ rule: "repetition", stage: "1:plan", turn: 1 });
    expect(events.at(-1)).toMatchObject({ type: "run_end", finish: "degenerate" });
  });

  it("a question outside the corpus: the confident value it writes is marked, and grounded: false", async () => {
    const r = await call<RunResult & Degenerate>(
      c.client,
      "run_task",
      { task: "I would like to learn the country of Atlantis.", policy: "soft" },
      LONG,
    );
    expect(r).toMatchObject({ finish: "answer", marked: true, grounded: false });
    // no search result the run read states the value it gave
    const history = (await readTrace(c.client, r.trace_uri)).find((e) => e.type === "history")!.messages as {
      role: string;
      internal?: boolean;
      content: string;
    }[];
    const results = history.filter((m) => m.role === "tool" && !m.internal);
    expect(results.length).toBeGreaterThan(0);
    expect(r.answer.trim()).not.toBe("");
    const words = (text: string) => text.toLowerCase().split(/[^\p{L}\p{N}]+/u);
    for (const m of results) expect(words(m.content)).not.toContain(r.answer.trim().toLowerCase());
  });

  it("client-driven loop: generate, answer the model's load_lora, generate, answer its offload_lora", async () => {
    const { session_id } = await call<{ session_id: string }>(c.client, "create_session", { task: TASK });
    const generate = () => call<Turn>(c.client, "generate", { session_id, max_tokens: 96 }, LONG);

    const first = await generate();
    expect(first.tool_calls.map((t) => t.name)).toEqual(["load_lora"]);
    const load = first.tool_calls[0]!;
    expect(load.arguments).toEqual({ adapter: "plan" });
    expect(await call(c.client, "load_lora", { session_id, call_id: load.id }, LONG)).toMatchObject({
      active_adapter: "plan",
      call_id: load.id,
    });

    const plan = await generate();
    expect(plan.text).toContain("Wuhan");
    const release = plan.tool_calls.find((t) => t.name === "offload_lora")!;
    expect(String(release.arguments.handoff)).toContain("Wuhan");
    expect(await call(c.client, "offload_lora", { session_id, call_id: release.id }, LONG)).toMatchObject({
      active_adapter: null,
      call_id: release.id,
    });

    // back on the base: its next call opens the next capability
    const next = await generate();
    expect(next.tool_calls.map((t) => [t.name, t.arguments.adapter])).toEqual([["load_lora", "search"]]);
    await call(c.client, "close_session", { session_id });
  });
});

describe("the README's SDK example", () => {
  it("runs as written (only its address changed) and prints the corpus's answer to its question, reporting progress", async () => {
    const { code, task } = sdkExample();
    // the value the corpus states for the question: the demo answers only what its corpus holds
    const fact = factAsked(task);
    expect(code).toContain(SDK_EXAMPLE_ADDRESS);
    // a module evaluated from the package root resolves @modelcontextprotocol/sdk as a project depending on it does
    const { stdout, stderr } = await promisify(execFile)(
      process.execPath,
      ["--input-type=module", "-e", code.replaceAll(SDK_EXAMPLE_ADDRESS, server.url)],
      { cwd: PACKAGE_ROOT, timeout: 60_000 },
    );
    const answer = stdout.trim();
    expect(judge(answer, fact.value), `"${task}" answered "${answer}"; the corpus says "${fact.value}"`).toMatchObject({
      contains: true,
    });
    // its call options asked for progress (onprogress, which resetTimeoutOnProgress needs) and printed it
    expect(stderr).toMatch(/^(waiting for the model|switching weights)/m);
  });
});

/**
 * The README's loop on a 2026-07-28 client (`@modelcontextprotocol/client`): no initialize and no MCP session, so
 * each call after create_session sends back the owner_key it returned. Returns the answer the write stage gave.
 */
async function loop2026(
  url: string,
  task: string,
): Promise<{ answer: string | undefined; version: string | undefined }> {
  const client = new Client2026(
    { name: "my-agent-2026", version: "1.0.0" },
    { versionNegotiation: { mode: { pin: "2026-07-28" } } },
  );
  await client.connect(new Transport2026(new URL(`${url}/mcp`)));
  const call = async (name: string, args: Record<string, unknown>) => {
    const result = await client.callTool({ name, arguments: args }, { timeout: 60_000 });
    if (result.isError) throw new Error(`${name}: ${JSON.stringify(result.content)}`);
    return result.structuredContent as Record<string, unknown>;
  };
  try {
    const { session_id, owner_key } = await call("create_session", { task });
    let answer: string | undefined;
    for (let turns = 0; turns < 20; turns++) {
      const turn = (await call("generate", { session_id, owner_key })) as {
        text: string;
        tool_calls: { id: string; name: string }[];
      };
      answer = /^Answer:\s*(.*)$/m.exec(turn.text)?.[1] ?? answer;
      if (!turn.tool_calls.length) break;
      for (const t of turn.tool_calls) await call(t.name, { session_id, owner_key, call_id: t.id });
    }
    await call("close_session", { session_id, owner_key });
    return { answer, version: client.getNegotiatedProtocolVersion() };
  } finally {
    await client.close();
  }
}

describe("both MCP revisions on one port", () => {
  it("a 2026-07-28 client and a 2025-11-25 client (the README's example) run the loop side by side against one server", async () => {
    const { code, task } = sdkExample();
    const fact = factAsked(task);
    const [modern, legacy] = await Promise.all([
      loop2026(server.url, task),
      promisify(execFile)(
        process.execPath,
        ["--input-type=module", "-e", code.replaceAll(SDK_EXAMPLE_ADDRESS, server.url)],
        {
          cwd: PACKAGE_ROOT,
          timeout: 60_000,
        },
      ),
    ]);
    expect(modern.version).toBe("2026-07-28");
    for (const answer of [modern.answer ?? "", legacy.stdout.trim()])
      expect(
        judge(answer, fact.value),
        `"${task}" answered "${answer}"; the corpus says "${fact.value}"`,
      ).toMatchObject({
        contains: true,
      });
  });
});
