/** src/api-types.ts is what scripts/gen-api-types.ts makes of on_device_agent/openapi.json, byte for byte. */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { test } from "node:test";

import { generate, generateFromFile, openapiPath, PACKAGE_DIR } from "../scripts/gen-api-types.js";
import type { InferMeta, LoadOptions } from "../src/index.js";

test("src/api-types.ts matches the agent's openapi.json (regenerate: npm run gen-types)", () => {
  const committed = readFileSync(resolve(PACKAGE_DIR, "src", "api-types.ts"), "utf8");
  assert.equal(committed, generateFromFile(openapiPath()), `src/api-types.ts differs from ${openapiPath()}`);
});

test("the client's types come from the schema", () => {
  // Compile-time checks: these assignments stop the build if the schema drops or retypes the fields.
  const meta: InferMeta = { model: "m", version: "v", inference_ms: 1, queue_ms: 0, batch: 1, request_id: 3 };
  const load: LoadOptions = { threads: 2, providers: ["CPUExecutionProvider"], warmup: null };
  assert.equal(meta.request_id, 3);
  assert.equal(load.threads, 2);
});

test("the generator refuses a schema it cannot type rather than guess", () => {
  const api = (schema: object): object => ({ components: { schemas: { X: schema } }, paths: {} });
  assert.throws(
    () => generate(api({ oneOf: [{ type: "string" }] }) as never),
    /X: schema keyword oneOf is not supported/,
  );
  assert.throws(() => generate(api({ type: "file" }) as never), /X: type "file" is not supported/);
  assert.throws(() => generate(api({ $ref: "#/definitions/Y" }) as never), /not a component schema/);
  const text = generate(
    api({ type: "object", required: ["a"], properties: { a: { type: "integer", nullable: true } } }) as never,
  );
  assert.match(text, /X: \{\n    a: number \| null;\n  \};/);
});
