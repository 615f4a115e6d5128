import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import type { Conversation } from "../../src/engine/index.js";
import { LocalEngine } from "../../src/engines/local/index.js";
import { quietLogger, TEST_THREADS } from "../helpers/engine.js";
import { gemma } from "../helpers/gemma.js";

vi.setConfig({ testTimeout: 120_000, hookTimeout: 120_000 });

/**
 * Gemma 3's calls use node-llama-cpp's inline syntax. The engine generates them from `||call:` (inlineCallView), so
 * the call node-llama-cpp hands back is written `||call:search(...)`; what the model reads, in the prompt's function
 * docs and in the history, must stay the documented `||call: search(...)` it was trained on.
 */
describe("Gemma 3 inline calls", () => {
  let engine: LocalEngine;
  beforeAll(async () => {
    engine = await LocalEngine.load({
      modelPath: (await gemma()).model,
      gpu: false,
      threads: TEST_THREADS,
      contextSize: 1024,
      logger: quietLogger(),
    });
  });
  afterAll(() => engine?.dispose());

  const conversation = (raw?: unknown): Conversation => ({
    functions: {
      search: {
        description: "Search the corpus.",
        parameters: { type: "object", properties: { query: { type: "string" } }, required: ["query"] },
      },
    },
    turns: [
      { role: "system", text: "Answer from the corpus." },
      { role: "user", text: "What is the capital of France?" },
      {
        role: "assistant",
        text: "",
        calls: [
          { name: "search", arguments: { query: "capital of France" }, result: "Paris.", ...(raw ? { raw } : {}) },
        ],
      },
    ],
  });

  it("render a generated call as documented, whatever raw form generation gave it", async () => {
    const generated = ["||call:search", { type: "specialTokensText", value: "(" }, '{"query": "capital of France"}'];
    const text = engine.detokenize(engine.renderTokens(conversation(generated)));
    expect(text).toContain('||call: search({"query": "capital of France"})');
    expect(text).toContain('||call: getSomeInfo({"someKey": "someValue"})');
    expect(text).not.toContain("||call:search");
    expect(engine.renderTokens(conversation(generated))).toEqual(engine.renderTokens(conversation()));
  });
});
