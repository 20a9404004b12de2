/**
 * The binary tensor encoding of the agent's API (`application/x-edgekit-tensors`):
 *
 *     "EKT1" | uint32 little-endian header length | header (UTF-8 JSON) | payload
 *
 * The header is `{"tensors": [{name, dtype, shape, offset, nbytes}], ...metadata}`; offsets count from the start
 * of the payload; data is C-order, little-endian. A 0-d tensor has the shape `[]`.
 */

import { toFloat16Bit } from "./float16.js";

export const CONTENT_TYPE = "application/x-edgekit-tensors";
export const MAX_HEADER = 1 << 20;
export const MAX_TENSORS = 1024;
const MAGIC = [0x45, 0x4b, 0x54, 0x31]; // "EKT1"

/**
 * The typed array each dtype travels in. JavaScript has no float16 array everywhere yet: a float16 tensor's data
 * is a Uint16Array of the raw IEEE 754 half-precision bits. A bool tensor's data is a Uint8Array of 0 and 1.
 */
export interface DataOf {
  float32: Float32Array;
  float16: Uint16Array;
  float64: Float64Array;
  int8: Int8Array;
  uint8: Uint8Array;
  int16: Int16Array;
  uint16: Uint16Array;
  int32: Int32Array;
  int64: BigInt64Array;
  bool: Uint8Array;
}

export type DType = keyof DataOf;
export type TensorData = DataOf[DType];

/** A tensor: `data` holds product(shape) elements in C order. */
export interface Tensor<D extends DType = DType> {
  dtype: D;
  shape: number[];
  data: DataOf[D];
}

/** A tensor of any dtype, narrowed by its `dtype` (`if (t.dtype === "int64") t.data` is a BigInt64Array). */
export type AnyTensor = { [D in DType]: Tensor<D> }[DType];

type ArrayType = {
  new (length: number): TensorData;
  new (buffer: ArrayBufferLike, byteOffset: number, length: number): TensorData;
  readonly BYTES_PER_ELEMENT: number;
};

const ARRAYS: { [D in DType]: ArrayType } = {
  float32: Float32Array,
  float16: Uint16Array,
  float64: Float64Array,
  int8: Int8Array,
  uint8: Uint8Array,
  int16: Int16Array,
  uint16: Uint16Array,
  int32: Int32Array,
  int64: BigInt64Array,
  bool: Uint8Array,
} as unknown as { [D in DType]: ArrayType };

export const DTYPES = Object.keys(ARRAYS) as DType[];

const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** A malformed tensor message, or a tensor whose data does not match its dtype and shape. */
export class WireError extends Error {
  override name = "WireError";
}

export function isDType(value: unknown): value is DType {
  return typeof value === "string" && Object.prototype.hasOwnProperty.call(ARRAYS, value);
}

export function itemSize(dtype: DType): number {
  return ARRAYS[dtype].BYTES_PER_ELEMENT;
}

function elementCount(shape: readonly number[], what: string): number {
  let count = 1;
  for (const d of shape) {
    if (!Number.isSafeInteger(d) || d < 0)
      throw new WireError(`${what}: shape ${JSON.stringify(shape)} is not a list of non-negative integers`);
    count *= d;
  }
  return count;
}

function swapped(bytes: Uint8Array, size: number): Uint8Array {
  const out = new Uint8Array(bytes.length);
  for (let i = 0; i < bytes.length; i += size) for (let j = 0; j < size; j++) out[i + j] = bytes[i + size - 1 - j];
  return out;
}

/**
 * A tensor over raw little-endian C-order bytes (an image's pixels, a file's contents). The data is a view of
 * `bytes` when its offset is aligned for the dtype (and the machine is little-endian), else a copy.
 */
export function tensorFromBytes<D extends DType>(dtype: D, shape: readonly number[], bytes: Uint8Array): Tensor<D> {
  if (!isDType(dtype)) throw new WireError(`unsupported dtype ${JSON.stringify(dtype)}; one of ${DTYPES.join(", ")}`);
  const Array_ = ARRAYS[dtype];
  const size = Array_.BYTES_PER_ELEMENT;
  const count = elementCount(shape, "tensor");
  if (count * size !== bytes.byteLength) {
    throw new WireError(
      `shape ${JSON.stringify(shape)} of ${dtype} needs ${count * size} bytes, got ${bytes.byteLength}`,
    );
  }
  let src = bytes;
  if (!LITTLE_ENDIAN && size > 1) src = swapped(bytes, size);
  else if (src.byteOffset % size !== 0) src = bytes.slice(); // a typed array view needs an aligned offset
  const data = new Array_(src.buffer, src.byteOffset, count) as DataOf[D];
  return { dtype, shape: [...shape], data };
}

