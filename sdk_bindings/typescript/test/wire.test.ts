import assert from "node:assert/strict";
import { test } from "node:test";

import {
  decodeTensors,
  DTYPES,
  encodeTensors,
  MAX_HEADER,
  MAX_TENSORS,
  Tensor,
  tensor,
  tensorBytes,
  tensorFromBytes,
  WireError,
} from "../src/index.js";

/** Made by the Python client (sdk_bindings/python/edgekit_sdk/wire.py):
 * encode_tensors({"f": float32 [1.5, -2], "i": int64 [[-1, 2**40]], "b": bool [True, False, True],
 *                 "s": float64 3.25 (0-d), "h": float16 [1.0, -0.5], "u": uint8 [7, 255]},
 *                {"model": "m", "inference_ms": 0.5}) */
const FROM_PYTHON =
  "RUtUMfIBAAB7Im1vZGVsIjogIm0iLCAiaW5mZXJlbmNlX21zIjogMC41LCAidGVuc29ycyI6IFt7Im5hbWUiOiAiZiIsICJkdHlwZSI6ICJmbG9h" +
  "dDMyIiwgInNoYXBlIjogWzJdLCAib2Zmc2V0IjogMCwgIm5ieXRlcyI6IDh9LCB7Im5hbWUiOiAiaSIsICJkdHlwZSI6ICJpbnQ2NCIsICJzaGFw" +
  "ZSI6IFsxLCAyXSwgIm9mZnNldCI6IDgsICJuYnl0ZXMiOiAxNn0sIHsibmFtZSI6ICJiIiwgImR0eXBlIjogImJvb2wiLCAic2hhcGUiOiBbM10s" +
  "ICJvZmZzZXQiOiAyNCwgIm5ieXRlcyI6IDN9LCB7Im5hbWUiOiAicyIsICJkdHlwZSI6ICJmbG9hdDY0IiwgInNoYXBlIjogW10sICJvZmZzZXQi" +
  "OiAyNywgIm5ieXRlcyI6IDh9LCB7Im5hbWUiOiAiaCIsICJkdHlwZSI6ICJmbG9hdDE2IiwgInNoYXBlIjogWzJdLCAib2Zmc2V0IjogMzUsICJu" +
  "Ynl0ZXMiOiA0fSwgeyJuYW1lIjogInUiLCAiZHR5cGUiOiAidWludDgiLCAic2hhcGUiOiBbMl0sICJvZmZzZXQiOiAzOSwgIm5ieXRlcyI6IDJ9" +
  "XX0AAMA/AAAAwP//////////AAAAAAABAAABAAEAAAAAAAAKQAA8ALgH/w==";

function message(header: unknown, payload: Uint8Array = new Uint8Array(0)): Uint8Array {
  const h = new TextEncoder().encode(typeof header === "string" ? header : JSON.stringify(header));
  const out = new Uint8Array(8 + h.length + payload.length);
  out.set([0x45, 0x4b, 0x54, 0x31]);
  new DataView(out.buffer).setUint32(4, h.length, true);
  out.set(h, 8);
  out.set(payload, 8 + h.length);
  return out;
}

function entry(name: string, dtype: string, shape: number[], offset: number, nbytes: number): object {
  return { name, dtype, shape, offset, nbytes };
}

test("decodes what the Python client encodes, every value bit for bit", () => {
  const { tensors, header } = decodeTensors(new Uint8Array(Buffer.from(FROM_PYTHON, "base64")));
  assert.equal(header.model, "m");
  assert.equal(header.inference_ms, 0.5);
  assert.deepEqual(tensors.f, { dtype: "float32", shape: [2], data: new Float32Array([1.5, -2]) });
  assert.deepEqual(tensors.i, { dtype: "int64", shape: [1, 2], data: new BigInt64Array([-1n, 2n ** 40n]) });
  assert.deepEqual(tensors.b, { dtype: "bool", shape: [3], data: new Uint8Array([1, 0, 1]) });
  assert.deepEqual(tensors.s, { dtype: "float64", shape: [], data: new Float64Array([3.25]) });
  assert.deepEqual(tensors.h, { dtype: "float16", shape: [2], data: new Uint16Array([0x3c00, 0xb800]) });
  assert.deepEqual(tensors.u, { dtype: "uint8", shape: [2], data: new Uint8Array([7, 255]) });
});

