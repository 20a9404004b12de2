/** The agent answered with an error status (4xx/5xx); `agentMessage` is its `{"error": ...}` text. */
export class AgentError extends Error {
  override name = "AgentError";
  /** The HTTP status (400 a bad input, 401 a missing token, 403 a cross-origin request, 404 no such model...). */
  readonly status: number;
  /** The agent's own message (the `error` field of its JSON answer). */
  readonly agentMessage: string;
  /** Seconds the agent asks to wait before retrying (its `Retry-After` header, on a 503), if it sent one. */
  readonly retryAfter: number | undefined;

  constructor(status: number, agentMessage: string, retryAfter?: number) {
    super(`agent answered ${status}: ${agentMessage}`);
    this.status = status;
    this.agentMessage = agentMessage;
    this.retryAfter = retryAfter;
  }
}

/** No complete answer within the client's (or the call's) timeout; the request was aborted. */
export class AgentTimeoutError extends Error {
  override name = "AgentTimeoutError";
  readonly timeoutMs: number;

  constructor(what: string, timeoutMs: number) {
    super(`${what}: no answer within ${timeoutMs} ms`);
    this.timeoutMs = timeoutMs;
  }
}

/** The agent could not be reached (connection refused or reset, DNS failure), its answer broke off, or what
 * answered is not the agent (a JSON route's answer that is not JSON). */
export class AgentConnectionError extends Error {
  override name = "AgentConnectionError";

  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}
