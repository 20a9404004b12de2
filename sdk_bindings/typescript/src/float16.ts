/**
 * IEEE 754 half precision (float16) to and from JavaScript numbers. A float16 tensor's data is a Uint16Array of
 * the raw bits (there is no float16 typed array in Node 20 nor in most browsers); these convert, rounding to the
 * nearest half (ties to even) straight from the double, as numpy's astype(float16) does.
 */

const view = new DataView(new ArrayBuffer(8));

/** One number -> its float16 bits (overflow gives infinity, NaN the quiet NaN 0x7e00, sign kept). */
export function toFloat16Bit(value: number): number {
  view.setFloat64(0, value);
  const hi = view.getUint32(0);
  const sign = (hi >>> 16) & 0x8000;
  if (Number.isNaN(value)) return sign | 0x7e00;
  const a = Math.abs(value);
  if (a === Infinity) return sign | 0x7c00;
  if (a < 2 ** -14) return sign | roundEven(a * 2 ** 24); // a subnormal half (or zero): exact scaling by 2^24
  let e = ((hi >>> 20) & 0x7ff) - 1023; // a is a normal double here: its exponent is exact
  let n = roundEven((a / 2 ** e - 1) * 1024); // the 10 fraction bits (exact arithmetic until the rounding)
  if (n === 1024) {
    n = 0;
    e += 1;
  }
  return e + 15 >= 31 ? sign | 0x7c00 : sign | ((e + 15) << 10) | n;
}

/** One float16 bit pattern -> its number (exact). */
export function fromFloat16Bit(bits: number): number {
  const s = bits & 0x8000 ? -1 : 1;
  const e = (bits >>> 10) & 0x1f;
  const f = bits & 0x3ff;
  if (e === 0) return s * f * 2 ** -24;
  if (e === 31) return f ? NaN : s * Infinity;
  return s * (1 + f / 1024) * 2 ** (e - 15);
}

/** Numbers -> float16 bits, for a float16 tensor's data. */
export function toFloat16Bits(values: ArrayLike<number>): Uint16Array {
  const out = new Uint16Array(values.length);
  for (let i = 0; i < values.length; i++) out[i] = toFloat16Bit(values[i]);
  return out;
}

/** A float16 tensor's data -> its values (every float16 is exact in a float32). */
export function fromFloat16Bits(bits: Uint16Array): Float32Array {
  const out = new Float32Array(bits.length);
  for (let i = 0; i < bits.length; i++) out[i] = fromFloat16Bit(bits[i]);
  return out;
}

function roundEven(q: number): number {
  const n = Math.floor(q);
  const d = q - n;
  return d > 0.5 || (d === 0.5 && n % 2 === 1) ? n + 1 : n;
}
