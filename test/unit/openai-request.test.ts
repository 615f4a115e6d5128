import { describe, expect, it } from "vitest";
import { Continuations } from "../../src/openai/continuations.js";
import { mapConversation } from "../../src/openai/conversation.js";
import { SteeredCallError } from "../../src/engine/index.js";
import { OpenAIError, toOpenAIError } from "../../src/openai/errors.js";
import { parseChatRequest, type ChatMessage } from "../../src/openai/request.js";

/**
 * The request and continuation rules alone (the endpoint itself is tested through the openai client in openai.test.ts).
 */
const refusal = (body: Record<string, unknown>) => {
  try {
    parseChatRequest({ model: "base", messages: [{ role: "user", content: "hi" }], ...body });
  } catch (err) {
    if (err instanceof OpenAIError) return { status: err.status, param: err.param, code: err.code };
    throw err;
  }
  return undefined;
};

describe("chat request parsing", () => {
  it("accepts neutral values of unsupported parameters and refuses the rest by name", () => {
    expect(
      refusal({
        n: 1,
        top_p: 1,
        presence_penalty: 0,
        frequency_penalty: 0,
        logprobs: false,
        store: false,
        stream_options: { include_usage: true },
      }),
    ).toBeUndefined();
    expect(refusal({ top_p: 0.5 })).toEqual({ status: 400, param: "top_p", code: "unsupported_parameter" });
    expect(refusal({ response_format: { type: "json_object" } })).toMatchObject({ param: "response_format" });
    expect(refusal({ frobnicate: true })).toEqual({ status: 400, param: "frobnicate", code: "unknown_parameter" });
    expect(refusal({ temperature: 3 })).toMatchObject({ param: "temperature" });
    expect(refusal({ stop: ["a", "b", "c", "d", "e"] })).toMatchObject({ param: "stop" });
    expect(refusal({ tools: [{ type: "function", function: { name: "bad name" } }] })).toMatchObject({
      param: "tools[0].function.name",
    });
  });

  it("names the fix of a forced call too long for its turn: the request's limit, the server's, or the window", () => {
    const steered = (limit: "max_tokens" | "context") =>
      new SteeredCallError("too long", { call: "lookup", needed: 80, available: 60, limit });
    const mapped = (err: SteeredCallError, requested?: number) => {
      const e = toOpenAIError(err, false, {
        requested: requested === undefined ? undefined : { param: "max_tokens", tokens: requested },
        maxTokensPerTurn: 96,
      });
      return { status: e.status, param: e.param, code: e.code, message: e.message };
    };
    expect(mapped(steered("max_tokens"), 60)).toMatchObject({
      status: 400,
      param: "max_tokens",
      code: "max_tokens_too_small",
      message: expect.stringMatching(/lookup.*raise max_tokens to 80 or more$/),
    });
    // a continuation keeps its run's budget: its own max_tokens is not the fix
    expect(mapped(steered("max_tokens"))).toMatchObject({ param: "tool_choice", code: "call_does_not_fit" });
    expect(mapped(steered("max_tokens"), 200).message).toMatch(/harness\.maxTokensPerTurn \(96\)/);
    expect(mapped(steered("context"), 200)).toMatchObject({ param: "messages", code: "context_length_exceeded" });
    expect(mapped(new SteeredCallError("no function is callable"))).toMatchObject({
      status: 400,
      param: "tool_choice",
    });
  });

  it("maps messages: the last user message is the task, system texts join the server's prompt, tool results keep their call's name", () => {
    const messages: ChatMessage[] = [
      { role: "system", content: "Be brief." },
      { role: "user", content: "first" },
      {
        role: "assistant",
        content: null,
        tool_calls: [{ id: "c1", type: "function", function: { name: "lookup", arguments: '{"q":"x"}' } }],
      },
      { role: "tool", tool_call_id: "c1", content: "found" },
      { role: "user", content: [{ type: "text", text: "the task" }] },
      { role: "assistant", content: "partial" },
    ];
    const m = mapConversation(messages, "SERVER");
    expect(m.task).toBe("the task");
    expect(m.system).toBe("SERVER\n\nBe brief.");
    expect(m.before.map((x) => x.role)).toEqual(["user", "assistant", "tool"]);
    expect(m.before[2]).toMatchObject({ role: "tool", name: "lookup", callId: "c1", internal: false });
    expect(m.after).toMatchObject([{ role: "assistant", content: "partial", author: "client" }]);
    expect(() =>
      mapConversation(
        [
          { role: "tool", tool_call_id: "nope", content: "x" },
          { role: "user", content: "t" },
        ],
        "S",
      ),
    ).toThrow(/tool_call_id/);
    expect(() =>
      mapConversation(
        [
          { role: "user", content: "t" },
          {
            role: "assistant",
            content: null,
            tool_calls: [{ id: "c9", type: "function", function: { name: "f", arguments: "{}" } }],
          },
        ],
        "S",
      ),
    ).toThrow(/messages\[1\]\.tool_calls: c9 has no tool message/);
    expect(() =>
      mapConversation(
        [
          {
            role: "assistant",
            content: "x",
            tool_calls: [{ id: "c", type: "function", function: { name: "f", arguments: "{" } }],
          },
          { role: "tool", tool_call_id: "c", content: "r" },
          { role: "user", content: "t" },
        ],
        "S",
      ),
    ).toThrow(/arguments: not valid JSON/);
  });
});

describe("continuations", () => {
  const request: ChatMessage[] = [{ role: "user", content: "weather?" }];
  const suspend = (store: Continuations<string>, identity: string | undefined) => {
    const resumed: string[] = [];
    let expired = false;
    const { id, message } = store.suspend(
      identity,
      [{ id: "call_internal", name: "get_weather", arguments: { city: "Paris" } }],
      request,
      null,
      {
        resume: (_r, next) => resumed.push(next),
        expire: () => (expired = true),
      },
    );
    const answer: ChatMessage = { role: "tool", tool_call_id: message.tool_calls![0]!.id, content: "sunny" };
    return { id, message, answer, resumed, expired: () => expired };
  };

  it("continues only for the same identity, the exact returned prefix and one result per call", () => {
    const store = new Continuations<string>(60_000);
    const s = suspend(store, "token:alice");
    expect(store.take("token:bob", [...request, s.message, s.answer])).toBeUndefined();
    expect(store.take("token:alice", [{ role: "user", content: "weather!" }, s.message, s.answer])).toBeUndefined();
    expect(store.take("token:alice", [...request, s.message])).toBeUndefined();
    expect(
      store.take("token:alice", [...request, s.message, s.answer, { role: "user", content: "more" }]),
    ).toBeUndefined();
    // the client may send the assistant message back with content "" instead of null
    const taken = store.take("token:alice", [...request, { ...s.message, content: "" }, s.answer]);
    expect(taken?.results).toEqual([{ callId: "call_internal", content: "sunny" }]);
    expect(store.size).toBe(0);
    expect(store.take("token:alice", [...request, s.message, s.answer])).toBeUndefined(); // used once
    store.closeAll();
  });

  it("expires: the run is told, the id no longer continues", async () => {
    const store = new Continuations<string>(50);
    const s = suspend(store, undefined);
    await new Promise((r) => setTimeout(r, 120));
    expect(s.expired()).toBe(true);
    expect(store.take(undefined, [...request, s.message, s.answer])).toBeUndefined();
  });
});