test("every dtype survives a round trip, 0-d and empty tensors included", () => {
  const inputs: Record<string, Tensor> = {};
  for (const dtype of DTYPES) {
    const values = dtype === "bool" ? [1, 0, 1, 1, 0, 0] : [1, 2, 3, 4, 5, 127];
    inputs[dtype] = tensor(dtype, values, [2, 3]);
    inputs[`${dtype}_scalar`] = tensor(dtype, [1], []);
    inputs[`${dtype}_empty`] = tensor(dtype, [], [0, 4]);
  }
  const { tensors, header } = decodeTensors(encodeTensors(inputs, { note: "kept" }));
  assert.equal(header.note, "kept");
  assert.deepEqual(Object.keys(tensors), Object.keys(inputs));
  for (const [name, t] of Object.entries(inputs)) assert.deepEqual(tensors[name], t, name);
});

test("aligned tensors are views of the body, unaligned ones copies", () => {
  const body = encodeTensors({
    a: tensor("uint8", [1, 2, 3]),
    b: tensor("float64", [0.1, 0.2]),
  });
  const copy = new Uint8Array(body); // its own buffer, offset 0
  const { tensors } = decodeTensors(copy);
  assert.equal(tensors.a.data.buffer, copy.buffer); // a uint8 view never needs alignment
  assert.notEqual(tensors.b.data.buffer, copy.buffer); // offset 8 + header + 3: not a multiple of 8
  assert.deepEqual(Array.from(tensors.b.data as Float64Array), [0.1, 0.2]);
  const aligned = tensorFromBytes("float32", [2], new Uint8Array(new Float32Array([1, 2]).buffer));
  assert.deepEqual(Array.from(aligned.data), [1, 2]);
  const odd = new Uint8Array(9);
  odd.set(new Uint8Array(new Float32Array([3, 4]).buffer), 1);
  const unaligned = tensorFromBytes("float32", [2], odd.subarray(1));
  assert.deepEqual(Array.from(unaligned.data), [3, 4]);
  assert.notEqual(unaligned.data.buffer, odd.buffer);
});

test("tensor() and tensorBytes() take plain values and give the little-endian bytes", () => {
  assert.deepEqual(tensor("int64", [1, -2]).data, new BigInt64Array([1n, -2n]));
  assert.deepEqual(tensor("int64", [2n ** 62n]).data, new BigInt64Array([2n ** 62n]));
  assert.deepEqual(tensor("bool", [true, false]).data, new Uint8Array([1, 0]));
  assert.deepEqual(Array.from(tensorBytes(tensor("int32", [258]))), [2, 1, 0, 0]);
  assert.throws(() => tensor("float32", [1, 2, 3], [2, 2]), /holds 4 values, got 3/);
  assert.throws(() => tensor("complex64" as never, [1]), /unsupported dtype "complex64"/);
});

test("encoding refuses data that does not match its dtype or shape", () => {
  const bad = (t: unknown): Uint8Array => encodeTensors({ x: t as Tensor });
  assert.throws(
    () => bad({ dtype: "float32", shape: [2], data: new Float64Array(2) }),
    /float32 data must be a Float32Array, got Float64Array/,
  );
  assert.throws(
    () => bad({ dtype: "int64", shape: [2], data: [1, 2] }),
    /int64 data must be a BigInt64Array, got Array/,
  );
  assert.throws(
    () => bad({ dtype: "float32", shape: [3], data: new Float32Array(2) }),
    /shape \[3\] holds 3 values, data has 2/,
  );
  assert.throws(() => bad({ dtype: "float32", shape: [-1], data: new Float32Array(0) }), /non-negative integers/);
  assert.throws(() => bad({ dtype: "float32", shape: [1.5], data: new Float32Array(1) }), /non-negative integers/);
  assert.throws(() => bad({ dtype: "str", shape: [1], data: new Uint8Array(1) }), WireError);
  assert.throws(() => bad(null), /not a \{dtype, shape, data\} object/);
});

