/** IEEE half (F16) and bfloat16 (BF16) conversions, little-endian like every file format here. */

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** F32 -> F16, round to nearest even, with subnormals, infinities and NaN. */
export function f32ToF16(values: Float32Array): Uint16Array {
  const out = new Uint16Array(values.length);
  for (let i = 0; i < values.length; i++) {
    f32[0] = values[i]!;
    const x = u32[0]!;
    const sign = (x >>> 16) & 0x8000;
    const exp = (x >>> 23) & 0xff;
    const mant = x & 0x7fffff;
    if (exp === 0xff) {
      out[i] = sign | 0x7c00 | (mant ? 0x200 : 0);
      continue;
    }
    const e = exp - 127 + 15;
    if (e >= 31) {
      out[i] = sign | 0x7c00;
    } else if (e <= 0) {
      if (e < -10) {
        out[i] = sign;
        continue;
      }
      // subnormal: shift the mantissa (with its implicit 1) right, rounding to nearest even
      const m = mant | 0x800000;
      const shift = 14 - e;
      let h = m >>> shift;
      const rem = m & ((1 << shift) - 1);
      const half = 1 << (shift - 1);
      if (rem > half || (rem === half && (h & 1))) h++;
      out[i] = sign | h;
    } else {
      let h = (e << 10) | (mant >>> 13);
      const rem = mant & 0x1fff;
      if (rem > 0x1000 || (rem === 0x1000 && (h & 1))) h++; // a carry into the exponent is still correct
      out[i] = sign | h;
    }
  }
  return out;
}

/** F16 -> F32 (exact). */
export function f16ToF32(values: Uint16Array): Float32Array {
  const out = new Float32Array(values.length);
  for (let i = 0; i < values.length; i++) {
    const h = values[i]!;
    const sign = h & 0x8000 ? -1 : 1;
    const exp = (h >>> 10) & 0x1f;
    const mant = h & 0x3ff;
    if (exp === 0) out[i] = sign * mant * 2 ** -24;
    else if (exp === 31) out[i] = mant ? NaN : sign * Infinity;
    else out[i] = sign * (1 + mant / 1024) * 2 ** (exp - 15);
  }
  return out;
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
export function viewAs<T extends Float32Array | Uint16Array>(bytes: Uint8Array, kind: new (b: ArrayBuffer, o: number, n: number) => T, elementSize: number): T {
  const aligned = bytes.byteOffset % elementSize === 0 ? bytes : new Uint8Array(bytes);
  return new kind(aligned.buffer as ArrayBuffer, aligned.byteOffset, aligned.byteLength / elementSize);
}

export function bytesOf(values: Float32Array | Uint16Array): Uint8Array {
  return new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
}
