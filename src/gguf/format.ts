/** GGUF v3 constants shared by the reader and the writer (see ggml/docs/gguf.md). */

export const GGUF_MAGIC = 0x46554747; // "GGUF" read as little-endian uint32
export const GGUF_VERSION = 3;
export const GGUF_DEFAULT_ALIGNMENT = 32;

export enum GgufValueType {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
}

/**
 * ggml's tensor types (ggml.h `enum ggml_type`), every id a GGUF file may hold, so that each one has a name (doctor
 * prints them); ids 4, 5, 31-33 and 36-38 are retired in ggml. Only `TabulatedType` has a block layout here.
 */
export enum GgmlType {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
  NVFP4 = 40,
  Q1_0 = 41,
  Q2_0 = 42,
}

/** The types this project writes or checks by size: the ones `GGML_BLOCK` has a layout for. */
export type TabulatedType = GgmlType.F32 | GgmlType.F16 | GgmlType.BF16 | GgmlType.Q4_0 | GgmlType.Q8_0 | GgmlType.Q4_K;

/** Bytes per element for the unquantized tensor types this project writes or checks by size. */
export const GGML_TYPE_SIZE: Partial<Record<GgmlType, number>> = {
  [GgmlType.F32]: 4,
  [GgmlType.F16]: 2,
  [GgmlType.BF16]: 2,
};

/**
 * Block layout of every type the project knows (ggml-common.h): `elements` values along ne[0] stored in
 * `bytes` bytes. Plain types are blocks of one.
 */
export const GGML_BLOCK: Readonly<Record<TabulatedType, { elements: number; bytes: number }>> = {
  [GgmlType.F32]: { elements: 1, bytes: 4 },
  [GgmlType.F16]: { elements: 1, bytes: 2 },
  [GgmlType.BF16]: { elements: 1, bytes: 2 },
  [GgmlType.Q4_0]: { elements: 32, bytes: 2 + 16 }, // block_q4_0: f16 d, 16 bytes of nibbles
  [GgmlType.Q8_0]: { elements: 32, bytes: 2 + 32 }, // block_q8_0: f16 d, 32 int8
  // block_q4_K: f16 d, f16 dmin, 12 scale bytes, 128 nibble bytes
  [GgmlType.Q4_K]: { elements: 256, bytes: 2 + 2 + 12 + 128 },
};

/** llama.cpp's `general.file_type` (llama_ftype) for a model whose big weights are of this type. */
export const FILE_TYPE_OF: Readonly<Partial<Record<GgmlType, number>>> = {
  [GgmlType.F32]: 0,
  [GgmlType.F16]: 1,
  [GgmlType.Q4_0]: 2,
  [GgmlType.Q8_0]: 7,
  [GgmlType.Q4_K]: 15, // MOSTLY_Q4_K_M
  [GgmlType.BF16]: 32,
};

/**
 * Bytes of a tensor of `shape` and `type`, or undefined for a type not tabulated (or a width not a whole number of
 * blocks).
 */
export function ggmlTensorBytes(shape: readonly number[], type: number): number | undefined {
  const block = GGML_BLOCK[type as TabulatedType] as { elements: number; bytes: number } | undefined;
  if (!block || shape.length === 0 || shape[0]! % block.elements !== 0) return undefined;
  return (shape.reduce((a, b) => a * b, 1) / block.elements) * block.bytes;
}

export type GgufScalar = number | bigint | boolean | string;
export type GgufValue = GgufScalar | GgufArray;
export interface GgufArray {
  readonly itemType: GgufValueType;
  readonly items: readonly GgufScalar[];
}

export interface GgufTensorInfo {
  readonly name: string;
  /** ggml order: ne[0] is the fastest-varying dimension (the input width of a weight). */
  readonly shape: readonly number[];
  readonly type: number;
  /** Offset relative to the start of the tensor data section. */
  readonly offset: bigint;
}
