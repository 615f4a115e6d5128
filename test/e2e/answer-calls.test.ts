import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { call, callError, connectClient, testConfig, type Connected } from "../helpers/server.js";

/** Every pending call can be answered, and steering yields a call of the named tool within max_tokens. */
let c: Connected;
const LONG = { timeout: 300_000 };

beforeAll(async () => {
  c = await connectClient("stdio", undefined, {}, testConfig({ model: { contextSize: 4096 } }));
});
afterAll(async () => c?.close());

interface Turn {
  tool_calls: { id: string; name: string; arguments: Record<string, unknown> }[];
  finish_reason: string;
  tokens: { generated: number };
}

async function steeredCall(tool: string, adapter: string | null, maxTokens = 96) {
  const { session_id } = await call<{ session_id: string }>(c.client, "create_session", {
    task: "Which river flows through Paris?",
  });
  if (adapter) await call(c.client, "load_lora", { session_id, adapter });
  const turn = await call<Turn>(
    c.client,
    "generate",
    { session_id, tool_call: { name: tool }, max_tokens: maxTokens, seed: 1 },
    LONG,
  );
  return { session_id, turn };
}

/** The tool results of the history as the model reads them in its next prompt (keep_tool_result applied). */
async function promptText(session_id: string): Promise<string> {
  const { history } = await call<{ history: { role: string; content: string }[] }>(c.client, "get_session", {
    session_id,
  });
  return history
    .filter((m) => m.role === "tool")
    .map((m) => m.content)
    .join("\n");
}

describe("steering", () => {
  it.each([
    ["search", "search"],
    ["offload_lora", "write"],
    ["load_lora", null],
  ] as const)(
    "tool_call {name: %s} under %s yields a parsed call of it, with no token_bias, within max_tokens",
    async (tool, adapter) => {
      const { session_id, turn } = await steeredCall(tool, adapter);
      expect(turn.finish_reason).toBe("tool_calls");
      expect(turn.tool_calls.map((t) => t.name)).toEqual([tool]);
      expect(turn.tokens.generated).toBeLessThanOrEqual(96);
      await call(c.client, "close_session", { session_id });
    },
  );

  it("a steered call max_tokens cannot hold is refused with the tokens it needs; nothing is generated or recorded", async () => {
    const { session_id } = await call<{ session_id: string }>(c.client, "create_session", {
      task: "Which river flows through Paris?",
    });
    const before = await call<{ history: unknown[] }>(c.client, "get_session", { session_id });
    expect(
      await callError(c.client, "generate", { session_id, tool_call: { name: "load_lora" }, max_tokens: 24 }),
    ).toMatch(/steered call of load_lora may take \d+ tokens .* the turn has 24: raise max_tokens to \d+ or more/);
    expect((await call<{ history: unknown[] }>(c.client, "get_session", { session_id })).history).toEqual(
      before.history,
    );
    await call(c.client, "close_session", { session_id });
  });
});

