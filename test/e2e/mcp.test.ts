import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { LocalEngine } from "../../src/engines/local/index.js";
import { demoEngine } from "../helpers/engine.js";
import type { Generated, SessionState } from "../helpers/results.js";
import {
  call,
  callError,
  connectClient,
  startHttpServer,
  testConfig,
  type Connected,
  type HttpServer,
  type TransportKind,
} from "../helpers/server.js";
import { referenceNextTokenLogProbs } from "../../src/engines/local/localTesting.js";

let http: HttpServer;
let reference: LocalEngine;

// these compare a turn's log-probs with a fresh context evaluating the prompt in one decode: work ahead of time and
// shared prefixes split decodes differently (exact only against a replay of that split, which the kv-* tests check)
const config = testConfig({ cache: { background: false, sharedPrefixes: false } });

beforeAll(async () => {
  [http, reference] = await Promise.all([startHttpServer([], config), demoEngine()]);
});
afterAll(async () => {
  await http?.stop();
  await reference?.dispose();
});

const newSession = async (client: Connected["client"], task = "Which river flows through Paris?") =>
  (await call<{ session_id: string }>(client, "create_session", { task })).session_id;
const state = (client: Connected["client"], id: string, extra: Record<string, unknown> = {}) =>
  call<SessionState>(client, "get_session", { session_id: id, ...extra });
/** A model turn steered into a load_lora call whose adapter the model's own logits choose. */
const modelLoadCall = (client: Connected["client"], id: string) =>
  call<Generated>(client, "generate", { session_id: id, max_tokens: 120, tool_call: { name: "load_lora" }, seed: 1 });

