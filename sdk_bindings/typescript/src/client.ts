/**
 * The agent's HTTP API over the fetch API: Node 20 and browsers alike, no other dependency.
 * Node's fetch keeps connections alive between calls, so an app's requests reuse one connection.
 */
import type { Operations } from "./api-types.js";
import { AgentConnectionError, AgentError, AgentTimeoutError } from "./errors.js";
import { AnyTensor, CONTENT_TYPE, decodeTensors, encodeTensors, Tensor } from "./wire.js";

export interface AgentClientOptions {
  /** Where the agent listens, e.g. `http://127.0.0.1:8765` (its port is in `ROOT/agent/state.json`). */
  baseUrl: string;
  /** Sent as `Authorization: Bearer TOKEN`: needed for load and unload, on loopback too (`ROOT/agent/token`). */
  token?: string | null;
  /** A call's limit for the whole exchange, answer included, in milliseconds (default 60000; 0 or Infinity: none). */
  timeoutMs?: number;
  /** The fetch to use (default: the global one). */
  fetch?: typeof fetch;
}

/** Per call: its own timeout, and a signal to cancel it (it then rejects with the signal's reason). */
export interface CallOptions {
  timeoutMs?: number;
  signal?: AbortSignal;
}

export interface InferOptions extends CallOptions {
  /** A stream's session id (a model built with `--stream`): the agent keeps and feeds its state. */
  session?: string;
  /** Pre-processing time the app spent on this request, recorded with it. */
  preMs?: number;
}

export type LoadOptions = Operations["loadModel"]["request"] & CallOptions;

/** The infer answer's metadata: model, version, inference_ms, queue_ms, batch, request_id, session. */
export type InferMeta = Omit<Operations["infer"]["response"], "outputs"> & { [key: string]: unknown };

export interface InferResult {
  outputs: Record<string, AnyTensor>;
  meta: InferMeta;
}

export type Health = Operations["health"]["response"];
export type ModelInfo = NonNullable<Operations["listModels"]["response"]["models"]>[number];

/** One request of `request()`: its body (bytes, or a string such as JSON), their type, more headers. */
export interface RequestOptions extends CallOptions {
  body?: Uint8Array | string;
  contentType?: string;
  headers?: Record<string, string>;
}

/** A client of one agent. Every call returns a promise; failures reject with AgentError (the agent's status and
 * message), AgentTimeoutError, AgentConnectionError, or WireError (a malformed binary answer). */
export class AgentClient {
  readonly baseUrl: string;
  readonly token: string | null;
  readonly timeoutMs: number;
  private readonly fetchFn: typeof fetch;

  constructor(options: AgentClientOptions) {
    if (typeof options?.baseUrl !== "string") throw new TypeError("AgentClient needs { baseUrl: 'http://HOST:PORT' }");
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.token = options.token ?? null;
    this.timeoutMs = options.timeoutMs ?? 60000;
    if (!(this.timeoutMs >= 0)) throw new TypeError(`timeoutMs must be a number >= 0, got ${options.timeoutMs}`);
    const f = options.fetch ?? globalThis.fetch;
    if (typeof f !== "function") throw new TypeError("no fetch API here: pass { fetch } to AgentClient");
    this.fetchFn = f.bind(globalThis);
  }

  /** Agent version, device, runtimes, installed models. */
  async health(options?: CallOptions): Promise<Health> {
    return this.requestJson("GET", "/v1/health", undefined, options);
  }

  /** The installed models, each with name, version, versions, backend, inputs, outputs, loaded... */
  async models(options?: CallOptions): Promise<ModelInfo[]> {
    const answer: Operations["listModels"]["response"] = await this.requestJson(
      "GET",
      "/v1/models",
      undefined,
      options,
    );
    return answer.models ?? [];
  }

  /** Load (or reload) the current version and run `warmup` inferences (default: the agent's setting). */
  async load(model: string, options: LoadOptions = {}): Promise<Operations["loadModel"]["response"]> {
    const { threads = null, providers = null, warmup = null, ...call } = options;
    return this.requestJson("POST", `/v1/models/${enc(model)}/load`, { threads, providers, warmup }, call);
  }

  async unload(model: string, options?: CallOptions): Promise<Operations["unloadModel"]["response"]> {
    return this.requestJson("POST", `/v1/models/${enc(model)}/unload`, {}, options);
  }

