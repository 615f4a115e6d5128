import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import type { Conversation, EngineSession } from "../../src/engine/index.js";
import { LocalEngine } from "../../src/engines/local/index.js";
import { loadManifest } from "../../src/library/manifest.js";
import { fetchModel } from "../../src/modelFiles/index.js";
import { LOAD_LORA, weightFunctions } from "../../src/library/weightActions.js";
import { GEMMA_DIR } from "../../training/gemma/library.js";
import { workedExamplesPrompt } from "../../training/gemma/selfLoadPrompts.js";
import { quietLogger, TEST_THREADS } from "../helpers/engine.js";

vi.setConfig({ testTimeout: 180_000, hookTimeout: 180_000 });

/**
 * Qwen2.5-Coder-0.5B-Instruct, greedy, with the worked examples in its system prompt, writes its first load as the
 * call's JSON alone, without the `<tool_call>` tag its template documents. llama.cpp's hermes parser takes that JSON as
 * a call, and so does the engine (model.chatTemplate "jinja"): the turn comes back as the load, and the history renders
 * it in the template's own syntax.
 */
describe("Qwen2.5-Coder-0.5B-Instruct: a hermes call written as its JSON alone", () => {
  let engine: LocalEngine;
  // one session: the second turn reuses the prompt the first evaluated
  let session: EngineSession;
  beforeAll(async () => {
    engine = await LocalEngine.load({
      modelPath: await fetchModel("qwen2.5-coder-0.5b-instruct", { logger: quietLogger() }),
      gpu: false,
      threads: TEST_THREADS,
      contextSize: 2048,
      chatTemplate: "jinja",
      logger: quietLogger(),
    });
    session = await engine.openSession();
  });
  afterAll(async () => {
    await session?.close();
    await engine?.dispose();
  });

  const library = loadManifest(join(GEMMA_DIR, "manifest.json")).filter((e) => !e.merge);
  const conversation = (task: string): Conversation => ({
    functions: weightFunctions(library),
    turns: [
      { role: "system", text: workedExamplesPrompt(true) },
      { role: "user", text: task },
    ],
  });

  it("writes the load as plain JSON where it may call nothing", async () => {
    const turn = await session.generate(conversation("I would like to learn the first ascent year of K2."), {
      maxTokens: 24,
      callable: [],
    });
    expect(turn.calls).toEqual([]);
    expect(turn.text).toMatch(/^\{"name": "load_lora", "arguments": \{"adapter": "plan"/);
  });

  it("opens the load it wrote, and the history shows it as <tool_call>", async () => {
    const asked = conversation("I would like to learn the first ascent year of K2.");
    const turn = await session.generate(asked, { maxTokens: 48, callable: [LOAD_LORA] });
    expect(turn.calls.map((c) => [c.name, c.arguments])).toEqual([[LOAD_LORA, { adapter: "plan" }]]);
    expect(turn.finishReason).toBe("tool_calls");
    // the same prompt again: node-llama-cpp generated from the tokens the engine rendered (the template's text
    // tokenized as Hugging Face does), so the cache holds all of it but the row groups the last decodes left open
    expect(turn.tokens.cached).toBeGreaterThan(turn.tokens.prompt - 8);
    expect(turn.text).toBe("");
    const answered: Conversation = {
      ...asked,
      turns: [...asked.turns, { role: "assistant", text: turn.text, calls: [{ ...turn.calls[0]!, result: "ok" }] }],
    };
    expect(engine.detokenize(engine.renderTokens(answered), true)).toContain(
      '<tool_call>\n{"name": "load_lora", "arguments": {"adapter": "plan"}}\n</tool_call>',
    );
  });
});