describe.each<TransportKind>(["stdio", "http", "sse"])("MCP over %s", (kind) => {
  let a: Connected;
  let b: Connected;

  beforeAll(async () => {
    a = await connectClient(kind, http, {}, config);
    b = await connectClient(kind, http, {}, config);
  });
  afterAll(async () => {
    await a?.close();
    await b?.close();
  });

  it("offers the weight actions with the library's aliases as an enum, described by capability", async () => {
    const { tools } = await a.client.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual(
      expect.arrayContaining([
        "close_session",
        "create_session",
        "generate",
        "get_session",
        "list_adapters",
        "load_lora",
        "offload_lora",
        "read",
        "search",
      ]),
    );
    const load = tools.find((t) => t.name === "load_lora")!;
    const adapter = (load.inputSchema.properties as Record<string, { enum?: string[]; description?: string }>).adapter!;
    expect(adapter.enum).toEqual(["plan", "search", "write"]);
    expect(adapter.description).toMatch(/search: Evidence search/);
    expect(load.outputSchema).toBeDefined();
    const listing = await call<{ adapters: { alias: string; sha256: string; rank: number; resident: boolean }[] }>(
      a.client,
      "list_adapters",
    );
    expect(listing.adapters.map((x) => [x.alias, x.rank, x.resident])).toEqual([
      ["plan", 4, true],
      ["search", 8, true],
      ["write", 4, true],
    ]);
    expect(listing.adapters[0]!.sha256).toMatch(/^[0-9a-f]{64}$/);
  });

  it("runs the client-driven loop: generate -> load_lora -> generate (under the new weights) -> offload_lora -> generate", async () => {
    const id = await newSession(a.client);
    const first = await modelLoadCall(a.client, id);
    expect(first.finish_reason).toBe("tool_calls");
    expect(first.adapter).toBeNull();
    const [loadCall] = first.tool_calls;
    expect(loadCall!.name).toBe("load_lora");
    const chosen = loadCall!.arguments.adapter as string;
    expect(["plan", "search", "write"]).toContain(chosen);
    await expect(call(a.client, "generate", { session_id: id })).rejects.toThrow(
      /unanswered calls: load_lora \(call_id/,
    );

    const loaded = await call<{
      active_adapter: string;
      call_id: string;
      switch: { rebuilt_tokens: number; rebuild_ms: number };
    }>(a.client, "load_lora", { session_id: id, call_id: loadCall!.id });
    expect(loaded.active_adapter).toBe(chosen);
    expect(loaded.call_id).toBe(loadCall!.id);

    // the session really runs under the new weights: its log-probs equal a fresh context with that adapter
    const { prompt_tokens } = await state(a.client, id, { include_prompt_tokens: true });
    // evaluated, or kept (a shared prompt prefix, work done ahead while the client was busy): the whole prompt but its
    // last token
    expect(loaded.switch.rebuilt_tokens + loaded.switch.reused_tokens).toBe(prompt_tokens!.length - 1);
    const second = await call<Generated>(a.client, "generate", { session_id: id, max_tokens: 3, top_logprobs: 2 });
    expect(second.adapter).toBe(chosen);
    expect(second.tokens.cached).toBe(prompt_tokens!.length - 1);
    const want = await referenceNextTokenLogProbs(reference, chosen, prompt_tokens!);
    const got = second.logprobs![0]!;
    expect(Math.abs(got.logprob - want.get(got.token)!)).toBeLessThanOrEqual(1e-4);
    const base = await referenceNextTokenLogProbs(reference, null, prompt_tokens!);
    expect(Math.abs(got.logprob - base.get(got.token)!)).toBeGreaterThan(1e-3);

    const released = await call<{
      active_adapter: string | null;
      previous_adapter: string;
      switch: { cache_strategy: string; rebuilt_tokens: number; reused_tokens: number };
    }>(a.client, "offload_lora", {
      session_id: id,
      handoff: "river found",
    });
    expect(released).toMatchObject({ active_adapter: null, previous_adapter: chosen });
    // the default cache strategy: the base's lane kept its cache, so the return evaluates only what the base has not
    // seen
    expect(released.switch.cache_strategy).toBe("reuse");
    expect(released.switch.reused_tokens).toBeGreaterThan(100);
    expect(released.switch.rebuilt_tokens).toBeLessThan(released.switch.reused_tokens);
    const third = await call<Generated>(a.client, "generate", { session_id: id, max_tokens: 3 });
    expect(third.adapter).toBeNull();

    const { history, kv_lanes } = await state(a.client, id);
    expect(kv_lanes.filter((l) => l.active).map((l) => [l.weights, l.state])).toEqual([["base", "live"]]);
    expect(kv_lanes.find((l) => l.weights === chosen)).toMatchObject({ active: false, state: "live" });
    // any other lane was started ahead of time, for an adapter the base may load next
    for (const l of kv_lanes) expect(["base", "plan", "search", "write"]).toContain(l.weights);
    const exchanges = history.filter((m) => m.role === "tool").map((m) => [m.name, m.is_error]);
    expect(exchanges).toEqual([
      ["load_lora", false],
      ["offload_lora", false],
    ]);
    const prescribed = history.find((m) => m.role === "assistant" && m.tool_calls?.[0]?.name === "offload_lora");
    expect(prescribed).toMatchObject({ author: "client" });
    await call(a.client, "close_session", { session_id: id });
  });

  it("records an invalid switch answering a model call as that call's error result; the next generate works", async () => {
    const id = await newSession(a.client);
    const turn = await modelLoadCall(a.client, id);
    const err = await callError(a.client, "offload_lora", { session_id: id, call_id: turn.tool_calls[0]!.id });
    expect(err).toMatch(/offload_lora refused: call .* is a load_lora call/);
    expect(err).toMatch(/recorded as the result of call/);
    const after = await state(a.client, id);
    expect(after.active_adapter).toBeNull();
    expect(after.pending_calls).toEqual([]);
    expect(after.history.at(-1)).toMatchObject({ role: "tool", name: "load_lora", is_error: true });
    const next = await call<Generated>(a.client, "generate", { session_id: id, max_tokens: 2 });
    expect(next.tokens.generated).toBeGreaterThan(0);
  });

  it("refuses bad requests with clear errors and leaves the session unchanged", async () => {
    const id = await newSession(a.client);
    await call(a.client, "load_lora", { session_id: id, adapter: "plan" });
    const before = await state(a.client, id);
    const cases: [string, Record<string, unknown>, RegExp][] = [
      [
        "load_lora",
        { session_id: id, adapter: "search" },
        /load_lora refused: adapter "plan" is active; offload it first/,
      ],
      // the adapter enum is the library: an unknown alias is refused by the schema, naming the field and the choices
      [
        "load_lora",
        { session_id: id, adapter: "nonexistent" },
        /Invalid arguments for tool load_lora: Invalid option: expected one of "plan"\|"search"\|"write" at adapter/,
      ],
      ["offload_lora", { session_id: id, adapter: "write" }, /"write" is not the active adapter; "plan" is/],
      [
        "load_lora",
        { session_id: id, adapter: "plan", call_id: "call_nope" },
        /call_id "call_nope" is not an unanswered call/,
      ],
      ["generate", { session_id: "s_unknown" }, /no session "s_unknown" for this client/],
      ["generate", { session_id: id, max_tokens: -5 }, /max_tokens/],
      ["generate", { session_id: id, temperature: "hot" }, /temperature/],
      ["create_session", { task: "" }, /task/],
      ["get_session", {}, /session_id/],
    ];
    for (const [tool, args, message] of cases) expect(await callError(a.client, tool, args)).toMatch(message);
    const after = await state(a.client, id);
    const { kv_lanes: lanesBefore, ...rest } = before;
    expect(after).toEqual({ ...rest, kv_lanes: expect.any(Array), last_active_at: expect.any(String) });
    // the active cache is untouched; idle ones may have been caught up in the background meanwhile
    expect(after.kv_lanes.find((l) => l.active)).toEqual(lanesBefore.find((l) => l.active));
    const released = await call<{ active_adapter: null }>(a.client, "offload_lora", { session_id: id });
    expect(released.active_adapter).toBeNull();
    expect(await callError(a.client, "offload_lora", { session_id: id })).toMatch(
      /offload_lora refused: no adapter is active/,
    );
  });

  it("keeps each client's sessions to itself, and two clients switching at once do not interfere", async () => {
    const mine = await newSession(a.client, "client A's task");
    const err = await callError(b.client, "get_session", { session_id: mine });
    expect(err).toMatch(/no session .* for this client/);
    const theirs = await newSession(b.client, "client B's task");
    const run = async (client: Connected["client"], id: string, alias: string) => {
      await call(client, "load_lora", { session_id: id, adapter: alias });
      const { prompt_tokens } = await state(client, id, { include_prompt_tokens: true });
      const r = await call<Generated>(client, "generate", { session_id: id, max_tokens: 2, top_logprobs: 1 });
      return { r, prompt: prompt_tokens!, alias };
    };
    const results = await Promise.all([run(a.client, mine, "plan"), run(b.client, theirs, "write")]);
    for (const { r, prompt, alias } of results) {
      expect(r.adapter).toBe(alias);
      // each session's first token has exactly the log-prob its own adapter gives over its own prompt
      const want = await referenceNextTokenLogProbs(reference, alias, prompt);
      expect(Math.abs(r.logprobs![0]!.logprob - want.get(r.logprobs![0]!.token)!)).toBeLessThanOrEqual(1e-4);
    }
    expect((await state(a.client, mine)).history[1]!.content).toBe("client A's task");
    expect((await state(b.client, theirs)).history[1]!.content).toBe("client B's task");
    await call(b.client, "close_session", { session_id: theirs });
    expect(await callError(a.client, "close_session", { session_id: theirs })).toMatch(/no session/);
  });

  it("serves the prompts and the adapter, cache and session resources", async () => {
    const { prompts } = await a.client.listPrompts();
    expect(prompts.map((p) => p.name)).toEqual(
      expect.arrayContaining(["system", "weact-soft", "weact-hard", "stage-plan", "stage-search", "stage-write"]),
    );
    const soft = await a.client.getPrompt({ name: "weact-soft", arguments: { task: "Find the tallest tower" } });
    expect((soft.messages[0]!.content as { text: string }).text).toContain("Task: Find the tallest tower");
    const adapters = await a.client.readResource({ uri: "weact://adapters" });
    expect(JSON.parse((adapters.contents[0] as { text: string }).text).adapters).toHaveLength(3);
    const id = await newSession(a.client);
    const listed = await a.client.listResources();
    expect(listed.resources.map((r) => r.uri)).toContain(`weact://sessions/${id}`);
    const other = await b.client.listResources();
    expect(other.resources.map((r) => r.uri)).not.toContain(`weact://sessions/${id}`);
    const read = await a.client.readResource({ uri: `weact://sessions/${id}` });
    expect(JSON.parse((read.contents[0] as { text: string }).text).session_id).toBe(id);
    const cache = JSON.parse(
      ((await a.client.readResource({ uri: "weact://cache" })).contents[0] as { text: string }).text,
    );
    expect(cache).toMatchObject({
      strategy: "reuse",
      evictions: { spilled: expect.any(Number), dropped: expect.any(Number) },
    });
    expect(cache.sequences).toBeGreaterThanOrEqual(1);
  });
});
