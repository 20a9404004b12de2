/** The client's HTTP handling against a small scripted server (the real agent is the contract suite's). */
import assert from "node:assert/strict";
import { createServer, IncomingMessage, Server, ServerResponse } from "node:http";
import { AddressInfo } from "node:net";
import { after, before, test } from "node:test";

import {
  AgentClient,
  AgentConnectionError,
  AgentError,
  AgentTimeoutError,
  CONTENT_TYPE,
  decodeTensors,
  encodeTensors,
  tensor,
  WireError,
} from "../src/index.js";

interface Seen {
  method: string;
  url: string;
  headers: IncomingMessage["headers"];
  body: Buffer;
}

let server: Server;
let baseUrl: string;
const seen: Seen[] = [];
let answer: (req: Seen, res: ServerResponse) => void = () => undefined;

before(async () => {
  server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const s = { method: req.method ?? "", url: req.url ?? "", headers: req.headers, body: Buffer.concat(chunks) };
      seen.push(s);
      answer(s, res);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

after(() => {
  server.closeAllConnections();
  server.close();
});

function json(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  res.writeHead(status, { "Content-Type": "application/json", ...headers });
  res.end(JSON.stringify(body));
}

function last(): Seen {
  return seen[seen.length - 1];
}

test("JSON calls: paths, bodies, the token only when given, no Origin header", async () => {
  answer = (req, res) => json(res, 200, req.url === "/v1/models" ? { models: [{ name: "m" }] } : { ok: req.url });
  const agent = new AgentClient({ baseUrl: baseUrl + "/", token: "s3cret" });
  assert.deepEqual(await agent.health(), { ok: "/v1/health" });
  assert.equal(last().method, "GET");
  assert.equal(last().headers.authorization, "Bearer s3cret");
  assert.equal(last().headers.origin, undefined);
  assert.deepEqual(await agent.models(), [{ name: "m" }]);
  await agent.load("m", { warmup: 3 });
  assert.equal(last().url, "/v1/models/m/load");
  assert.equal(last().headers["content-type"], "application/json");
  assert.deepEqual(JSON.parse(last().body.toString()), { threads: null, providers: null, warmup: 3 });
  await agent.unload("a b/c");
  assert.equal(last().url, "/v1/models/a%20b%2Fc/unload");
  assert.deepEqual(JSON.parse(last().body.toString()), {});
  await agent.annotate(7, { preMs: 1.5 });
  assert.deepEqual(JSON.parse(last().body.toString()), { request_id: 7, pre_ms: 1.5, post_ms: null });
  await new AgentClient({ baseUrl, token: null }).health();
  assert.equal(last().headers.authorization, undefined);
});

test("infer sends and reads binary tensors; the meta is the header less its tensor list", async () => {
  answer = (req, res) => {
    const { tensors } = decodeTensors(new Uint8Array(req.body));
    res.writeHead(200, { "Content-Type": CONTENT_TYPE });
    const y = tensor(
      "float32",
      Array.from(tensors.x.data as Float32Array, (v) => v * 2),
      tensors.x.shape,
    );
    res.end(encodeTensors({ y }, { model: "m", version: "v1", inference_ms: 0.25, request_id: 9 }));
  };
  const agent = new AgentClient({ baseUrl });
  const { outputs, meta } = await agent.infer(
    "m",
    { x: tensor("float32", [1, 2, 3], [1, 3]) },
    { session: "s1", preMs: 2 },
  );
  assert.equal(last().headers["content-type"], CONTENT_TYPE);
  assert.equal(last().headers["x-edgekit-session"], "s1");
  assert.equal(last().headers["x-edgekit-pre-ms"], "2");
  assert.deepEqual(outputs.y, { dtype: "float32", shape: [1, 3], data: new Float32Array([2, 4, 6]) });
  assert.deepEqual(meta, { model: "m", version: "v1", inference_ms: 0.25, request_id: 9 });
  await assert.rejects(agent.infer("m", { x: { dtype: "float32", shape: [2], data: new Float32Array(3) } }), WireError);
});

test("an error status is an AgentError with the agent's status and message", async () => {
  const agent = new AgentClient({ baseUrl });
  answer = (_req, res) => json(res, 400, { error: "input 'x' has shape [1, 5]; the model wants [1, 4]", status: 400 });
  await assert.rejects(agent.infer("m", { x: tensor("float32", [1]) }), (e: unknown) => {
    assert.ok(e instanceof AgentError);
    assert.equal(e.status, 400);
    assert.equal(e.agentMessage, "input 'x' has shape [1, 5]; the model wants [1, 4]");
    assert.equal(e.message, "agent answered 400: input 'x' has shape [1, 5]; the model wants [1, 4]");
    return true;
  });
  answer = (_req, res) => json(res, 503, { error: "queue full", status: 503 }, { "Retry-After": "2" });
  await assert.rejects(
    agent.health(),
    (e: unknown) => e instanceof AgentError && e.status === 503 && e.retryAfter === 2,
  );
  answer = (_req, res) => {
    res.writeHead(502, { "Content-Type": "text/html" });
    res.end("<html>bad gateway</html>");
  };
  await assert.rejects(
    agent.health(),
    (e: unknown) => e instanceof AgentError && e.agentMessage === "<html>bad gateway</html>",
  );
  answer = (_req, res) => {
    res.writeHead(200, { "Content-Type": "application/json" });
    res.end("EKT1 is not JSON");
  };
  await assert.rejects(agent.health(), /the agent's answer is not JSON/);
});

test("a late answer is an AgentTimeoutError; a cancelled call rejects with the caller's reason", async () => {
  answer = (_req, res) => setTimeout(() => json(res, 200, {}), 400);
  const agent = new AgentClient({ baseUrl, timeoutMs: 50 });
  await assert.rejects(agent.health(), (e: unknown) => {
    assert.ok(e instanceof AgentTimeoutError, String(e));
    assert.equal(e.timeoutMs, 50);
    assert.match(e.message, /GET \/v1\/health: no answer within 50 ms/);
    return true;
  });
  assert.deepEqual(await agent.health({ timeoutMs: 5000 }), {});
  assert.deepEqual(await agent.health({ timeoutMs: Infinity }), {}); // no limit, not setTimeout's overflow to 1 ms
  await assert.rejects(agent.load(""), /a model name is a non-empty string/); // a rejection, not a throw
  const controller = new AbortController();
  const call = agent.health({ timeoutMs: 5000, signal: controller.signal });
  controller.abort(new Error("app closed"));
  await assert.rejects(call, /app closed/);
});

test("an agent that is not there is an AgentConnectionError naming the address", async () => {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, "127.0.0.1", resolve));
  const port = (probe.address() as AddressInfo).port;
  await new Promise((resolve) => probe.close(resolve));
  const agent = new AgentClient({ baseUrl: `http://127.0.0.1:${port}` });
  await assert.rejects(agent.health(), (e: unknown) => {
    assert.ok(e instanceof AgentConnectionError, String(e));
    assert.match(e.message, new RegExp(`GET http://127.0.0.1:${port}/v1/health: .*ECONNREFUSED`));
    return true;
  });
});

test("bad options are refused when the client is made", () => {
  assert.throws(() => new AgentClient({} as never), /needs \{ baseUrl/);
  assert.throws(() => new AgentClient({ baseUrl, timeoutMs: -1 }), /timeoutMs must be a number >= 0/);
  assert.throws(() => new AgentClient({ baseUrl, timeoutMs: Number.NaN }), /timeoutMs/);
});
