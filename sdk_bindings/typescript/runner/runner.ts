/**
 * The SDK contract runner: `node dist/runner/runner.js SCENARIO.json` runs the scenario's steps with the SDK and
 * prints one JSON document `{"results": [...]}` (the protocol of tests/harness/sdk_contract.py; the reference is
 * tests/sdk_runners/python_runner.py). It exits 0 even when steps failed; a step's failure is its result.
 */
import { readFileSync } from "node:fs";
import { performance } from "node:perf_hooks";

import { nodeFetch } from "../node/transport.js";
import { AgentClient, AgentError, AnyTensor, isDType, Tensor, tensorBytes, tensorFromBytes } from "../src/index.js";

interface JsonTensor {
  dtype: string;
  shape: number[];
  b64: string;
}

type Step = { op: string; token?: string | null; [key: string]: unknown };

interface Scenario {
  host: string;
  port: number;
  token?: string | null;
  steps: Step[];
}

type Outcome = { ok: true; result: unknown } | { ok: false; status: number; message: string };

function fromJson(inputs: unknown): Record<string, Tensor> {
  const out: [string, Tensor][] = [];
  for (const [name, t] of Object.entries((inputs ?? {}) as Record<string, JsonTensor>)) {
    if (!isDType(t.dtype)) throw new Error(`input ${name}: unsupported dtype ${t.dtype}`);
    const raw = Buffer.from(t.b64, "base64");
    out.push([name, tensorFromBytes(t.dtype, t.shape, new Uint8Array(raw.buffer, raw.byteOffset, raw.byteLength))]);
  }
  return Object.fromEntries(out);
}

function toJson(tensors: Record<string, AnyTensor>): Record<string, JsonTensor> {
  const out: [string, JsonTensor][] = [];
  for (const [name, t] of Object.entries(tensors)) {
    const bytes = tensorBytes(t);
    const b64 = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("base64");
    out.push([name, { dtype: t.dtype, shape: t.shape, b64 }]);
  }
  return Object.fromEntries(out);
}

function failure(e: unknown): Outcome {
  if (e instanceof AgentError) return { ok: false, status: e.status, message: e.agentMessage };
  return { ok: false, status: 0, message: e instanceof Error ? e.message : String(e) };
}

class Runner {
  private readonly clients = new Map<string | null, AgentClient>();

  constructor(
    private readonly scenario: Scenario,
    private readonly fetchFn?: typeof fetch,
  ) {}

  client(step: Step): AgentClient {
    const token = "token" in step ? (step.token ?? null) : (this.scenario.token ?? null);
    let c = this.clients.get(token);
    if (!c) {
      const baseUrl = `http://${this.scenario.host}:${this.scenario.port}`;
      c = new AgentClient({ baseUrl, token, ...(this.fetchFn ? { fetch: this.fetchFn } : {}) });
      this.clients.set(token, c);
    }
    return c;
  }

  async step(step: Step): Promise<unknown> {
    const agent = this.client(step);
    const model = step.model as string;
    switch (step.op) {
      case "health":
        return agent.health();
      case "models":
        return agent.models();
      case "load":
        return agent.load(model);
      case "unload":
        return agent.unload(model);
      case "annotate":
        return agent.annotate(step.request_id as number, {
          preMs: step.pre_ms as number | null | undefined,
          postMs: step.post_ms as number | null | undefined,
        });
      case "infer": {
        const { outputs, meta } = await agent.infer(model, fromJson(step.inputs));
        return { outputs: toJson(outputs), meta };
      }
      case "infer_loop": {
        const inputs = fromJson(step.inputs);
        const errors: string[] = [];
        const versions: unknown[] = [];
        let ok = 0;
        for (let i = 0; i < (step.count as number); i++) {
          try {
            const { meta } = await agent.infer(model, inputs);
            ok += 1;
            if (!versions.includes(meta.version)) versions.push(meta.version);
          } catch (e) {
            if (!(e instanceof AgentError)) throw e; // as the reference: only the agent's answers are counted
            errors.push(e.agentMessage);
          }
        }
        return { ok, errors, versions };
      }
      case "overhead": {
        const inputs = fromJson(step.inputs);
        const warmup = (step.warmup as number | undefined) ?? 10;
        for (let i = 0; i < warmup; i++) await agent.infer(model, inputs);
        const clientMs: number[] = [];
        const inferenceMs: unknown[] = [];
        for (let i = 0; i < (step.runs as number); i++) {
          const t0 = performance.now();
          const { meta } = await agent.infer(model, inputs);
          clientMs.push(performance.now() - t0);
          inferenceMs.push(meta.inference_ms);
        }
        return { client_ms: clientMs, inference_ms: inferenceMs };
      }
      default:
        throw new Error(`unknown op ${JSON.stringify(step.op)}`);
    }
  }

  async run(): Promise<Outcome[]> {
    const results: Outcome[] = [];
    for (const step of this.scenario.steps) {
      try {
        results.push({ ok: true, result: await this.step(step) });
      } catch (e) {
        results.push(failure(e));
      }
    }
    return results;
  }
}

async function main(argv: string[]): Promise<number> {
  // --transport node: the Node-only transport (edgekit-sdk/node); fetch (the default): the global fetch
  const transport = argv[0] === "--transport" ? argv[1] : "fetch";
  const rest = argv[0] === "--transport" ? argv.slice(2) : argv;
  if (rest.length !== 1 || !["fetch", "node"].includes(transport)) {
    process.stderr.write("usage: node runner.js [--transport fetch|node] SCENARIO.json\n");
    return 2;
  }
  const scenario = JSON.parse(readFileSync(rest[0], "utf8")) as Scenario;
  const results = await new Runner(scenario, transport === "node" ? nodeFetch() : undefined).run();
  process.stdout.write(JSON.stringify({ results }) + "\n");
  return 0;
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (e: unknown) => {
    process.stderr.write(`runner: ${e instanceof Error ? e.stack : String(e)}\n`);
    process.exitCode = 1;
  },
);
