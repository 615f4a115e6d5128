/**
 * IEEE half (F16) and bfloat16 (BF16) conversions, little-endian like every file format here. F16 comes from
 * @petamoriken/float16; BF16 stays hand-written (that library has none, and a bfloat16 is the top half of a float32).
 */
import { Float16Array } from "@petamoriken/float16";

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/**
 * F32 -> F16, round to nearest even, with subnormals and infinities (@petamoriken/float16; NaN becomes its quiet NaN).
 */
export function f32ToF16(values: Float32Array): Uint16Array {
  const half = new Float16Array(values);
  return new Uint16Array(half.buffer, half.byteOffset, half.length);
}

/** F16 -> F32 (exact). */
export function f16ToF32(values: Uint16Array): Float32Array {
  return Float32Array.from(new Float16Array(values.buffer, values.byteOffset, values.length));
}

/** BF16 -> F32: exact (a bfloat16 is the top half of a float32). */
export function bf16ToF32(values: Uint16Array): Float32Array {
  const out = new Uint32Array(values.length);
  for (let i = 0; i < values.length; i++) out[i] = values[i]! << 16;
  return new Float32Array(out.buffer);
}

/** F32 -> BF16, round to nearest even (NaN stays NaN). */
export function f32ToBf16(values: Float32Array): Uint16Array {
  const out = new Uint16Array(values.length);
  for (let i = 0; i < values.length; i++) {
    f32[0] = values[i]!;
    const x = u32[0]!;
    if ((x & 0x7f800000) === 0x7f800000 && x & 0x7fffff) out[i] = (x >>> 16) | 0x40;
    else out[i] = (x + 0x7fff + ((x >>> 16) & 1)) >>> 16;
  }
  return out;
}

/** A typed view over a byte buffer, copying only when it is not aligned. */
export function viewAs<T extends Float32Array | Uint16Array>(
  bytes: Uint8Array,
  kind: new (b: ArrayBuffer, o: number, n: number) => T,
  elementSize: number,
): T {
  const aligned = bytes.byteOffset % elementSize === 0 ? bytes : new Uint8Array(bytes);
  return new kind(aligned.buffer as ArrayBuffer, aligned.byteOffset, aligned.byteLength / elementSize);
}

export function bytesOf(values: Float32Array | Uint16Array): Uint8Array {
  return new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
}
