import { describe, expect, it } from "vitest";
import {
  elidedResults,
  elisionMarker,
  pendingCalls,
  toConversation,
  type HistoryMessage,
  type ToolCallRecord,
} from "../../src/sessions/history.js";

const call = (id: string, name: string): ToolCallRecord => ({ id, name, arguments: { q: id } });
const assistant = (...calls: ToolCallRecord[]): HistoryMessage => ({
  role: "assistant",
  content: "",
  adapter: null,
  author: "model",
  toolCalls: calls,
});
const result = (id: string, name: string, content: string, internal = false): HistoryMessage => ({
  role: "tool",
  callId: id,
  name,
  content,
  isError: false,
  internal,
});

/** system, user, then per i: a call of `name` and its result ("r<i>"); weight actions are internal. */
function history(names: string[]): HistoryMessage[] {
  const h: HistoryMessage[] = [
    { role: "system", content: "sys" },
    { role: "user", content: "task" },
  ];
  names.forEach((name, i) =>
    h.push(assistant(call(`c${i}`, name)), result(`c${i}`, name, `r${i}`, name.endsWith("_lora"))),
  );
  return h;
}
const resultsRead = (h: HistoryMessage[], keep: number) =>
  toConversation(h, {}, keep).turns.flatMap((t) => (t.role === "assistant" ? t.calls.map((c) => c.result) : []));

describe("keep_tool_result", () => {
  it("keeps the last `keep` external results verbatim and replaces older ones with a marker", () => {
    const h = history(["search", "read", "search", "run_code"]);
    expect(resultsRead(h, 2)).toEqual([
      elisionMarker({ name: "search", content: "r0" }, 2),
      elisionMarker({ name: "read", content: "r1" }, 2),
      "r2",
      "r3",
    ]);
    expect(elisionMarker({ name: "search", content: "r0" }, 2)).toBe(
      "[result of search elided (2 characters): only the last 2 tool results are kept]",
    );
    // one elided to make room says so: the model is not told a count that did not apply
    expect(elisionMarker({ name: "search", content: "r0", elided: true }, 2)).toBe(
      "[result of search elided (2 characters): it made room in the context window]",
    );
  });

  it("never elides a weight action's result, and does not count it among the kept", () => {
    const h = history(["search", "load_lora", "read", "offload_lora", "search"]);
    expect(resultsRead(h, 2)).toEqual([elisionMarker({ name: "search", content: "r0" }, 2), "r1", "r2", "r3", "r4"]);
  });

  it("keeps everything when there are at most `keep` results, and elides every external one at keep 0", () => {
    expect(resultsRead(history(["search", "read"]), 2)).toEqual(["r0", "r1"]);
    expect(resultsRead(history(["search", "read"]), 5)).toEqual(["r0", "r1"]);
    expect(resultsRead(history(["search", "load_lora"]), 0)).toEqual([
      elisionMarker({ name: "search", content: "r0" }, 0),
      "r1",
    ]);
    expect(elidedResults(history(["search"]), 1).size).toBe(0);
  });

  it("renders the conversation the model reads: messages in order, calls with their results and raw form", () => {
    const h: HistoryMessage[] = [
      { role: "system", content: "sys" },
      { role: "user", content: "task" },
      {
        role: "assistant",
        content: "thinking",
        adapter: "plan",
        author: "model",
        toolCalls: [{ id: "c1", name: "search", arguments: { q: 1 }, raw: "RAW" }],
      },
      result("c1", "search", "found"),
      {
        role: "assistant",
        content: "done",
        adapter: null,
        author: "model",
        toolCalls: [{ id: "c2", name: "search", arguments: {} }],
      },
      result("c2", "search", "again"),
    ];
    const functions = { search: { description: "d" } };
    expect(toConversation(h, functions, 5)).toStrictEqual({
      turns: [
        { role: "system", text: "sys" },
        { role: "user", text: "task" },
        {
          role: "assistant",
          text: "thinking",
          calls: [{ name: "search", arguments: { q: 1 }, result: "found", raw: "RAW" }],
        },
        { role: "assistant", text: "done", calls: [{ name: "search", arguments: {}, result: "again" }] },
      ],
      functions,
    });
  });
});

describe("pending calls", () => {
  it("are the last assistant message's calls without a result", () => {
    expect(pendingCalls([])).toEqual([]);
    expect(pendingCalls([{ role: "user", content: "x" }])).toEqual([]);
    expect(pendingCalls([assistant(call("z", "search"))])).toEqual([call("z", "search")]);
    expect(pendingCalls([assistant(call("z", "search")), { role: "user", content: "go on" }])).toEqual([
      call("z", "search"),
    ]);
    const h = [
      assistant(call("a", "search")),
      result("a", "search", "r"),
      assistant(call("b", "search"), call("c", "read")),
      result("c", "read", "r"),
    ];
    expect(pendingCalls(h)).toEqual([call("b", "search")]);
    expect(pendingCalls([...h, result("b", "search", "r")])).toEqual([]);
    // results of an earlier turn do not answer the last one's calls
    expect(pendingCalls([result("d", "x", "r"), assistant(call("d", "x"))])).toEqual([call("d", "x")]);
  });
});
