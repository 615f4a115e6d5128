import { readGgufHeader, writeGguf, GgmlType } from "../../src/gguf/index.js";
import { DEMO_DIMS, qwen3ModelFile } from "../../src/demo/qwen3.js";
import { buildVocabulary, SPECIAL_TOKENS, type DemoVocabulary } from "../../src/demo/vocabulary.js";
import { learnMerges } from "./bpe.js";
import { initialModelFile, type TrainingRun } from "./run.js";

/**
 * Where node-llama-cpp's generation of a Qwen tool call switches grammars: after the name grammar's `", "arguments": `
 * (the params object starts) and after the params object (the `}\n</tool_call>` suffix). A learned token across
 * either ("Ġ{\"", ".\"}}") is one generation can never sample, and a model trained on it cannot close its call.
 */
const GRAMMAR_SEAMS = [" {", "}}"];

/**
 * The vocabulary: byte-level BPE learned from `texts` (the trajectories as the demo model's byte tokens render
 * them); and the model every training starts from, random weights on that vocabulary, written to the work folder.
 */
export function writeInitialModel(run: TrainingRun, texts: readonly string[]): { path: string; vocab: DemoVocabulary } {
  const merges = learnMerges(texts, run.merges, GRAMMAR_SEAMS);
  const vocab = buildVocabulary(SPECIAL_TOKENS, merges);
  const init = qwen3ModelFile({
    name: "weact-demo-trained",
    dims: DEMO_DIMS,
    vocab,
    seed: run.seed,
    weightType: GgmlType.F32,
    outputFromEmbedding: true,
  });
  const path = initialModelFile(run);
  writeGguf(path, init.metadata, init.tensors);
  return { path, vocab };
}

/**
 * The id of `token` in the vocabulary of the GGUF at `model` (a chat template's end-of-turn token, which some GGUFs
 * do not name by id); `unlike` says what a model without it is not, for the error.
 */
export function vocabularyId(model: string, token: string, unlike: string): number {
  const tokens = readGgufHeader(model).metadata.get("tokenizer.ggml.tokens");
  const id = tokens && typeof tokens === "object" && "items" in tokens ? tokens.items.indexOf(token) : -1;
  if (id < 0) throw new Error(`${model}: the vocabulary has no ${token} token: ${unlike}`);
  return id;
}
