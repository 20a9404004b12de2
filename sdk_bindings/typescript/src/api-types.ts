// Generated from on_device_agent/openapi.json by scripts/gen-api-types.ts: do not edit.
// Regenerate with `npm run gen-types`; test/api-types.test.ts fails when this file and the schema differ.

/** The component schemas (`#/components/schemas`). */
export interface Schemas {
  Error: {
    error: string;
    status: number;
  };
  Tensor: {
    dtype?: string;
    shape?: Array<number>;
    data: Array<unknown>;
  };
  Latency: {
    p50?: number;
    p90?: number;
    p99?: number;
    mean?: number;
    min?: number;
    max?: number;
    stdev?: number;
    iqr?: number;
  };
  BenchReport: {
    backend: string;
    precision?: string;
    profile?: string;
    /** what really ran (the provider that executed most nodes) */
    accelerator: string;
    accelerators_requested?: Array<string>;
    accelerators_active?: Array<string>;
    /** nodes per accelerator, from one profiled run */
    placement?: {
      [key: string]: number;
    };
    threads: number;
    runtime?: string;
    runtime_version: string;
    init_ms: number;
    first_inference_ms: number;
    warmup?: number;
    runs: number;
    latency_ms: Schemas["Latency"];
    peak_rss_mb: number;
    device: {
      [key: string]: unknown;
    };
    warnings?: Array<string>;
  };
}