  /** Run the model on `inputs` (binary tensors both ways); the agent loads it on first use. */
  async infer(model: string, inputs: Record<string, Tensor>, options: InferOptions = {}): Promise<InferResult> {
    const headers: Record<string, string> = {};
    if (options.session !== undefined) headers["X-Edgekit-Session"] = options.session;
    if (options.preMs !== undefined) headers["X-Edgekit-Pre-Ms"] = String(options.preMs);
    const body = encodeTensors(inputs);
    const data = await this.request("POST", `/v1/models/${enc(model)}/infer`, {
      timeoutMs: options.timeoutMs,
      signal: options.signal,
      body,
      contentType: CONTENT_TYPE,
      headers,
    });
    const { tensors, header } = decodeTensors(data);
    const meta: InferMeta = { ...header };
    delete meta.tensors;
    return { outputs: tensors, meta };
  }

  /** Record the pre/post-processing time the app spent around a request (`meta.request_id` of its infer). */
  async annotate(
    requestId: number,
    times: { preMs?: number | null; postMs?: number | null } & CallOptions = {},
  ): Promise<Operations["annotate"]["response"]> {
    const { preMs = null, postMs = null, ...call } = times;
    return this.requestJson(
      "POST",
      "/v1/telemetry/annotate",
      { request_id: requestId, pre_ms: preMs, post_ms: postMs },
      call,
    );
  }

  /** Any other JSON route of the agent (see its /openapi.json): `body` is sent as JSON, the answer parsed. */
  async requestJson<T = unknown>(method: string, path: string, body?: unknown, options: CallOptions = {}): Promise<T> {
    const sent = body === undefined ? undefined : JSON.stringify(body);
    const data = await this.request(method, path, { ...options, body: sent, contentType: "application/json" });
    if (data.byteLength === 0) return {} as T;
    try {
      return JSON.parse(new TextDecoder().decode(data)) as T;
    } catch {
      throw new AgentConnectionError(`${method} ${path}: the agent's answer is not JSON`);
    }
  }

  /** One exchange: the answer's body, or a rejection with one of the SDK's errors. */
  async request(method: string, path: string, sent: RequestOptions = {}): Promise<Uint8Array> {
    const headers: Record<string, string> = { Accept: "application/json", ...sent.headers };
    if (sent.body !== undefined) headers["Content-Type"] = sent.contentType ?? "application/octet-stream";
    if (this.token) headers.Authorization = `Bearer ${this.token}`;
    const ms = sent.timeoutMs ?? this.timeoutMs;
    const controller = new AbortController();
    let timedOut = false;
    // setTimeout takes at most 2^31 - 1 ms (about 24 days); a longer limit is none, as 0 is
    const timer = ms > 0 && ms < 2 ** 31 ? setTimeout(() => ((timedOut = true), controller.abort()), ms) : undefined;
    const outer = sent.signal;
    const cancel = (): void => controller.abort(outer?.reason);
    if (outer?.aborted) cancel();
    outer?.addEventListener("abort", cancel, { once: true });
    let status: number;
    let data: Uint8Array;
    let retryAfter: string | null;
    try {
      const res = await this.fetchFn(this.baseUrl + path, {
        method,
        headers,
        body: sent.body as BodyInit | undefined,
        signal: controller.signal,
      });
      status = res.status;
      retryAfter = res.headers.get("Retry-After");
      data = new Uint8Array(await res.arrayBuffer());
    } catch (e) {
      if (timedOut) throw new AgentTimeoutError(`${method} ${path}`, ms);
      if (outer?.aborted) throw outer.reason ?? e;
      throw new AgentConnectionError(`${method} ${this.baseUrl}${path}: ${describe(e)}`, { cause: e });
    } finally {
      clearTimeout(timer);
      outer?.removeEventListener("abort", cancel);
    }
    if (status >= 400) {
      const text = new TextDecoder().decode(data);
      let message = text.slice(0, 200);
      try {
        const parsed = JSON.parse(text) as { error?: unknown };
        if (typeof parsed?.error === "string") message = parsed.error;
      } catch {
        // not JSON (a proxy's page, for example): its start is the message
      }
      const wait = retryAfter === null ? undefined : Number(retryAfter);
      throw new AgentError(status, message, wait !== undefined && Number.isFinite(wait) ? wait : undefined);
    }
    return data;
  }
}

function enc(model: string): string {
  if (typeof model !== "string" || model === "") throw new TypeError("a model name is a non-empty string");
  return encodeURIComponent(model);
}

function describe(e: unknown): string {
  const cause = (e as { cause?: { message?: unknown } })?.cause;
  if (cause && typeof cause.message === "string") return cause.message;
  return e instanceof Error ? e.message : String(e);
}
