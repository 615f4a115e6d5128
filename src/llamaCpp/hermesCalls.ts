import { JinjaTemplateChatWrapper, LlamaText, type JinjaTemplateChatWrapperOptions } from "node-llama-cpp";

/** How a hermes template (Qwen2.5's) opens a call, as node-llama-cpp extracts it from the template. */
const HERMES_CALL_PREFIX = '<tool_call>\n{"name": "';
/** The call's JSON alone, without the `<tool_call>` tag before it. */
const BARE_CALL_PREFIX = '{"name": "';

/**
 * The GGUF's Jinja template (model.chatTemplate "jinja"), where a hermes call may also open with its JSON alone:
 * small hermes models (Qwen2.5-Coder-0.5B) write `{"name": "load_lora", "arguments": ...}` without the `<tool_call>`
 * tag, and llama.cpp's own hermes parser takes that JSON as a call too (`common_chat_params_init_hermes_2_pro`).
 * From the trigger on, node-llama-cpp's function grammar holds the name to the offered functions, as llama.cpp's
 * lazy grammar does once it has triggered. The call renders in the template's own syntax afterwards.
 */
export class JinjaChatWrapper extends JinjaTemplateChatWrapper {
  declare readonly settings: JinjaTemplateChatWrapper["settings"];

  constructor(options: JinjaTemplateChatWrapperOptions) {
    super(options);
    const call = this.settings.functions.call;
    if (LlamaText(call.prefix).toString() !== HERMES_CALL_PREFIX) return;
    this.settings = {
      ...this.settings,
      functions: {
        ...this.settings.functions,
        call: { ...call, prefixAlternateMatches: [...(call.prefixAlternateMatches ?? []), BARE_CALL_PREFIX] },
      },
    };
  }
}