/** Every operation by its operationId: method, path, path parameters, JSON request and 200 body. */
export interface Operations {
  /** Agent version, device, runtimes, installed models (GET /v1/health) */
  health: {
    method: "GET";
    path: "/v1/health";
    pathParams: Record<string, never>;
    request: never;
    response: {
      [key: string]: unknown;
    };
    /** Whether the request and the answer may use the binary tensor encoding. */
    binary: false;
    errorStatus: 401 | 403 | 431 | 503;
  };
  /** This document (GET /openapi.json) */
  openapi: {
    method: "GET";
    path: "/openapi.json";
    pathParams: Record<string, never>;
    request: never;
    response: {
      [key: string]: unknown;
    };
    /** Whether the request and the answer may use the binary tensor encoding. */
    binary: false;
    errorStatus: 403 | 404 | 431 | 503;
  };
  /** Installed models with current version and whether loaded (GET /v1/models) */
  listModels: {
    method: "GET";
    path: "/v1/models";
    pathParams: Record<string, never>;
    request: never;
    response: {
      /** each with name, version, versions, backend, precision, inputs, outputs, loaded, split and breakers ({version: {state: closed|open|half_open, reason, requests, error_rate, p99_ms}}) */
      models?: Array<{
        [key: string]: unknown;
      }>;
      /** models whose files cannot be read (skipped; each with name and error) */
      unreadable?: Array<{
        name?: string;
        error?: string;
      }>;
    };
    /** Whether the request and the answer may use the binary tensor encoding. */
    binary: false;
    errorStatus: 403 | 431 | 503;
  };
  /** Load (or reload) the current version (POST /v1/models/{name}/load) */
  loadModel: {
    method: "POST";
    path: "/v1/models/{name}/load";
    pathParams: { name: string };
    request: {
      /** at most 4 x the device's CPU count */
      threads?: number | null;
      providers?: Array<string> | null;
      /** inferences run after loading (default: the agent's --warmup-on-load); at most 1000, and at most 30 s of them */
      warmup?: number | null;
    };
    response: {
      [key: string]: unknown;
    };
    /** Whether the request and the answer may use the binary tensor encoding. */
    binary: false;
    errorStatus: 400 | 401 | 403 | 404 | 409 | 415 | 431 | 500 | 501 | 503;
  };
  /** Unload (POST /v1/models/{name}/unload) */
  unloadModel: {
    method: "POST";
    path: "/v1/models/{name}/unload";
    pathParams: { name: string };
    request: never;
    response: {
      [key: string]: unknown;
    };
    /** Whether the request and the answer may use the binary tensor encoding. */
    binary: false;
    errorStatus: 400 | 401 | 403 | 404 | 415 | 431 | 503;
  };
  /** Run the model (loads it on first use) (POST /v1/models/{name}/infer) */
  infer: {
    method: "POST";
    path: "/v1/models/{name}/infer";
    pathParams: { name: string };
    request: {
      inputs: {
        [key: string]: Schemas["Tensor"];
      };
      /** as the X-Edgekit-Session header */
      session?: string;
    };
    response: {
      outputs?: {
        [key: string]: Schemas["Tensor"];
      };
      inference_ms?: number;
      queue_ms?: number;
      model?: string;
      version?: string;
      /** id of the telemetry record (for /v1/telemetry/annotate) */
      request_id?: number;
      /** requests run together in this request's batch (1 unless the agent batches: --batch-window-ms, for a model whose batch dimension is dynamic) */
      batch?: number;
      /** with a session: its id, the step this request was in it (1 = the first, from the initial state) and, when the stored state was dropped, why (`reset`) */
      session?: {
        id?: string;
        step?: number;
        reset?: string;
      };
    };
    /** Whether the request and the answer may use the binary tensor encoding. */
    binary: true;
    errorStatus: 400 | 403 | 404 | 409 | 415 | 431 | 500 | 501 | 503;
  };
  /** Benchmark the current version in a fresh process on the device (POST /v1/models/{name}/bench) */
  bench: {
    method: "POST";
    path: "/v1/models/{name}/bench";
    pathParams: { name: string };
    request: {
      runs?: number;
      warmup?: number;
      /** at most 4 x the device's CPU count */
      threads?: number | null;
      providers?: Array<string> | null;
      timeout_s?: number;
    };
    response: Schemas["BenchReport"];
    /** Whether the request and the answer may use the binary tensor encoding. */
    binary: false;
    errorStatus: 400 | 401 | 403 | 404 | 409 | 415 | 431 | 500 | 501 | 503 | 504;
  };
  /** Per-layer profile of the current version with the runtime's own profiler, in a fresh process on the device (POST /v1/models/{name}/profile) */
  profile: {
    method: "POST";
    path: "/v1/models/{name}/profile";
    pathParams: { name: string };
    request: {
      runs?: number;
      warmup?: number;
      /** at most 4 x the device's CPU count */
      threads?: number | null;
      providers?: Array<string> | null;
      timeout_s?: number;
    };
    response: {
      schema: "edgekit.profile/1";
      nodes: Array<{
        [key: string]: unknown;
      }>;
      profiler: {
        [key: string]: unknown;
      };
      end_to_end_ms: {
        [key: string]: unknown;
      };
      memory: {
        [key: string]: unknown;
      };
    };
    /** Whether the request and the answer may use the binary tensor encoding. */
    binary: false;
    errorStatus: 400 | 401 | 403 | 404 | 409 | 415 | 431 | 500 | 501 | 503 | 504;
  };
  /** Serve the previous kept version again (stepping back through installs), or a chosen kept version (POST /v1/models/{name}/rollback) */
  rollback: {
    method: "POST";
    path: "/v1/models/{name}/rollback";
    pathParams: { name: string };
    request: {
      /** a kept version to serve (default: the one installed before the current) */
      version?: string;
    };
    response: {
      [key: string]: unknown;
    };
    /** Whether the request and the answer may use the binary tensor encoding. */
    binary: false;
    errorStatus: 400 | 401 | 403 | 404 | 409 | 415 | 431 | 503;
  };
  /** Begin or resume an upload: send manifest.json; answers the files still to send. Files the device already holds under the same sha256 are linked (reused); partly received files are reported with their size and the sha256 of what arrived, so the client can resume at that byte (POST /v1/bundles/{name}/{version}) */
  beginUpload: {
    method: "POST";
    path: "/v1/bundles/{name}/{version}";
    pathParams: { name: string; version: string };
    request: {
      id?: string;
      files: Array<{
        name: string;
        size: number;
        sha256: string;
      }>;
    };
    response: {
      installed?: boolean;
      missing?: Array<string>;
    };
    /** Whether the request and the answer may use the binary tensor encoding. */
    binary: false;
    errorStatus: 400 | 401 | 403 | 415 | 431 | 503 | 507;
  };
  /** Send one file; verified against the manifest's size and sha256 before it is kept (PUT /v1/bundles/{name}/{version}/files/{file}) */
  putFile: {
    method: "PUT";
    path: "/v1/bundles/{name}/{version}/files/{file}";
    pathParams: { name: string; version: string; file: string };
    request: never;
    response: {
      [key: string]: unknown;
    };
    /** Whether the request and the answer may use the binary tensor encoding. */
    binary: false;
    errorStatus: 400 | 401 | 403 | 404 | 409 | 411 | 415 | 422 | 431 | 503 | 507;
  };
  /** Verify all files again, install atomically, switch the model to this version (POST /v1/bundles/{name}/{version}/commit) */
  commit: {
    method: "POST";
    path: "/v1/bundles/{name}/{version}/commit";
    pathParams: { name: string; version: string };
    request: never;
    response: {
      [key: string]: unknown;
    };
    /** Whether the request and the answer may use the binary tensor encoding. */
    binary: false;
    errorStatus: 400 | 401 | 403 | 409 | 415 | 422 | 431 | 503 | 507;
  };
  /** Prometheus exposition (text format 0.0.4): latency and queue histograms, requests by outcome, model loads, telemetry health (GET /metrics) */
  metrics: {
    method: "GET";
    path: "/metrics";
    pathParams: Record<string, never>;
    request: never;
    response: string;
    /** Whether the request and the answer may use the binary tensor encoding. */
    binary: false;
    errorStatus: 403 | 431 | 503;
  };
  /** Recorded requests, events and device context after the caller's cursors (oldest first); pulling twice with the same cursors returns the same rows (GET /v1/telemetry) */
  pullTelemetry: {
    method: "GET";
    path: "/v1/telemetry";
    pathParams: Record<string, never>;
    request: never;
    response: {
      store_id: string;
      columns: Array<string>;
      records: Array<Array<unknown>>;
      events: Array<Array<unknown>>;
      context: Array<Array<unknown>>;
      more: boolean;
      oldest_id?: number | null;
    };
    /** Whether the request and the answer may use the binary tensor encoding. */
    binary: false;
    errorStatus: 400 | 403 | 404 | 431 | 503;
  };
  /** State of the device's telemetry store (GET /v1/telemetry/status) */
  telemetryStatus: {
    method: "GET";
    path: "/v1/telemetry/status";
    pathParams: Record<string, never>;
    request: never;
    response: {
      [key: string]: unknown;
    };
    /** Whether the request and the answer may use the binary tensor encoding. */
    binary: false;
    errorStatus: 403 | 404 | 431 | 503;
  };
  /** Add the pre/post-processing times an app measured around a request (POST /v1/telemetry/annotate) */
  annotate: {
    method: "POST";
    path: "/v1/telemetry/annotate";
    pathParams: Record<string, never>;
    request: {
      request_id: number;
      pre_ms?: number;
      post_ms?: number;
    };
    response: {
      [key: string]: unknown;
    };
    /** Whether the request and the answer may use the binary tensor encoding. */
    binary: false;
    errorStatus: 400 | 403 | 404 | 415 | 431 | 503;
  };
  /** Unload a model and delete every version the device keeps of it (DELETE /v1/models/{name}) */
  removeModel: {
    method: "DELETE";
    path: "/v1/models/{name}";
    pathParams: { name: string };
    request: never;
    response: {
      [key: string]: unknown;
    };
    /** Whether the request and the answer may use the binary tensor encoding. */
    binary: false;
    errorStatus: 400 | 401 | 403 | 404 | 415 | 431 | 503;
  };
  /** Serve several kept versions at once (A/B, canary): each infer goes to a version drawn by weight (PUT /v1/models/{name}/split) */
  split: {
    method: "PUT";
    path: "/v1/models/{name}/split";
    pathParams: { name: string };
    request: {
      /** {version: weight}, 1 to 4 kept versions, integer weights >= 0 (at least one > 0); {} ends the split */
      versions?: {
        [key: string]: number;
      };
      /** circuit-breaker limits; each omitted one is the agent's (--breaker) */
      breaker?: {
        /** error rate over the window that opens the breaker (default 0.5; 1: never) */
        error_rate?: number;
        /** p99 inference latency over the window that opens it (default 0: not checked) */
        p99_ms?: number;
        /** sliding window in seconds (default 30) */
        window_s?: number;
        /** requests in the window before it may open (default 20) */
        min_requests?: number;
        /** seconds open before one trial request is let through (half-open; default 30) */
        cooldown_s?: number;
      };
    };
    response: {
      name?: string;
      split?: {
        [key: string]: number;
      } | null;
      /** the model's breaker limits now in force (when breaker was given) */
      breaker?: {
        [key: string]: unknown;
      };
    };
    /** Whether the request and the answer may use the binary tensor encoding. */
    binary: false;
    errorStatus: 400 | 401 | 403 | 404 | 409 | 415 | 431 | 503;
  };
  /** Circuit-breaker limits of one model: a served version whose error rate or p99 latency over the window crosses them gets no traffic (it falls back to the other side of the split or the previous version) until a trial request after the cool-down succeeds; {} or no limits goes back to the agent's (PUT /v1/models/{name}/breaker) */
  breaker: {
    method: "PUT";
    path: "/v1/models/{name}/breaker";
    pathParams: { name: string };
    request: {
      /** circuit-breaker limits; each omitted one is the agent's (--breaker) */
      limits?: {
        /** error rate over the window that opens the breaker (default 0.5; 1: never) */
        error_rate?: number;
        /** p99 inference latency over the window that opens it (default 0: not checked) */
        p99_ms?: number;
        /** sliding window in seconds (default 30) */
        window_s?: number;
        /** requests in the window before it may open (default 20) */
        min_requests?: number;
        /** seconds open before one trial request is let through (half-open; default 30) */
        cooldown_s?: number;
      };
    };
    response: {
      name?: string;
      limits?: {
        [key: string]: unknown;
      };
      /** {version: {state: closed|open|half_open, reason, requests, error_rate, p99_ms}} */
      breakers?: {
        [key: string]: {
          [key: string]: unknown;
        };
      };
    };
    /** Whether the request and the answer may use the binary tensor encoding. */
    binary: false;
    errorStatus: 400 | 401 | 403 | 404 | 409 | 415 | 431 | 503;
  };
  /** The stream sessions kept for a model, and the table's bounds (GET /v1/models/{name}/sessions) */
  listSessions: {
    method: "GET";
    path: "/v1/models/{name}/sessions";
    pathParams: { name: string };
    request: never;
    response: {
      [key: string]: unknown;
    };
    /** Whether the request and the answer may use the binary tensor encoding. */
    binary: false;
    errorStatus: 403 | 404 | 431 | 503;
  };
  /** End a stream session: its state is dropped and its next request starts from the initial state (DELETE /v1/models/{name}/sessions) */
  endSession: {
    method: "DELETE";
    path: "/v1/models/{name}/sessions";
    pathParams: { name: string };
    request: never;
    response: {
      [key: string]: unknown;
    };
    /** Whether the request and the answer may use the binary tensor encoding. */
    binary: false;
    errorStatus: 400 | 403 | 404 | 431 | 503;
  };
}