describe("answering calls", () => {
  it("a call answered with arguments the tool rejects records the validation error as its result; the model reads it and the session goes on", async () => {
    const { session_id, turn } = await steeredCall("search", "search");
    const callId = turn.tool_calls[0]!.id;
    expect(await callError(c.client, "search", { session_id, call_id: callId, query: "" })).toMatch(
      /search refused: invalid arguments .*query: .*recorded as the result of call/,
    );
    // answered: a second answer finds no pending call
    expect(await callError(c.client, "search", { session_id, call_id: callId, query: "seine" })).toMatch(
      /is not an unanswered call/,
    );
    const { history, pending_calls } = await call<{
      history: { role: string; call_id?: string; content: string; is_error?: boolean }[];
      pending_calls: unknown[];
    }>(c.client, "get_session", { session_id });
    expect(pending_calls).toEqual([]);
    const result = history.find((m) => m.role === "tool" && m.call_id === callId)!;
    expect(result).toMatchObject({ is_error: true });
    expect(result.content).toMatch(/query: Too small/);
    // the model reads the error in its next prompt, and the session generates again: a second stuck call
    // (top_k beyond the tool's maximum) is answered the same way
    const prompt = await promptText(session_id);
    expect(prompt).toContain(result.content);
    const next = await call<Turn>(
      c.client,
      "generate",
      { session_id, tool_call: { name: "search" }, max_tokens: 96, seed: 2 },
      LONG,
    );
    const second = next.tool_calls[0]!.id;
    expect(await callError(c.client, "search", { session_id, call_id: second, top_k: 10_000 })).toMatch(
      /top_k: .*recorded as the result of call/,
    );
    expect(await promptText(session_id)).toMatch(/top_k: Too big/);
    expect(
      (await call<Turn>(c.client, "generate", { session_id, max_tokens: 4 }, LONG)).tokens.generated,
    ).toBeGreaterThan(0);
    await call(c.client, "close_session", { session_id });
  });

  it("answer_call answers any pending call with the client's own error; generate is refused until then, and works after; a weight action's answer stays in what the model reads", async () => {
    const { session_id, turn } = await steeredCall("offload_lora", "plan");
    const callId = turn.tool_calls[0]!.id;
    expect(await callError(c.client, "generate", { session_id })).toMatch(
      /unanswered calls: offload_lora .*answer_call/,
    );
    const answered = await call<{ call_id: string; name: string }>(c.client, "answer_call", {
      session_id,
      call_id: callId,
      error: "not now: keep planning",
    });
    expect(answered).toMatchObject({ call_id: callId, name: "offload_lora" });
    const { history, active_adapter } = await call<{
      history: { role: string; call_id?: string; content: string; is_error?: boolean }[];
      active_adapter: string | null;
    }>(c.client, "get_session", { session_id });
    expect(history.find((m) => m.role === "tool" && m.call_id === callId)).toMatchObject({
      content: "not now: keep planning",
      is_error: true,
    });
    expect(active_adapter).toBe("plan");
    expect(await callError(c.client, "answer_call", { session_id, call_id: callId, error: "again" })).toMatch(
      /is not an unanswered call/,
    );
    const next = await call<Turn>(c.client, "generate", { session_id, max_tokens: 4 }, LONG);
    expect(next.tokens.generated).toBeGreaterThan(0);
    // the answer is the weight action's result, not an external tool's: keep_tool_result (5) never elides it
    for (let i = 0; i < 6; i++) await call(c.client, "search", { session_id, query: `seine ${i}` });
    const { history: read } = await call<{ history: { role: string; call_id?: string; content: string }[] }>(
      c.client,
      "get_session",
      { session_id },
    );
    expect(read.find((m) => m.role === "tool" && m.call_id === callId)).toMatchObject({
      content: "not now: keep planning",
      internal: true,
    });
    expect(read.filter((m) => m.role === "tool" && /^\[result of search elided/.test(m.content))).toHaveLength(1);
    await call(c.client, "close_session", { session_id });
  });
});

describe("generate: progress and cancellation", () => {
  it("reports progress while decoding; a cancelled generate leaves the history unchanged and the session usable", async () => {
    const { session_id } = await call<{ session_id: string }>(c.client, "create_session", {
      task: "Which river flows through Paris?",
    });
    const seen: { progress: number; message?: string }[] = [];
    const done = await c.client.callTool({ name: "generate", arguments: { session_id, max_tokens: 64 } }, undefined, {
      timeout: 300_000,
      onprogress: (p) => void seen.push(p),
    });
    expect(done.isError).toBeFalsy();
    expect(seen.some((p) => /tokens generated/.test(p.message ?? ""))).toBe(true);
    expect(seen.map((p) => p.progress)).toEqual([...seen.map((p) => p.progress)].sort((a, b) => a - b));

    const before = await call<{ history: unknown[] }>(c.client, "get_session", { session_id });
    const controller = new AbortController();
    const cancelled = c.client.callTool({ name: "generate", arguments: { session_id, max_tokens: 2000 } }, undefined, {
      timeout: 300_000,
      signal: controller.signal,
      onprogress: (p) => {
        if (/tokens generated/.test(p.message ?? "")) controller.abort();
      },
    });
    await expect(cancelled).rejects.toThrow();
    // the server sees the cancellation, stops decoding and records nothing
    let after = await call<{ history: unknown[] }>(c.client, "get_session", { session_id });
    for (let i = 0; i < 50 && JSON.stringify(after.history) !== JSON.stringify(before.history); i++) {
      await new Promise((r) => setTimeout(r, 100));
      after = await call<{ history: unknown[] }>(c.client, "get_session", { session_id });
    }
    expect(after.history).toEqual(before.history);
    const next = await call<Turn>(c.client, "generate", { session_id, max_tokens: 4 }, LONG);
    expect(next.tokens.generated).toBeGreaterThan(0);
    expect((await call<{ history: unknown[] }>(c.client, "get_session", { session_id })).history).toHaveLength(
      before.history.length + 1,
    );
    await call(c.client, "close_session", { session_id });
  });
});

describe("the static policy", () => {
  it("runs every adapter applied together for the whole run: no weight actions, every turn under plan+search+write", async () => {
    const r = await call<{ trace_uri: string; stages: string[]; finish: string; switches: number }>(
      c.client,
      "run_task",
      { task: "Which river flows through Paris?", policy: "static", seed: 1, soft: { turns: 2 } },
      LONG,
    );
    expect(r.stages).toEqual(["static"]);
    expect(r.switches).toBe(0);
    // the random demo weights under three adapters at once may also repeat themselves until the guard ends the run
    expect(["answer", "budget", "degenerate"]).toContain(r.finish);
    const events = JSON.parse(
      ((await c.client.readResource({ uri: r.trace_uri })).contents[0] as { text: string }).text,
    ) as { type: string; [k: string]: unknown }[];
    expect(events.find((e) => e.type === "run_start")).toMatchObject({ fixedAdapters: ["plan", "search", "write"] });
    const turns = events.filter((e) => e.type === "model_call");
    expect(turns.length).toBeGreaterThan(0);
    for (const t of turns) expect(t.adapter).toBe("plan+search+write");
    expect(events.filter((e) => e.type === "adapter_control")).toEqual([]);
    const history = events.find((e) => e.type === "history")!.messages as { role: string; name?: string }[];
    expect(history.filter((m) => m.role === "tool" && (m.name === "load_lora" || m.name === "offload_lora"))).toEqual(
      [],
    );
  });
});
