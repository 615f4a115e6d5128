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

export enum GgmlType {
  F32 = 0,
  F16 = 1,
  BF16 = 30,
}

/** Bytes per element for the tensor types this project writes or checks by size. */
export const GGML_TYPE_SIZE: Partial<Record<GgmlType, number>> = {
  [GgmlType.F32]: 4,
  [GgmlType.F16]: 2,
  [GgmlType.BF16]: 2,
};

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
