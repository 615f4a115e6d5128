import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import OpenAI from "openai";
import type { ChatCompletionMessageParam, ChatCompletionTool } from "openai/resources/chat/completions";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ROW_GROUP } from "../../src/engines/local/localTesting.js";
import { tempDir } from "../helpers/files.js";
import { call, callError, connectClient, startHttpServer, testConfig, type HttpServer } from "../helpers/server.js";
import { apiError } from "../helpers/openaiErrors.js";

const ALICE = "alice-token-0123456789abcdef";
const BOB = "bob-token-0123456789abcdef00";
const dir = tempDir();
const tokenFile = join(dir, "tokens");
writeFileSync(tokenFile, `alice:${ALICE}\nbob:${BOB}\n`);
const traceDir = join(dir, "traces");
/**
 * Two short stages, and a 5 s run limit for the fixed policies: the round trip below waits longer than that on purpose.
 */
const config = testConfig({
  harness: { maxTokensPerTurn: 96, traceDir, workflow: ["plan", "write"], stage: { turns: 1 }, soft: { seconds: 5 } },
  sessions: { maxSlotsPerClient: 1 },
  openai: { continuationSeconds: 60 },
});
const LONG = { timeout: 120_000 };

let server: HttpServer;
let alice: OpenAI;
let bob: OpenAI;
beforeAll(async () => {
  server = await startHttpServer(["--token-file", tokenFile], config);
  alice = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: ALICE, maxRetries: 0 });
  bob = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: BOB, maxRetries: 0 });
});
afterAll(async () => server?.stop());

/** The extension fields this server adds to responses and chunks. */
interface Weact {
  trace_id?: string;
  continued?: boolean;
  continuation_id?: string;
  stages?: string[];
  event?: string;
  stage?: string;
  text?: string;
  action?: string;
}
const weact = (x: unknown) => (x as { weact?: Weact }).weact;
const usageExt = (u: unknown) => (u as { weact: { switches: number; model_turns: number } }).weact;
const status = async (token: string) =>
  (await (await fetch(`${server.url}/status.json`, { headers: { authorization: `Bearer ${token}` } })).json()) as {
    sessions: { mine: { id: string }[] };
    runs: { mine: { trace_id: string; state: string }[] };
    suspended_runs: number;
  };
const traceEvents = (id: string) =>
  readFileSync(join(traceDir, `${id}.jsonl`), "utf8")
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l) as { type: string; [k: string]: unknown });