/** The raw little-endian bytes of a tensor's data (a view where the machine is little-endian). */
export function tensorBytes(tensor: Tensor): Uint8Array {
  const view = new Uint8Array(tensor.data.buffer, tensor.data.byteOffset, tensor.data.byteLength);
  const size = itemSize(tensor.dtype);
  return LITTLE_ENDIAN || size === 1 ? view : swapped(view, size);
}

/** A tensor from plain numbers (bigints for int64; booleans or 0/1 for bool; for float16 the numbers, rounded to
 * half precision); `shape` defaults to `[n]`. */
export function tensor<D extends DType>(
  dtype: D,
  values: ArrayLike<number | bigint | boolean>,
  shape?: readonly number[],
): Tensor<D> {
  if (!isDType(dtype)) throw new WireError(`unsupported dtype ${JSON.stringify(dtype)}; one of ${DTYPES.join(", ")}`);
  const s = shape ? [...shape] : [values.length];
  const count = elementCount(s, "tensor");
  if (count !== values.length)
    throw new WireError(`shape ${JSON.stringify(s)} holds ${count} values, got ${values.length}`);
  const data = new ARRAYS[dtype](count);
  for (let i = 0; i < count; i++) {
    const v = values[i];
    if (dtype === "int64") (data as BigInt64Array)[i] = typeof v === "bigint" ? v : BigInt(Number(v));
    else if (dtype === "float16") (data as Uint16Array)[i] = toFloat16Bit(Number(v));
    else (data as Exclude<TensorData, BigInt64Array>)[i] = typeof v === "bigint" ? Number(v) : Number(v);
  }
  return { dtype, shape: s, data: data as DataOf[D] };
}

/** Checks a tensor's data is the dtype's typed array with product(shape) elements; throws WireError if not. */
export function checkTensor(name: string, t: Tensor): void {
  if (t === null || typeof t !== "object")
    throw new WireError(`tensor ${JSON.stringify(name)} is not a {dtype, shape, data} object`);
  if (!isDType(t.dtype)) {
    throw new WireError(
      `tensor ${JSON.stringify(name)}: unsupported dtype ${JSON.stringify(t.dtype)}; one of ${DTYPES.join(", ")}`,
    );
  }
  if (!Array.isArray(t.shape))
    throw new WireError(`tensor ${JSON.stringify(name)}: shape must be an array of integers`);
  const count = elementCount(t.shape, `tensor ${JSON.stringify(name)}`);
  const Array_ = ARRAYS[t.dtype];
  if (!(t.data instanceof Array_)) {
    const got = t.data === null || t.data === undefined ? String(t.data) : (t.data as object).constructor.name;
    throw new WireError(
      `tensor ${JSON.stringify(name)}: ${t.dtype} data must be a ${Array_.name}, got ${got} (see tensor())`,
    );
  }
  if (t.data.length !== count) {
    const shape = JSON.stringify(t.shape);
    throw new WireError(
      `tensor ${JSON.stringify(name)}: shape ${shape} holds ${count} values, data has ${t.data.length}`,
    );
  }
}

/** `{name: tensor}` (and metadata for the header) -> one message. */
export function encodeTensors(tensors: Record<string, Tensor>, meta: Record<string, unknown> = {}): Uint8Array {
  const entries: { name: string; dtype: DType; shape: number[]; offset: number; nbytes: number }[] = [];
  const chunks: Uint8Array[] = [];
  let offset = 0;
  for (const [name, t] of Object.entries(tensors)) {
    checkTensor(name, t);
    const bytes = tensorBytes(t);
    entries.push({ name, dtype: t.dtype, shape: [...t.shape], offset, nbytes: bytes.byteLength });
    chunks.push(bytes);
    offset += bytes.byteLength;
  }
  const header = new TextEncoder().encode(JSON.stringify({ ...meta, tensors: entries }));
  const out = new Uint8Array(8 + header.byteLength + offset);
  out.set(MAGIC, 0);
  new DataView(out.buffer).setUint32(4, header.byteLength, true);
  out.set(header, 8);
  let at = 8 + header.byteLength;
  for (const c of chunks) {
    out.set(c, at);
    at += c.byteLength;
  }
  return out;
}

export interface Decoded {
  tensors: Record<string, AnyTensor>;
  /** The whole header: `tensors` and every other key (the agent's metadata). */
  header: Record<string, unknown>;
}

