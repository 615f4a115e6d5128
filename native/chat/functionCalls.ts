import { JinjaTemplateChatWrapper, type ChatWrapper } from "node-llama-cpp";

export interface FunctionCallSupport {
  /** The model's calls are parsed with its own template's syntax. */
  supported: boolean;
  /** The text a call starts with (what the grammar and the steering force). */
  callPrefix: string;
  reason?: string;
}

/**
 * Whether the chat wrapper node-llama-cpp resolved parses function calls in the model's own syntax. Its
 * generic Jinja wrapper falls back to a made-up `||call:` syntax when it cannot find tool calls in the
 * template; a model never trained on it would not call load_lora/offload_lora, so such a model is refused.
 */
export function functionCallSupport(wrapper: ChatWrapper): FunctionCallSupport {
  const callPrefix = String(wrapper.settings.functions.call.prefix);
  if (wrapper instanceof JinjaTemplateChatWrapper && !wrapper.usingJinjaFunctionCallTemplate) {
    return {
      supported: false,
      callPrefix,
      reason: "its chat template (tokenizer.chat_template) has no tool-call syntax node-llama-cpp can parse, so the model could not call load_lora, offload_lora or the tools",
    };
  }
  return { supported: true, callPrefix };
}
