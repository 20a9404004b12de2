/**
 * Writes src/api-types.ts from the agent's OpenAPI document (on_device_agent/openapi.json), offline.
 *
 *   node dist/scripts/gen-api-types.js           prints the generated file
 *   node dist/scripts/gen-api-types.js --write   writes src/api-types.ts
 *
 * `EDGEKIT_OPENAPI` names another openapi.json. test/api-types.test.ts regenerates the file and fails when it
 * differs from the committed one, so the SDK's types cannot drift from the agent's schema.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type Obj = { [key: string]: Json };

/** Schema keywords that constrain values but do not change the TypeScript type. */
const IGNORED = new Set(["description", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "pattern"]);
IGNORED.add("default").add("maxItems").add("minItems").add("maxLength").add("minLength").add("format").add("example");
const METHODS = ["get", "put", "post", "delete", "patch"];

/** The package folder (dist/scripts/ is two levels below it once compiled). */
export const PACKAGE_DIR = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");

export function openapiPath(): string {
  return process.env.EDGEKIT_OPENAPI || resolve(PACKAGE_DIR, "..", "..", "on_device_agent", "openapi.json");
}

function isObj(v: Json | undefined): v is Obj {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function doc(text: Json | undefined, indent: string): string {
  if (typeof text !== "string" || !text) return "";
  return `${indent}/** ${text.replace(/\*\//g, "*\\/").replace(/\s*\n\s*/g, " ")} */\n`;
}

function key(name: string): string {
  return /^[A-Za-z_$][A-Za-z0-9_$]*$/.test(name) ? name : JSON.stringify(name);
}

/** One schema -> a TypeScript type; `where` names it in errors (an unsupported keyword stops the generator). */
export function schemaType(schema: Json | undefined, indent: string, where: string): string {
  if (schema === undefined || (isObj(schema) && Object.keys(schema).every((k) => IGNORED.has(k)))) return "unknown";
  if (!isObj(schema)) throw new Error(`${where}: a schema must be an object`);
  for (const k of Object.keys(schema)) {
    const known = ["type", "$ref", "properties", "required", "items", "additionalProperties", "nullable", "enum"];
    if (!IGNORED.has(k) && !known.includes(k)) throw new Error(`${where}: schema keyword ${k} is not supported`);
  }
  let t: string;
  const ref = schema.$ref;
  if (typeof ref === "string") {
    const m = /^#\/components\/schemas\/([A-Za-z0-9_]+)$/.exec(ref);
    if (!m) throw new Error(`${where}: $ref ${ref} is not a component schema`);
    t = `Schemas[${JSON.stringify(m[1])}]`;
  } else if (Array.isArray(schema.enum)) {
    t = schema.enum.map((v) => JSON.stringify(v)).join(" | ");
  } else {
    switch (schema.type) {
      case "string":
        t = "string";
        break;
      case "integer":
      case "number":
        t = "number";
        break;
      case "boolean":
        t = "boolean";
        break;
      case "array":
        t = `Array<${schemaType(schema.items, indent, where + ".items")}>`;
        break;
      case "object":
      case undefined:
        t = objectType(schema, indent, where);
        break;
      default:
        throw new Error(`${where}: type ${JSON.stringify(schema.type)} is not supported`);
    }
  }
  return schema.nullable === true ? `${t} | null` : t;
}

function objectType(schema: Obj, indent: string, where: string): string {
  const props = isObj(schema.properties) ? schema.properties : {};
  const required = Array.isArray(schema.required) ? schema.required : [];
  const inner = indent + "  ";
  const lines: string[] = [];
  for (const [name, sub] of Object.entries(props)) {
    const opt = required.includes(name) ? "" : "?";
    const d = isObj(sub) ? doc(sub.description, inner) : "";
    lines.push(`${d}${inner}${key(name)}${opt}: ${schemaType(sub, inner, `${where}.${name}`)};\n`);
  }
  const extra = schema.additionalProperties;
  if (extra === undefined ? lines.length === 0 : extra !== false) {
    const value = extra === undefined || extra === true ? "unknown" : schemaType(extra, inner, where + ".*");
    lines.push(`${inner}[key: string]: ${value};\n`);
  }
  return lines.length ? `{\n${lines.join("")}${indent}}` : "Record<string, never>";
}

function content(body: Json | undefined, type: string): Json | undefined {
  if (!isObj(body) || !isObj(body.content)) return undefined;
  const c = body.content[type];
  return isObj(c) ? (c.schema ?? {}) : undefined;
}

/** The whole src/api-types.ts for one OpenAPI document. */
export function generate(api: Obj): string {
  const out: string[] = [
    "// Generated from on_device_agent/openapi.json by scripts/gen-api-types.ts: do not edit.\n",
    "// Regenerate with `npm run gen-types`; test/api-types.test.ts fails when this file and the schema differ.\n\n",
    "/** The component schemas (`#/components/schemas`). */\n",
    "export interface Schemas {\n",
  ];
  const schemas = isObj(api.components) && isObj(api.components.schemas) ? api.components.schemas : {};
  for (const [name, s] of Object.entries(schemas)) {
    out.push(`${isObj(s) ? doc(s.description, "  ") : ""}  ${key(name)}: ${schemaType(s, "  ", name)};\n`);
  }
  out.push("}\n\n");
  out.push("/** Every operation by its operationId: method, path, path parameters, JSON request and 200 body. */\n");
  out.push("export interface Operations {\n");
  const paths = isObj(api.paths) ? api.paths : {};
  for (const [path, item] of Object.entries(paths)) {
    if (!isObj(item)) continue;
    for (const method of METHODS) {
      const op = item[method];
      if (!isObj(op)) continue;
      const id = op.operationId;
      if (typeof id !== "string") throw new Error(`${method.toUpperCase()} ${path}: no operationId`);
      const where = `${id}`;
      const params = (Array.isArray(op.parameters) ? op.parameters : []).filter(isObj);
      const pathParams = params.filter((p) => p.in === "path").map((p) => `${key(String(p.name))}: string`);
      const responses = isObj(op.responses) ? op.responses : {};
      const ok = responses["200"];
      const okJson = content(ok, "application/json");
      const okText = content(ok, "text/plain");
      const reqJson = content(op.requestBody, "application/json");
      const codes = Object.keys(responses)
        .filter((c) => c !== "200")
        .sort();
      const binary = content(op.requestBody, "application/x-edgekit-tensors") !== undefined;
      out.push(doc(`${op.summary ?? ""} (${method.toUpperCase()} ${path})`, "  "));
      out.push(`  ${key(id)}: {\n`);
      out.push(`    method: ${JSON.stringify(method.toUpperCase())};\n`);
      out.push(`    path: ${JSON.stringify(path)};\n`);
      out.push(`    pathParams: ${pathParams.length ? `{ ${pathParams.join("; ")} }` : "Record<string, never>"};\n`);
      out.push(`    request: ${reqJson === undefined ? "never" : schemaType(reqJson, "    ", where + ".request")};\n`);
      const resp = okJson !== undefined ? schemaType(okJson, "    ", where + ".response") : okText ? "string" : "never";
      out.push(`    response: ${resp};\n`);
      out.push(`    /** Whether the request and the answer may use the binary tensor encoding. */\n`);
      out.push(`    binary: ${binary};\n`);
      out.push(`    errorStatus: ${codes.length ? codes.join(" | ") : "never"};\n`);
      out.push("  };\n");
    }
  }
  out.push("}\n");
  return out.join("");
}

export function generateFromFile(path: string = openapiPath()): string {
  return generate(JSON.parse(readFileSync(path, "utf8")) as Obj);
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const text = generateFromFile();
  if (process.argv.includes("--write")) {
    writeFileSync(resolve(PACKAGE_DIR, "src", "api-types.ts"), text);
  } else {
    process.stdout.write(text);
  }
}