/**
 * One message -> its tensors and header; throws WireError on malformed input. Sizes are bounded as the agent's
 * own decoder bounds them: the header at 1 MiB, at most 1024 tensors, every tensor inside the payload and all of
 * them together no larger than it. Tensors are views of `body` where their offsets are aligned, else copies.
 */
export function decodeTensors(body: ArrayBuffer | Uint8Array): Decoded {
  const bytes = body instanceof Uint8Array ? body : new Uint8Array(body);
  if (bytes.byteLength < 8 || MAGIC.some((b, i) => bytes[i] !== b)) {
    throw new WireError("body is not edgekit tensors (missing EKT1 magic)");
  }
  const hlen = new DataView(bytes.buffer, bytes.byteOffset, 8).getUint32(4, true);
  if (hlen > MAX_HEADER) throw new WireError(`tensor header of ${hlen} bytes is larger than ${MAX_HEADER}`);
  if (8 + hlen > bytes.byteLength) throw new WireError("header length exceeds the body");
  let header: unknown;
  try {
    header = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes.subarray(8, 8 + hlen)));
  } catch {
    header = undefined;
  }
  const isObject = typeof header === "object" && header !== null && !Array.isArray(header);
  const entries = isObject ? (header as Record<string, unknown>).tensors : undefined;
  if (!Array.isArray(entries)) throw new WireError("tensor header is not valid JSON with a 'tensors' list");
  if (entries.length > MAX_TENSORS)
    throw new WireError(`${entries.length} tensors in one message; at most ${MAX_TENSORS}`);
  const payload = bytes.subarray(8 + hlen);
  // Every entry is checked before any tensor is made: names unique, sizes consistent, and the tensors together
  // no larger than the payload (entries cannot share bytes to multiply a copy).
  const checked: [string, DType, number[], number, number][] = [];
  const names = new Set<string>();
  let total = 0;
  for (const e of entries as Record<string, unknown>[]) {
    const ok = typeof e === "object" && e !== null && Array.isArray(e.shape);
    const { name, dtype, shape, offset, nbytes } = ok ? e : ({} as Record<string, unknown>);
    if (
      !ok ||
      !Number.isSafeInteger(offset) ||
      !Number.isSafeInteger(nbytes) ||
      name === undefined ||
      dtype === undefined
    ) {
      throw new WireError("tensor entry needs name, dtype, shape, offset, nbytes");
    }
    if (typeof name !== "string" || name.length === 0 || name.length > 256) {
      throw new WireError("tensor names are strings of 1 to 256 characters");
    }
    if (names.has(name)) throw new WireError(`tensor ${JSON.stringify(name)} is listed twice`);
    names.add(name);
    if (!isDType(dtype))
      throw new WireError(`tensor ${JSON.stringify(name)}: unsupported dtype ${JSON.stringify(dtype)}`);
    const dims = shape as unknown[];
    if (dims.length > 32) throw new WireError(`tensor ${JSON.stringify(name)}: more than 32 dimensions`);
    let count = 1;
    for (const d of dims) {
      if (!Number.isSafeInteger(d)) throw new WireError("tensor entry needs name, dtype, shape, offset, nbytes");
      if ((d as number) < 0) throw new WireError(`tensor ${JSON.stringify(name)}: negative dimension`);
      count = Math.min(count * (d as number), Number.MAX_SAFE_INTEGER); // capped: exactness matters only below it
    }
    if (dims.includes(0)) count = 0;
    const off = offset as number;
    const n = nbytes as number;
    if (count * itemSize(dtype) !== n || off < 0 || off + n > payload.byteLength) {
      throw new WireError(
        `tensor ${JSON.stringify(name)}: shape ${JSON.stringify(dims)} and dtype ${dtype} do not match its ${n} bytes`,
      );
    }
    total += n;
    if (total > payload.byteLength) {
      throw new WireError(`the tensors' sizes add up to more than the ${payload.byteLength} bytes of payload`);
    }
    checked.push([name, dtype, dims as number[], off, n]);
  }
  // fromEntries defines each name as an own key ("__proto__" too, which an assignment would not)
  const tensors: Record<string, AnyTensor> = Object.fromEntries(
    checked.map(([name, dtype, shape, off, n]) => [
      name,
      tensorFromBytes(dtype, shape, payload.subarray(off, off + n)) as AnyTensor,
    ]),
  );
  return { tensors, header: header as Record<string, unknown> };
}
