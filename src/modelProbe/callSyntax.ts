import { JinjaTemplateChatWrapper, type ChatWrapper } from "node-llama-cpp";

/** What node-llama-cpp's resolved chat wrapper does with function calls (computed here or in the probe's child). */
export interface WrapperFacts {
  chatWrapper: string;
  /** The text a call starts with (what the grammar and the steering force). */
  callPrefix: string;
  /** The generic Jinja wrapper found no tool-call syntax in the template and fell back to its own `||call:`. */
  genericCallSyntax: boolean;
}

export function wrapperFacts(wrapper: ChatWrapper): WrapperFacts {
  return {
    chatWrapper: wrapper.wrapperName,
    callPrefix: String(wrapper.settings.functions.call.prefix),
    genericCallSyntax: wrapper instanceof JinjaTemplateChatWrapper && !wrapper.usingJinjaFunctionCallTemplate,
  };
}

/**
 * Why a model cannot serve weight actions, or undefined when it can. A model never trained on node-llama-cpp's
 * made-up `||call:` syntax would not call load_lora/offload_lora, so such a model is refused.
 */
export function functionCallProblem(facts: WrapperFacts): string | undefined {
  return facts.genericCallSyntax
    ? "its chat template (tokenizer.chat_template) has no tool-call syntax node-llama-cpp can parse, so the model could not call load_lora, offload_lora or the tools"
    : undefined;
}