describe("OpenAI-compatible endpoint, through the official openai client", LONG, () => {
  it("lists the policies as models", async () => {
    const ids = [];
    for await (const m of alice.models.list()) ids.push(m.id);
    expect(ids).toEqual(["weact-soft", "weact-hard", "base", "static", "single:plan", "single:search", "single:write"]);
  });

  it("refuses an unknown model, a result-changing parameter, a malformed request and a missing token, naming the param", async () => {
    const messages: ChatCompletionMessageParam[] = [{ role: "user", content: "hi" }];
    const unknown = await apiError(alice.chat.completions.create({ model: "gpt-4o", messages }));
    expect([unknown.status, unknown.param, unknown.code, unknown.type]).toEqual([
      404,
      "model",
      "model_not_found",
      "invalid_request_error",
    ]);
    const n = await apiError(alice.chat.completions.create({ model: "base", messages, n: 2 }));
    expect([n.status, n.param, n.code]).toEqual([400, "n", "unsupported_parameter"]);
    const bias = await apiError(
      alice.chat.completions.create({ model: "base", messages, logit_bias: { "50256": -100 } }),
    );
    expect([bias.status, bias.param]).toEqual([400, "logit_bias"]);
    const noUser = await apiError(
      alice.chat.completions.create({ model: "base", messages: [{ role: "system", content: "x" }] }),
    );
    expect([noUser.status, noUser.param]).toEqual([400, "messages"]);
    const badRole = await apiError(
      alice.chat.completions.create({ model: "base", messages: [{ role: "user", content: 42 as unknown as string }] }),
    );
    expect([badRole.status, badRole.param]).toEqual([400, "messages[0].content"]);
    const anonymous = await apiError(
      new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "wrong-token-000000000000", maxRetries: 0 }).models.list(),
    );
    expect([anonymous.status, anonymous.type]).toEqual([401, "authentication_error"]);
    // a body that is not JSON at all: an OpenAI error object, no HTML, no stack, no path
    const raw = await fetch(`${server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${ALICE}`, "content-type": "application/json" },
      body: '{"model":',
    });
    const text = await raw.text();
    expect(raw.status).toBe(400);
    expect(JSON.parse(text)).toEqual({
      error: {
        message: "the request body is not valid JSON",
        type: "invalid_request_error",
        param: null,
        code: "invalid_json",
      },
    });
    expect(text).not.toMatch(/<html|\bat .+:\d+:\d+|\/work\/|node_modules/i);
  });

  it("refuses a task or message that cannot fit the window at once, naming the field and model.contextSize, while another client is answered within a second", async () => {
    const mcp = await connectClient("http", server, { authorization: `Bearer ${ALICE}` });
    const other = await connectClient("http", server, { authorization: `Bearer ${BOB}` });
    /** `refused` runs while the other client calls a cheap tool over and over; its slowest answer, in ms. */
    const slowestMeanwhile = async (refused: () => Promise<string>) => {
      let done = false;
      const outcome = refused()
        .catch((err: Error) => err.message)
        .finally(() => (done = true));
      let slowest = 0;
      do {
        const started = performance.now();
        await call(other.client, "list_adapters");
        slowest = Math.max(slowest, performance.now() - started);
      } while (!done);
      return { message: await outcome, slowest };
    };
    const huge = "lorem ipsum dolor sit amet ".repeat(144_000); // 3.9 MB: the body limit (4 MiB) lets it through
    const long = "lorem ipsum dolor sit amet ".repeat(15_000); // 405,000 characters: more tokens than the 4096 window
    try {
      const cases: [string, () => Promise<string>, RegExp][] = [
        [
          "run_task, 3.9 MB",
          () => callError(mcp.client, "run_task", { task: huge, policy: "base" }),
          /^task: 3888000 characters cannot fit/,
        ],
        [
          "create_session, 3.9 MB",
          () => callError(mcp.client, "create_session", { task: huge }),
          /^task: 3888000 characters cannot fit the context window of 4096 tokens \(model\.contextSize\)/,
        ],
        [
          "create_session, 405 KB",
          () => callError(mcp.client, "create_session", { task: "hi", system: long }),
          /^system \(with the other fields\): more tokens than the context window holds \(4096, model\.contextSize\)/,
        ],
        [
          "chat completion, 3.9 MB",
          async () => {
            const err = await apiError(
              alice.chat.completions.create({ model: "base", messages: [{ role: "user", content: huge }] }),
            );
            expect([err.status, err.param, err.code]).toEqual([400, "messages[0].content", "context_length_exceeded"]);
            return err.message;
          },
          /messages\[0\]\.content: 3888000 characters cannot fit .*raise model\.contextSize/,
        ],
      ];
      for (const [what, refused, message] of cases) {
        const { message: got, slowest } = await slowestMeanwhile(refused);
        console.log(
          `${what}: "${got.slice(0, 90)}"; the other client's slowest call meanwhile: ${slowest.toFixed(0)} ms`,
        );
        expect(slowest).toBeLessThan(1_000);
        expect(got).toMatch(message);
      }
      expect(await status(ALICE)).toMatchObject({ sessions: { mine: [] } });
    } finally {
      await Promise.all([mcp.close(), other.close()]);
    }
  });

  it("refuses a client tool whose parameters the engine cannot read with 400 naming the field, not a failed run", async () => {
    const messages: ChatCompletionMessageParam[] = [{ role: "user", content: "hi" }];
    const cases: [Record<string, unknown>, string, RegExp][] = [
      // each used to fail the run (500) once the model's call was parsed against it, or to be read as no schema
      [{ type: "object", properties: { q: { enum: "x" } } }, ".properties.q.enum", /a list of strings/],
      [{ type: "object", properties: { q: { const: { x: 1 } } } }, ".properties.q.const", /a string, number/],
      [{ type: "object", properties: { q: null } }, ".properties.q", /expected object/],
      [{ type: "thing" }, ".type", /one of string, number/],
      [{ type: "string", minLength: 5000 }, ".minLength", /at most 512/],
      [JSON.parse(`${'{"type":"array","items":'.repeat(100)}{}${"}".repeat(100)}`), "", /nested deeper than 64/],
    ];
    for (const [parameters, where, message] of cases) {
      const refused = await apiError(
        alice.chat.completions.create({
          model: "base",
          messages,
          max_tokens: 32,
          tools: [{ type: "function", function: { name: "lookup", parameters } }],
          tool_choice: { type: "function", function: { name: "lookup" } },
        }),
      );
      const param = `tools[0].function.parameters${where}`;
      expect([refused.status, refused.param, refused.type]).toEqual([400, param, "invalid_request_error"]);
      expect(refused.message).toContain(param);
      expect(refused.message).toMatch(message);
    }
  });

  it("non-streaming: runs the hard WeAct loop server-side; the weight actions stay internal", async () => {
    const r = await alice.chat.completions.create({
      model: "weact-hard",
      messages: [{ role: "user", content: "Which river flows through Paris?" }],
      max_tokens: 8,
      seed: 1,
    });
    const choice = r.choices[0]!;
    expect(typeof choice.message.content).toBe("string");
    expect(choice.message.tool_calls).toBeUndefined();
    expect(["stop", "length"]).toContain(choice.finish_reason);
    expect(weact(r)).toMatchObject({ policy: "hard", continued: false, stages: ["plan", "write"] });
    expect(usageExt(r.usage)).toMatchObject({ switches: 4, model_turns: 2 });
    expect(r.usage!.prompt_tokens_details!.cached_tokens).toBeGreaterThan(0);
    expect(r.usage!.completion_tokens).toBeGreaterThan(0);
    const events = traceEvents(weact(r)!.trace_id!);
    expect(events.filter((e) => e.type === "adapter_control").map((e) => `${e.action}:${e.author}`)).toEqual([
      "load:harness",
      "offload:harness",
      "load:harness",
      "offload:harness",
    ]);
    expect(events.find((e) => e.type === "run_start")).toMatchObject({
      owner: "token:alice",
      task: "Which river flows through Paris?",
    });
  });

  it("streaming: the final stage's tokens as content chunks; stages and switches only in the weact field; usage with cached tokens", async () => {
    const stream = await alice.chat.completions.create({
      model: "weact-hard",
      messages: [{ role: "user", content: "Which river flows through Paris?" }],
      max_tokens: 8,
      seed: 1,
      stream: true,
      stream_options: { include_usage: true },
    });
    let content = "";
    const events: string[] = [];
    const stageText: Record<string, string> = {};
    let finish: string | null = null;
    let usage: OpenAI.CompletionUsage | undefined;
    let chunks = 0;
    for await (const chunk of stream) {
      chunks++;
      const ext = weact(chunk);
      const delta = chunk.choices[0]?.delta;
      if (delta?.content) content += delta.content;
      if (ext?.text) {
        expect(delta?.content ?? "").toBe(""); // other stages' text never reaches the content
        stageText[ext.stage!] = (stageText[ext.stage!] ?? "") + ext.text;
      }
      if (ext?.event) events.push(`${ext.event}:${ext.stage}${ext.action ? `:${ext.action}` : ""}`);
      finish = chunk.choices[0]?.finish_reason ?? finish;
      if (chunk.usage) usage = chunk.usage;
    }
    console.log(
      `streaming test: ${chunks} chunks; content ${JSON.stringify(content)}; finish_reason ${finish}; events ${events.join(" ")}; other stages' text ${JSON.stringify(stageText)}; usage ${JSON.stringify(usage)}`,
    );
    expect(events.filter((e) => e.startsWith("switch"))).toEqual([
      "switch:1:plan:load",
      "switch:1:plan:offload",
      "switch:2:write:load",
      "switch:2:write:offload",
    ]);
    expect(events.filter((e) => e.startsWith("stage_start"))).toEqual(["stage_start:1:plan", "stage_start:2:write"]);
    expect(Object.keys(stageText).every((s) => s !== "2:write")).toBe(true);
    expect(content.length).toBeGreaterThan(0);
    expect(["stop", "length"]).toContain(finish);
    expect(usage!.prompt_tokens_details!.cached_tokens).toBeGreaterThan(0);
    expect(usageExt(usage)).toMatchObject({ switches: 4, model_turns: 2 });
  });

  it("a client that disconnects mid-stream cancels the run: its slot is freed and its trace ends cancelled", async () => {
    const controller = new AbortController();
    const stream = await alice.chat.completions.create(
      {
        model: "weact-hard",
        messages: [{ role: "user", content: "Which river flows through Paris?" }],
        max_tokens: 8,
        stream: true,
      },
      { signal: controller.signal },
    );
    let traceId: string | undefined;
    // the client ends its iteration (or throws its abort error) once the signal fires
    await (async () => {
      for await (const chunk of stream) {
        traceId ??= weact(chunk)?.trace_id;
        if (weact(chunk)?.event === "stage_start") controller.abort();
      }
    })().catch((err: Error) => expect(err.name).toMatch(/Abort/));
    expect(controller.signal.aborted).toBe(true);
    expect(traceId).toBeTruthy();
    let s = await status(ALICE);
    for (
      let i = 0;
      i < 100 && (s.sessions.mine.length > 0 || s.runs.mine.find((r) => r.trace_id === traceId)?.state === "running");
      i++
    ) {
      await new Promise((r) => setTimeout(r, 100));
      s = await status(ALICE);
    }
    expect(s.sessions.mine).toEqual([]);
    expect(s.runs.mine.find((r) => r.trace_id === traceId)?.state).toBe("cancelled");
    expect(traceEvents(traceId!).at(-1)).toMatchObject({ type: "run_end", cancelled: true });
  });

  it("client tools: tool_calls with a continuation bound to the identity; the continuation reuses the session and cache, its wait not counted", async () => {
    const tools: ChatCompletionTool[] = [
      {
        type: "function",
        function: {
          name: "get_weather",
          description: "Current weather of a city",
          parameters: {
            type: "object",
            properties: { city: { type: "string", enum: ["Paris", "Rome"] } },
            required: ["city"],
          },
        },
      },
    ];
    const messages: ChatCompletionMessageParam[] = [
      { role: "system", content: "Answer briefly." },
      { role: "user", content: "What is the weather in Paris?" },
    ];
    const first = await alice.chat.completions.create({
      model: "base",
      messages,
      tools,
      tool_choice: { type: "function", function: { name: "get_weather" } },
      max_tokens: 200,
      seed: 1,
    });
    const call = first.choices[0]!.message.tool_calls?.[0];
    expect(first.choices[0]!.finish_reason).toBe("tool_calls");
    expect(call?.type === "function" && call.function.name).toBe("get_weather");
    if (call?.type !== "function") throw new Error("no function call");
    expect(JSON.parse(call.function.arguments)).toHaveProperty("city");
    const ext = weact(first)!;
    expect(ext.continuation_id).toMatch(/^[A-Za-z0-9_-]{24}$/);
    expect(call.id).toContain(ext.continuation_id);
    expect((await status(ALICE)).suspended_runs).toBe(1);

    // the suspended run holds Alice's one slot (sessions.maxSlotsPerClient = 1): her next run is refused, naming it
    const refused = await apiError(
      alice.chat.completions.create({ model: "base", messages: [{ role: "user", content: "another" }], max_tokens: 4 }),
    );
    expect(refused.status).toBe(429);
    expect(refused.message).toMatch(/sessions\.maxSlotsPerClient/);

    const followUp: ChatCompletionMessageParam[] = [
      ...messages,
      { role: "assistant", content: first.choices[0]!.message.content, tool_calls: [call] },
      { role: "tool", tool_call_id: call.id, content: "Sunny, 21 C" },
    ];
    // Bob presents Alice's continuation: a fresh run of his own, Alice's run keeps waiting
    const stranger = await bob.chat.completions.create({ model: "base", messages: followUp, max_tokens: 8 });
    expect(weact(stranger)).toMatchObject({ continued: false });
    expect(weact(stranger)!.trace_id).not.toBe(ext.trace_id);
    expect((await status(ALICE)).suspended_runs).toBe(1);

    // waiting longer than the run's 5 s limit: that time is the client's and does not end the run
    await new Promise((r) => setTimeout(r, 5_500));
    const done = await alice.chat.completions.create({ model: "base", messages: followUp, tools, max_tokens: 200 });
    expect(weact(done)).toMatchObject({ continued: true, trace_id: ext.trace_id });
    expect(usageExt(done.usage).model_turns).toBeGreaterThanOrEqual(1);
    // the continuation evaluated only what was appended: the session's cache covered the first request's prompt, less
    // its last token, which generation's first step decoded alone, and less the rows outside its decode's last group
    // of four (model.batchInvariant keeps only tokens computed in whole row groups: DecodeLog.ROW_GROUP)
    expect(done.usage!.prompt_tokens_details!.cached_tokens).toBeGreaterThanOrEqual(
      first.usage!.prompt_tokens - 1 - (ROW_GROUP - 1),
    );
    const events = traceEvents(ext.trace_id!);
    expect(events.filter((e) => e.type === "client_wait")).toHaveLength(1);
    expect(events.find((e) => e.type === "client_resume")!.ms).toBeGreaterThan(5_000);
    expect(events.some((e) => e.type === "guard" && e.rule === "termination")).toBe(false);
    const history = events.find((e) => e.type === "history")!.messages as {
      role: string;
      name?: string;
      content: string;
    }[];
    expect(history.find((m) => m.role === "tool" && m.name === "get_weather")?.content).toBe("Sunny, 21 C");
    expect((await status(ALICE)).suspended_runs).toBe(0);
  });
});
