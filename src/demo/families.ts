import type { ArchitectureName } from "./architectures.js";
import type { TokenizerSpec } from "./model.js";
import type { SpecialToken } from "./vocabulary.js";

/**
 * The open chat-model families the project generates demo sets for: each one's llama.cpp architecture, its
 * real chat template (a file of llama.cpp's models/templates), the special tokens that template and
 * node-llama-cpp's wrapper for it need, and `wrapper`, the node-llama-cpp chat wrapper it resolves to
 * (asserted by test/engine/families.test.ts).
 */
export interface Family {
  readonly name: string;
  readonly architecture: ArchitectureName;
  readonly template: string;
  /** general.name: node-llama-cpp ranks wrappers by it, as it would for the real model. */
  readonly modelName: string;
  readonly specials: readonly SpecialToken[];
  readonly tokenizer: TokenizerSpec;
  /** node-llama-cpp's `wrapperName` of the chat wrapper resolved for this family. */
  readonly wrapper: string;
  /** Whether that wrapper parses function calls; a family without is refused at start-up. */
  readonly functionCalls: boolean;
}

const control = (...texts: string[]): SpecialToken[] => texts.map((text) => ({ text, type: 3 }));
const userDefined = (...texts: string[]): SpecialToken[] => texts.map((text) => ({ text, type: 4 }));

export const FAMILIES: readonly Family[] = [
  {
    name: "llama",
    architecture: "llama",
    template: "meta-llama-Llama-3.1-8B-Instruct.jinja",
    modelName: "weact-demo Llama 3.1 8B Instruct",
    specials: control(
      "<|begin_of_text|>",
      "<|end_of_text|>",
      "<|start_header_id|>",
      "<|end_header_id|>",
      "<|eot_id|>",
      "<|eom_id|>",
      "<|python_tag|>",
      "<|finetune_right_pad_id|>",
    ),
    tokenizer: {
      pre: "llama-bpe",
      eos: "<|eot_id|>",
      pad: "<|finetune_right_pad_id|>",
      bos: "<|begin_of_text|>",
      addBos: true,
    },
    wrapper: "Llama 3.1",
    functionCalls: true,
  },
  {
    name: "qwen2",
    architecture: "qwen2",
    template: "Qwen-Qwen2.5-7B-Instruct.jinja",
    modelName: "weact-demo Qwen2.5 7B Instruct",
    specials: [
      ...control("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
      ...userDefined("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"),
    ],
    tokenizer: { pre: "qwen2", eos: "<|im_end|>", pad: "<|endoftext|>", addBos: false },
    wrapper: "Qwen",
    functionCalls: true,
  },
  {
    name: "qwen3",
    architecture: "qwen3",
    template: "Qwen-Qwen3-0.6B.jinja",
    modelName: "weact-demo Qwen3 0.6B",
    specials: [
      ...control("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
      ...userDefined("<tool_call>", "</tool_call>", "<think>", "</think>", "<tool_response>", "</tool_response>"),
    ],
    tokenizer: { pre: "qwen2", eos: "<|im_end|>", pad: "<|endoftext|>", addBos: false },
    wrapper: "Qwen",
    functionCalls: true,
  },
  {
    name: "mistral",
    architecture: "llama",
    template: "mistralai-Mistral-Nemo-Instruct-2407.jinja",
    modelName: "weact-demo Mistral Nemo Instruct 2407",
    specials: control(
      "<unk>",
      "<s>",
      "</s>",
      "[INST]",
      "[/INST]",
      "[AVAILABLE_TOOLS]",
      "[/AVAILABLE_TOOLS]",
      "[TOOL_RESULTS]",
      "[/TOOL_RESULTS]",
      "[TOOL_CALLS]",
    ),
    tokenizer: { pre: "tekken", eos: "</s>", pad: "<unk>", bos: "<s>", addBos: true },
    wrapper: "Mistral",
    functionCalls: true,
  },
  {
    name: "gemma4",
    architecture: "gemma4",
    template: "google-gemma-4-31B-it.jinja",
    modelName: "weact-demo Gemma 4 31B it",
    specials: control(
      "<pad>",
      "<eos>",
      "<bos>",
      "<|turn>",
      "<turn|>",
      "<|think|>",
      "<|channel>",
      "<channel|>",
      "<|tool>",
      "<tool|>",
      "<|tool_call>",
      "<tool_call|>",
      "<|tool_response>",
      "<tool_response|>",
      '<|"|>',
      "<|image|>",
      "<|audio|>",
      "<|video|>",
    ),
    tokenizer: { pre: "default", eos: "<turn|>", pad: "<pad>", bos: "<bos>", addBos: true },
    wrapper: "Gemma 4",
    functionCalls: true,
  },
  {
    name: "granite",
    architecture: "granite",
    template: "ibm-granite-granite-4.0.jinja",
    modelName: "weact-demo Granite 4.0 Micro",
    specials: [
      ...control("<|end_of_text|>", "<|start_of_role|>", "<|end_of_role|>"),
      ...userDefined(
        "<tool_call>",
        "</tool_call>",
        "<tool_response>",
        "</tool_response>",
        "<tools>",
        "</tools>",
        "<documents>",
        "</documents>",
      ),
    ],
    tokenizer: { pre: "refact", eos: "<|end_of_text|>", pad: "<|end_of_text|>", addBos: false },
    wrapper: "JinjaTemplate",
    functionCalls: true,
  },
  {
    name: "phi3",
    architecture: "phi3",
    template: "microsoft-Phi-3.5-mini-instruct.jinja",
    modelName: "weact-demo Phi 3.5 mini instruct",
    specials: control("<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"),
    tokenizer: { pre: "default", eos: "<|end|>", pad: "<|endoftext|>", addBos: false },
    wrapper: "JinjaTemplate",
    functionCalls: false,
  },
];

export const FAMILY_NAMES = FAMILIES.map((f) => f.name);

export function familyNamed(name: string): Family | undefined {
  return FAMILIES.find((f) => f.name === name);
}
