import assert from "node:assert/strict";
import { test } from "node:test";

import { fromFloat16Bit, fromFloat16Bits, tensor, toFloat16Bit, toFloat16Bits } from "../src/index.js";

const CASES: [number, number][] = [
  [1, 0x3c00],
  [-0.5, 0xb800],
  [0, 0x0000],
  [-0, 0x8000],
  [0.1, 0x2e66],
  [65504, 0x7bff], // the largest half
  [65519.99, 0x7bff],
  [65520, 0x7c00], // halfway to the next binade: rounds to infinity
  [Infinity, 0x7c00],
  [-Infinity, 0xfc00],
  [2 ** -14, 0x0400], // the smallest normal
  [2 ** -24, 0x0001], // the smallest subnormal
  [2 ** -25, 0x0000], // a tie: to even (zero)
  [3 * 2 ** -25, 0x0002], // a tie: to even (2)
  [2 ** -14 - 2 ** -25, 0x0400], // a subnormal rounding up into the normals
  [1 + 2 ** -11, 0x3c00], // a tie: to even
  [1 + 3 * 2 ** -11, 0x3c02], // a tie: to even
  [1 + 2 ** -11 + 2 ** -40, 0x3c01], // just above a tie (double rounding through float32 would give 0x3c00)
  [1e-10, 0x0000],
  [1e10, 0x7c00],
];

test("numbers round to float16 bits to nearest, ties to even, straight from the double", () => {
  for (const [value, bits] of CASES) assert.equal(toFloat16Bit(value), bits, `${value}`);
  assert.equal(toFloat16Bit(NaN), 0x7e00);
  assert.deepEqual(toFloat16Bits([1, -0.5]), new Uint16Array([0x3c00, 0xb800]));
});

test("float16 bits give back their exact values", () => {
  for (let bits = 0; bits < 0x10000; bits++) {
    const v = fromFloat16Bit(bits);
    if (Number.isNaN(v)) assert.ok((bits & 0x7c00) === 0x7c00 && (bits & 0x3ff) !== 0);
    else assert.equal(toFloat16Bit(v), bits, `0x${bits.toString(16)}`);
  }
  assert.deepEqual(
    fromFloat16Bits(new Uint16Array([0x3c00, 0xfc00, 0x0001])),
    new Float32Array([1, -Infinity, 2 ** -24]),
  );
});

test("tensor('float16', numbers) rounds them to half precision", () => {
  assert.deepEqual(tensor("float16", [1, -0.5, 0.1]).data, new Uint16Array([0x3c00, 0xb800, 0x2e66]));
});
