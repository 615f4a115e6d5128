import { Template } from "@huggingface/jinja";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import type { Conversation } from "../../src/engine/index.js";
import { metaString, readGgufHeader } from "../../src/gguf/index.js";
import { LlamaChatCodec } from "../../src/llamaCpp/LlamaChatCodec.js";
import { fetchModel } from "../../src/modelFiles/index.js";
import { PROMPTS_DIR } from "../../src/paths.js";
import { PromptLibrary } from "../../src/prompts/PromptLibrary.js";
import { hfChat } from "../../testkit/hfMessages.js";
import { weactTrajectory } from "../../testkit/weactTrajectory.js";
import { quietLogger } from "../helpers/engine.js";
import { gemma } from "../helpers/gemma.js";

vi.setConfig({ testTimeout: 300_000, hookTimeout: 300_000 });

/** What model.chatTemplate "jinja" renders with: the GGUF's template itself (the engine and the remote codec alike). */
let codec: LlamaChatCodec;
/** node-llama-cpp's Qwen wrapper (model.chatTemplate "auto"). */
let wrapper: LlamaChatCodec;
let template: Template;

beforeAll(async () => {
  const model = await fetchModel("qwen2.5-coder-0.5b-instruct", { logger: quietLogger() });
  codec = await LlamaChatCodec.load({ modelPath: model, logger: quietLogger(), chatTemplate: "jinja" });
  wrapper = await LlamaChatCodec.load({ modelPath: model, logger: quietLogger() });
  template = new Template(metaString(readGgufHeader(model), "tokenizer.chat_template")!);
});
afterAll(async () => {
  await codec?.dispose();
  await wrapper?.dispose();
});

/** The model's own Jinja template (the GGUF's `tokenizer.chat_template`), as `apply_chat_template` renders it. */
const jinja = (conversation: Conversation) =>
  template.render({ ...hfChat(conversation), add_generation_prompt: true, bos_token: "", eos_token: "<|im_end|>" });

/** Where two token lists part, with the text around it, for a failure that says what differs. */
function firstDifference(a: readonly number[], b: readonly number[]): string | undefined {
  const at = a.findIndex((t, i) => t !== b[i]);
  if (at < 0 && a.length === b.length) return undefined;
  const i = at < 0 ? Math.min(a.length, b.length) : at;
  const show = (t: readonly number[]) => JSON.stringify(codec.detokenize(t.slice(Math.max(0, i - 12), i + 12), true));
  return `token ${i} of ${a.length}/${b.length}: engine ${show(a)} vs template ${show(b)}`;
}

describe("Qwen2.5-Coder-0.5B-Instruct: the engine renders a WeAct trajectory as the model's own chat template does", () => {
  const system = PromptLibrary.load(PROMPTS_DIR).render("system") ?? "";

  it("every prefix of a hard run (load, stage text, search call and result, offload with handoff, answer), token for token", () => {
    const full = weactTrajectory(system);
    let checked = 0;
    // each point where the model is asked to write: after the user turn and after every answered call
    for (let n = 2; n <= full.turns.length; n++) {
      const conversation = { ...full, turns: full.turns.slice(0, n) };
      if (conversation.turns.at(-1)!.role === "assistant" && !conversation.turns.at(-1)!.calls?.length) continue;
      const engine = codec.renderTokens(conversation);
      const expected = codec.tokenize(jinja(conversation), true);
      expect(firstDifference(engine, expected), `after ${n} turns`).toBeUndefined();
      checked++;
    }
    expect(checked).toBeGreaterThanOrEqual(8);
  });

  it('node-llama-cpp\'s own Qwen wrapper ("auto") writes tool results as JSON strings and glues a call to the text before it', () => {
    const conversation = weactTrajectory(system);
    const text = wrapper.detokenize(wrapper.renderTokens(conversation), true);
    const result = conversation.turns[2]!.calls![0]!.result!;
    expect(text).toContain(`<tool_response>\n${JSON.stringify(result)}\n</tool_response>`);
    expect(jinja(conversation)).toContain(`<tool_response>\n${result}\n</tool_response>`);
    expect(text).toContain("then write the answer.<tool_call>");
    expect(jinja(conversation)).toContain("then write the answer.\n<tool_call>");
  });

  it("text with quotes, backslashes, newlines and non-ASCII in calls and results renders as the template writes it", () => {
    const whole = weactTrajectory(system, {
      query: 'caf\u00e9 "Le Proc\u00f3pe" \\ 1686',
      result: 'Le Procope \u2014 "the oldest caf\u00e9"\n\tfounded 1686; 12 \u00b0C; \u4e2d\u6587',
    });
    // up to the last offload's answer: where the model is asked to write next
    const conversation = { ...whole, turns: whole.turns.slice(0, -1) };
    expect(
      firstDifference(codec.renderTokens(conversation), codec.tokenize(jinja(conversation), true)),
    ).toBeUndefined();
  });

  it('model.chatTemplate "jinja" on a file without a template is refused, naming the setting that serves it', async () => {
    const { model } = await gemma();
    await expect(
      LlamaChatCodec.load({ modelPath: model, logger: quietLogger(), chatTemplate: "jinja" }),
    ).rejects.toThrow(
      /model\.chatTemplate is "jinja" but the file has no tokenizer\.chat_template: set model\.chatTemplate to "auto"/,
    );
  });
});
