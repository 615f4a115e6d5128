import { GGML_BLOCK, GgmlType } from "./format.js";
import { f16ToF32, f32ToF16 } from "./halfFloat.js";

/**
 * ggml's reference quantizers (ggml-quants.c `quantize_row_*_ref`), in float32 arithmetic like the C code,
 * so a file written here holds the bytes llama-quantize would write for the same weights (pure, no imatrix).
 * Values are ggml-ordered rows: the width ne[0] must be a whole number of blocks.
 */

export type QuantType = GgmlType.Q8_0 | GgmlType.Q4_0;

const fr = Math.fround;

function blocks(values: Float32Array, type: QuantType): { n: number; out: Uint8Array; view: DataView } {
  const { elements, bytes } = GGML_BLOCK[type];
  if (values.length % elements !== 0)
    throw new Error(`${values.length} values are not a whole number of ${elements}-value blocks`);
  const n = values.length / elements;
  const out = new Uint8Array(n * bytes);
  return { n, out, view: new DataView(out.buffer) };
}

/** The f16 scale as stored, and back: the C code multiplies by the unrounded inverse of the f32 scale. */
function halfOf(d: number): number {
  return f32ToF16(new Float32Array([d]))[0]!;
}

/** block_q8_0: d = amax / 127, q = round(x / d) (C roundf: half away from zero). */
export function quantizeQ8_0(values: Float32Array): Uint8Array {
  const { n, out, view } = blocks(values, GgmlType.Q8_0);
  for (let b = 0; b < n; b++) {
    let amax = 0;
    for (let j = 0; j < 32; j++) amax = Math.max(amax, Math.abs(values[b * 32 + j]!));
    const d = fr(amax / 127);
    const id = d ? fr(1 / d) : 0;
    const at = b * 34;
    view.setUint16(at, halfOf(d), true);
    for (let j = 0; j < 32; j++) {
      const x = fr(values[b * 32 + j]! * id);
      view.setInt8(at + 2 + j, Math.sign(x) * Math.round(Math.abs(x)));
    }
  }
  return out;
}

/**
 * block_q4_0: d = (the value of largest magnitude) / -8, q = min(15, trunc(x / d + 8.5)); value j and j+16 share a
 * byte.
 */
export function quantizeQ4_0(values: Float32Array): Uint8Array {
  const { n, out, view } = blocks(values, GgmlType.Q4_0);
  for (let b = 0; b < n; b++) {
    let amax = 0;
    let max = 0;
    for (let j = 0; j < 32; j++) {
      const v = values[b * 32 + j]!;
      if (amax < Math.abs(v)) {
        amax = Math.abs(v);
        max = v;
      }
    }
    const d = fr(max / -8);
    const id = d ? fr(1 / d) : 0;
    const at = b * 18;
    view.setUint16(at, halfOf(d), true);
    const q = (x: number) => Math.min(15, Math.trunc(fr(fr(x * id) + 8.5)));
    for (let j = 0; j < 16; j++) out[at + 2 + j] = q(values[b * 32 + j]!) | (q(values[b * 32 + 16 + j]!) << 4);
  }
  return out;
}

export function quantize(values: Float32Array, type: QuantType): Uint8Array {
  return type === GgmlType.Q8_0 ? quantizeQ8_0(values) : quantizeQ4_0(values);
}

/** The values a quantized tensor stands for (ggml's dequantize_row_*), for checks and drift figures. */
export function dequantize(bytes: Uint8Array, type: QuantType): Float32Array {
  const { elements, bytes: blockBytes } = GGML_BLOCK[type];
  const n = bytes.byteLength / blockBytes;
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out = new Float32Array(n * elements);
  for (let b = 0; b < n; b++) {
    const at = b * blockBytes;
    const d = f16ToF32(new Uint16Array([view.getUint16(at, true)]))[0]!;
    for (let j = 0; j < elements; j++) {
      if (type === GgmlType.Q8_0) out[b * 32 + j] = d * view.getInt8(at + 2 + j);
      else {
        const byte = bytes[at + 2 + (j % 16)]!;
        out[b * 32 + j] = d * ((j < 16 ? byte & 0x0f : byte >> 4) - 8);
      }
    }
  }
  return out;
}