test("the decoder refuses malformed messages with the agent's bounds", () => {
  const refuses = (body: Uint8Array, pattern: RegExp): void =>
    assert.throws(
      () => decodeTensors(body),
      (e: unknown) => {
        assert.ok(e instanceof WireError, String(e));
        assert.match((e as Error).message, pattern);
        return true;
      },
    );
  const four = new Uint8Array(4);
  refuses(new TextEncoder().encode("EKT"), /missing EKT1 magic/);
  refuses(new TextEncoder().encode("EKT2\0\0\0\0{}"), /missing EKT1 magic/);
  const big = message("{}");
  new DataView(big.buffer).setUint32(4, MAX_HEADER + 1, true);
  refuses(big, /larger than 1048576/);
  const long = message("{}");
  new DataView(long.buffer).setUint32(4, 3, true);
  refuses(long, /header length exceeds the body/);
  refuses(message("{not json"), /not valid JSON with a 'tensors' list/);
  const latin = message("{}");
  latin.set([0xff, 0xfe], 8); // not UTF-8
  refuses(latin, /not valid JSON/);
  refuses(message({ tensors: {} }), /'tensors' list/);
  refuses(message([1]), /'tensors' list/);
  const many = Array.from({ length: MAX_TENSORS + 1 }, (_, i) => entry(`t${i}`, "uint8", [0], 0, 0));
  refuses(message({ tensors: many }), /1025 tensors in one message; at most 1024/);
  refuses(
    message({ tensors: [{ name: "x", dtype: "uint8", shape: [1] }] }, four),
    /needs name, dtype, shape, offset, nbytes/,
  );
  refuses(message({ tensors: [entry("x", "uint8", ["1"] as never, 0, 1)] }, four), /needs name, dtype/);
  refuses(message({ tensors: [entry("", "uint8", [1], 0, 1)] }, four), /1 to 256 characters/);
  refuses(message({ tensors: [entry("x".repeat(257), "uint8", [1], 0, 1)] }, four), /1 to 256 characters/);
  refuses(message({ tensors: [entry("x", "uint8", [1], 0, 1), entry("x", "uint8", [1], 1, 1)] }, four), /listed twice/);
  refuses(message({ tensors: [entry("x", "object", [1], 0, 1)] }, four), /unsupported dtype "object"/);
  refuses(message({ tensors: [entry("x", "uint8", new Array(33).fill(1), 0, 1)] }, four), /more than 32 dimensions/);
  refuses(message({ tensors: [entry("x", "uint8", [-1], 0, 1)] }, four), /negative dimension/);
  refuses(message({ tensors: [entry("x", "float32", [2], 0, 4)] }, four), /do not match its 4 bytes/);
  refuses(message({ tensors: [entry("x", "uint8", [4], 1, 4)] }, four), /do not match/);
  refuses(message({ tensors: [entry("x", "uint8", [1], -1, 1)] }, four), /do not match/);
  refuses(message({ tensors: [entry("x", "uint8", [2 ** 40, 2 ** 40], 0, 4)] }, four), /do not match/);
  // Entries sharing bytes cannot make the decoder copy more than the payload.
  refuses(
    message({ tensors: [entry("a", "uint8", [4], 0, 4), entry("b", "uint8", [4], 0, 4)] }, four),
    /add up to more than the 4 bytes/,
  );
});

test("a zero dimension makes an empty tensor whatever the others say", () => {
  const { tensors } = decodeTensors(message({ tensors: [entry("x", "float32", [0, 2 ** 52, 2 ** 52], 0, 0)] }));
  assert.deepEqual(tensors.x.shape, [0, 2 ** 52, 2 ** 52]);
  assert.equal(tensors.x.data.length, 0);
});

test("a tensor named __proto__ is a tensor like any other", () => {
  const inputs = { ["__proto__"]: tensor("uint8", [5]) }; // a computed key: an own property, not the prototype
  const { tensors } = decodeTensors(encodeTensors(inputs));
  assert.equal(Object.getPrototypeOf(tensors), Object.prototype);
  assert.deepEqual(Object.keys(tensors), ["__proto__"]);
  assert.deepEqual(tensors["__proto__"].data, new Uint8Array([5]));
});
