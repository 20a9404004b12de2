/** The library (dist/src) imports only its own modules: nothing of Node's, so it runs in browsers as is. */
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { resolve } from "node:path";
import { test } from "node:test";

import { PACKAGE_DIR } from "../scripts/gen-api-types.js";

test("the compiled library imports nothing outside itself", () => {
  const dir = resolve(PACKAGE_DIR, "dist", "src");
  const files = readdirSync(dir).filter((f) => f.endsWith(".js"));
  assert.ok(files.includes("index.js") && files.includes("client.js"), files.join(" "));
  for (const f of files) {
    const text = readFileSync(resolve(dir, f), "utf8");
    const statements = /^(?:(?:import|export)\b[^;]*?\bfrom\s*|import\s*)["']([^"']+)["'];$/gm;
    const specifiers = [...text.matchAll(statements)].map((m) => m[1]);
    if (f === "index.js") assert.ok(specifiers.includes("./client.js"), `the pattern finds no import in ${f}`);
    for (const s of specifiers) assert.match(s, /^\.\/[a-z0-9-]+\.js$/, `${f} imports ${s}`);
    assert.doesNotMatch(text, /\b(require\(|import\(|process\.|Buffer\b)/, `${f} uses a Node global`);
  }
});
