/**
 * GGUF files: read a header (tensor infos and metadata, never the weights), write a file, check a base model
 * or a LoRA before llama.cpp sees it (some bad metadata aborts its process), quantize (ggml's Q8_0/Q4_0),
 * half floats, and the content hash that names model and adapter versions. Pure TypeScript: engines, the
 * adapter library, the demo weights and the CLI all use it through this entry point.
 */
export { sha256File, sha256Of } from "./contentHash.js";
export {
  FILE_TYPE_OF,
  GGML_BLOCK,
  GGML_TYPE_SIZE,
  GgmlType,
  GgufValueType,
  ggmlTensorBytes,
  type GgufArray,
  type GgufScalar,
  type GgufTensorInfo,
  type GgufValue,
} from "./format.js";
export { bf16ToF32, bytesOf, f16ToF32, f32ToBf16, f32ToF16, viewAs } from "./halfFloat.js";
export { dequantize, quantize, quantizeQ4_0, quantizeQ8_0, type QuantType } from "./quantize.js";
export {
  fileKind,
  GgufFormatError,
  metaNumber,
  metaString,
  readGgufHeader,
  readGgufHeaderAsync,
  type GgufFile,
} from "./reader.js";
export {
  ALORA_INVOCATION_KEY,
  baseModelProblems,
  invocationTokens,
  loraProblems,
  vocabularySize,
  type LoraShape,
} from "./validate.js";
export { gguf, tensorByteSize, writeGguf, type GgufEntry, type GgufTensorSource } from "./writer.js";
