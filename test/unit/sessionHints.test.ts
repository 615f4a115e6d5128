import { describe, expect, it } from "vitest";
import type { EngineSession, HistorySoFar } from "../../src/engine/index.js";
import { Session } from "../../src/sessions/Session.js";

/**
 * What a session tells its engine ahead of time (the engine's side is checked against the reference in kv-background).
 */
function recordingEngine(active: { adapter: string | null }) {
  const hints: { next: readonly (readonly string[])[]; soFar: HistorySoFar | undefined }[] = [];
  const engine = {
    get activeAdapter() {
      return active.adapter;
    },
    anticipate: (next: readonly (readonly string[])[], soFar?: HistorySoFar) => hints.push({ next, soFar }),
  } as unknown as EngineSession;
  return { engine, hints };
}

const FUNCTIONS = { search: { description: "Search the corpus." }, read: { description: "Read a result." } };

describe("the hints a session gives its engine", () => {
  it("while the model's calls run: its turn with the calls answered so far, the rest awaited", () => {
    const active = { adapter: "search" as string | null };
    const { engine, hints } = recordingEngine(active);
    const session = new Session(
      "s_1",
      "owner",
      "Which river flows through Paris?",
      engine,
      FUNCTIONS,
      ["search", "read"],
      { keepToolResults: 5, weightActions: true },
      "You are a research agent.",
    );
    session.append({
      role: "assistant",
      content: "Looking it up.",
      adapter: "search",
      author: "model",
      toolCalls: [
        { id: "c1", name: "search", arguments: { query: "seine" } },
        { id: "c2", name: "read", arguments: { id_or_url: "seine-1" } },
      ],
    });
    session.append({
      role: "tool",
      callId: "c1",
      name: "search",
      content: "[1] seine-1: The Seine crosses Paris.",
      isError: false,
      internal: false,
    });
    session.anticipateNext(["plan", "search", "write"]);
    const { next, soFar } = hints.at(-1)!;
    expect(next).toEqual([[], ["plan"], ["write"]]);
    expect(soFar!.awaiting).toEqual([{ name: "read", arguments: { id_or_url: "seine-1" } }]);
    const turn = soFar!.conversation.turns.at(-1)!;
    expect(turn).toMatchObject({
      role: "assistant",
      text: "Looking it up.",
      calls: [{ name: "search", result: "[1] seine-1: The Seine crosses Paris." }],
    });
    expect(soFar!.conversation.turns.slice(0, 2).map((t) => t.role)).toEqual(["system", "user"]);
  });

  it("no calls running: no history so far; adapters used before are guessed after the unused ones", () => {
    const active = { adapter: "plan" as string | null };
    const { engine, hints } = recordingEngine(active);
    const session = new Session(
      "s_2",
      "owner",
      "task",
      engine,
      FUNCTIONS,
      ["search"],
      { keepToolResults: 5, weightActions: true },
      "system",
    );
    session.anticipateNext(["plan", "search", "write"]);
    active.adapter = null;
    session.anticipateNext(["plan", "search", "write"]);
    expect(hints.at(-1)).toEqual({ next: [["search"], ["write"], ["plan"]], soFar: undefined });
  });
});
