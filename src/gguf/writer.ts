import { closeSync, openSync, writeSync } from "node:fs";
import {
  ggmlTensorBytes,
  GGUF_DEFAULT_ALIGNMENT,
  GGUF_MAGIC,
  GGUF_VERSION,
  GgmlType,
  GgufValueType,
  type GgufScalar,
} from "./format.js";

/** A metadata value with its GGUF type spelled out, so numbers are never guessed. */
export type GgufEntry =
  | { type: Exclude<GgufValueType, GgufValueType.ARRAY>; value: GgufScalar }
  | { type: GgufValueType.ARRAY; itemType: GgufValueType; items: readonly GgufScalar[] };

export const gguf = {
  u32: (value: number): GgufEntry => ({ type: GgufValueType.UINT32, value }),
  i32: (value: number): GgufEntry => ({ type: GgufValueType.INT32, value }),
  f32: (value: number): GgufEntry => ({ type: GgufValueType.FLOAT32, value }),
  bool: (value: boolean): GgufEntry => ({ type: GgufValueType.BOOL, value }),
  str: (value: string): GgufEntry => ({ type: GgufValueType.STRING, value }),
  strings: (items: readonly string[]): GgufEntry => ({
    type: GgufValueType.ARRAY,
    itemType: GgufValueType.STRING,
    items,
  }),
  i32s: (items: readonly number[]): GgufEntry => ({ type: GgufValueType.ARRAY, itemType: GgufValueType.INT32, items }),
  u32s: (items: readonly number[]): GgufEntry => ({ type: GgufValueType.ARRAY, itemType: GgufValueType.UINT32, items }),
  bools: (items: readonly boolean[]): GgufEntry => ({ type: GgufValueType.ARRAY, itemType: GgufValueType.BOOL, items }),
};

export interface GgufTensorSource {
  readonly name: string;
  /** ggml order (ne[0] first). */
  readonly shape: readonly number[];
  readonly type: GgmlType;
  /** Produces the tensor bytes when written, so large models stream instead of sitting in memory. */
  readonly data: () => Uint8Array;
}

export function tensorByteSize(shape: readonly number[], type: GgmlType): number {
  const bytes = ggmlTensorBytes(shape, type);
  if (bytes === undefined)
    throw new Error(
      `ggml type ${type} cannot hold a tensor of shape [${shape}] (unknown type, or a width that is not a whole number of blocks)`,
    );
  return bytes;
}

const align = (n: number, a: number) => Math.ceil(n / a) * a;

class ByteSink {
  private chunks: Buffer[] = [];
  length = 0;
  push(buf: Buffer) {
    this.chunks.push(buf);
    this.length += buf.length;
  }
  u32(v: number) {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(v);
    this.push(b);
  }
  u64(v: number | bigint) {
    const b = Buffer.alloc(8);
    b.writeBigUInt64LE(BigInt(v));
    this.push(b);
  }
  str(s: string) {
    const bytes = Buffer.from(s, "utf8");
    this.u64(bytes.length);
    this.push(bytes);
  }
  scalar(type: GgufValueType, v: GgufScalar) {
    const b = Buffer.alloc(8);
    switch (type) {
      case GgufValueType.UINT8:
        b.writeUInt8(Number(v));
        return this.push(b.subarray(0, 1));
      case GgufValueType.INT8:
        b.writeInt8(Number(v));
        return this.push(b.subarray(0, 1));
      case GgufValueType.UINT16:
        b.writeUInt16LE(Number(v));
        return this.push(b.subarray(0, 2));
      case GgufValueType.INT16:
        b.writeInt16LE(Number(v));
        return this.push(b.subarray(0, 2));
      case GgufValueType.UINT32:
        b.writeUInt32LE(Number(v));
        return this.push(b.subarray(0, 4));
      case GgufValueType.INT32:
        b.writeInt32LE(Number(v));
        return this.push(b.subarray(0, 4));
      case GgufValueType.FLOAT32:
        b.writeFloatLE(Number(v));
        return this.push(b.subarray(0, 4));
      case GgufValueType.BOOL:
        b.writeUInt8(v ? 1 : 0);
        return this.push(b.subarray(0, 1));
      case GgufValueType.STRING:
        return this.str(String(v));
      case GgufValueType.UINT64:
        b.writeBigUInt64LE(BigInt(v));
        return this.push(b);
      case GgufValueType.INT64:
        b.writeBigInt64LE(BigInt(v));
        return this.push(b);
      case GgufValueType.FLOAT64:
        b.writeDoubleLE(Number(v));
        return this.push(b);
      default:
        throw new Error(`cannot write GGUF value of type ${type}`);
    }
  }
  toBuffer() {
    return Buffer.concat(this.chunks);
  }
}

/**
 * Writes a GGUF v3 file: header, metadata, tensor infos, then each tensor's bytes at an aligned offset.
 * Deterministic: the same inputs give the same bytes.
 */
export function writeGguf(
  path: string,
  metadata: Record<string, GgufEntry>,
  tensors: readonly GgufTensorSource[],
): void {
  const header = new ByteSink();
  header.u32(GGUF_MAGIC);
  header.u32(GGUF_VERSION);
  header.u64(tensors.length);
  header.u64(Object.keys(metadata).length);
  for (const [key, entry] of Object.entries(metadata)) {
    header.str(key);
    header.u32(entry.type);
    if (entry.type === GgufValueType.ARRAY) {
      header.u32(entry.itemType);
      header.u64(entry.items.length);
      for (const item of entry.items) header.scalar(entry.itemType, item);
    } else {
      header.scalar(entry.type, entry.value);
    }
  }
  let offset = 0;
  const offsets: number[] = [];
  for (const t of tensors) {
    offsets.push(offset);
    header.str(t.name);
    header.u32(t.shape.length);
    for (const d of t.shape) header.u64(d);
    header.u32(t.type);
    header.u64(offset);
    offset = align(offset + tensorByteSize(t.shape, t.type), GGUF_DEFAULT_ALIGNMENT);
  }
  const headerBytes = header.toBuffer();
  const dataStart = align(headerBytes.length, GGUF_DEFAULT_ALIGNMENT);

  const fd = openSync(path, "w");
  try {
    writeSync(fd, headerBytes);
    writeSync(fd, Buffer.alloc(dataStart - headerBytes.length));
    let written = 0;
    tensors.forEach((t, i) => {
      writeSync(fd, Buffer.alloc(offsets[i]! - written));
      const bytes = t.data();
      const expected = tensorByteSize(t.shape, t.type);
      if (bytes.byteLength !== expected)
        throw new Error(`tensor ${t.name}: ${bytes.byteLength} bytes given, shape needs ${expected}`);
      writeSync(fd, bytes);
      written = offsets[i]! + expected;
    });
    writeSync(fd, Buffer.alloc(offset - written));
  } finally {
    closeSync(fd);
  }
}
