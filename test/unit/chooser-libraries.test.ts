import { describe, expect, it } from "vitest";
import { SeededRandom } from "../../src/demo/random.js";
import type { HistoryMessage } from "../../src/sessions/history.js";
import { drawLibrary, renameHistory, ROLES } from "../../training/qwen/capabilities.js";

/** A recorded soft trajectory's weight actions under the default aliases (plan, then write). */
const recorded: HistoryMessage[] = [
  { role: "user", content: "What is the capital of Japan?" },
  {
    role: "assistant",
    content: "",
    adapter: null,
    author: "model",
    toolCalls: [{ id: "c1", name: "load_lora", arguments: { adapter: "plan" } }],
  },
  {
    role: "tool",
    callId: "c1",
    name: "load_lora",
    content: "Planning capability active.",
    isError: false,
    internal: true,
  },
  {
    role: "assistant",
    content: "Plan: search, then write.",
    adapter: "plan",
    author: "model",
    toolCalls: [{ id: "c2", name: "offload_lora", arguments: { handoff: "Look it up." } }],
  },
  {
    role: "tool",
    callId: "c2",
    name: "offload_lora",
    content: "Planning capability released.",
    isError: false,
    internal: true,
  },
  {
    role: "assistant",
    content: "",
    adapter: null,
    author: "model",
    toolCalls: [{ id: "c3", name: "load_lora", arguments: { adapter: "write" } }],
  },
  { role: "tool", callId: "c3", name: "load_lora", content: "no such adapter", isError: true, internal: true },
];

describe("the chooser's libraries: the base reads descriptions, not names", () => {
  it("held-out libraries use aliases and descriptions no training library shows", () => {
    const seen = { aliases: new Set<string>(), descriptions: new Set<string>() };
    const rng = new SeededRandom(1);
    for (let i = 0; i < 400; i++)
      for (const c of drawLibrary(rng, ["plan", "search", "code", "write"], "training")) {
        seen.aliases.add(c.alias);
        seen.descriptions.add(c.description);
      }
    for (let i = 0; i < 100; i++) {
      const library = drawLibrary(rng, ["plan", "search", "write"], "held-out");
      expect(new Set(library.map((c) => c.alias)).size).toBe(library.length);
      for (const role of ["plan", "search", "write"]) expect(library.some((c) => c.role === role)).toBe(true);
      for (const c of library) {
        expect(seen.aliases.has(c.alias), c.alias).toBe(false);
        expect(seen.descriptions.has(c.description), c.description).toBe(false);
      }
    }
  });

  it("training libraries vary the order and list capabilities the task does not need", () => {
    const rng = new SeededRandom(2);
    const libraries = Array.from({ length: 200 }, () => drawLibrary(rng, ["plan", "search", "write"], "training"));
    const firsts = new Set(libraries.map((l) => l[0]!.role));
    expect(firsts.size).toBeGreaterThanOrEqual(3);
    expect(libraries.some((l) => l.some((c) => !ROLES[c.role]!.recorded))).toBe(true);
    // a quarter are the default library as a server lists it
    const defaults = libraries.filter((l) => l.map((c) => c.alias).join() === "plan,search,write").length;
    expect(defaults).toBeGreaterThan(20);
  });

  it("a history renamed into a library names its aliases and texts, and leaves failed loads and the rest alone", () => {
    const library = drawLibrary(new SeededRandom(3), ["plan", "write"], "held-out");
    const shown = (role: string) => library.find((c) => c.role === role)!;
    const renamed = renameHistory(recorded, library);
    const calls = renamed.flatMap((m) => (m.role === "assistant" ? m.toolCalls : []));
    expect(calls.map((c) => c.arguments)).toEqual([
      { adapter: shown("plan").alias },
      { handoff: "Look it up." },
      { adapter: shown("write").alias },
    ]);
    const results = renamed.filter((m) => m.role === "tool").map((m) => m.content);
    expect(results).toEqual([shown("plan").activation, shown("plan").release, "no such adapter"]);
    expect(renamed[3]).toMatchObject({ adapter: shown("plan").alias, content: "Plan: search, then write." });
    expect(recorded[1]).toMatchObject({ toolCalls: [{ arguments: { adapter: "plan" } }] });
  });
});
