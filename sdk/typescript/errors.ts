/**
 * Errors raised by the ORBIT SDK.
 *
 * @module
 */

/** Base class of every error the SDK raises itself. */
export class OrbitError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "OrbitError";
  }
}

/**
 * The ORBIT runtime answered a request with a non-2xx status. The body of such an answer is
 * `{"error": {"code", "message", …}}`; `code` and `message` come from it, `details` holds the
 * other members of the error object (for example `leader_addr` of a 503 NOT_LEADER) and `body`
 * the whole parsed body (or the raw text when it was not JSON).
 */
export class OrbitApiError extends OrbitError {
  readonly status: number;
  readonly code: string;
  readonly body: unknown;
  readonly details: Record<string, unknown>;
  readonly method: string;
  readonly path: string;

  constructor(init: {
    status: number;
    code: string;
    message: string;
    body: unknown;
    details?: Record<string, unknown>;
    method?: string;
    path?: string;
  }) {
    super(init.message);
    this.name = "OrbitApiError";
    this.status = init.status;
    this.code = init.code;
    this.body = init.body;
    this.details = init.details ?? {};
    this.method = init.method ?? "";
    this.path = init.path ?? "";
  }

  /** True for a 5xx answer (including 503 NOT_LEADER): the request may succeed when repeated. */
  get retryable(): boolean {
    return this.status >= 500;
  }

  /** The leader's address named by a 503 NOT_LEADER answer, if any. */
  get leaderAddr(): string | undefined {
    const addr = this.details.leader_addr;
    return typeof addr === "string" ? addr : undefined;
  }
}

/**
 * The ORBIT runtime could not be reached: the connection was refused or dropped, the answer
 * could not be read, or the request timed out. Its message reads
 * `cannot reach ORBIT runtime at <url>: <reason>`.
 */
export class OrbitConnectionError extends OrbitError {
  readonly server: string;
  readonly reason: string;

  constructor(server: string, reason: string, options?: { cause?: unknown }) {
    super(`cannot reach ORBIT runtime at ${server}: ${reason}`, options);
    this.name = "OrbitConnectionError";
    this.server = server;
    this.reason = reason;
  }
}

/** Client-side validation of a value against a schema failed. */
export class OrbitValidationError extends OrbitError {
  readonly issues: ValidationIssue[];
  constructor(message: string, issues: ValidationIssue[]) {
    super(message);
    this.name = "OrbitValidationError";
    this.issues = issues;
  }
}

/** One problem found by a schema. */
export interface ValidationIssue {
  path: string;
  message: string;
}

/** Options of {@link TaskError}. */
export interface TaskErrorOptions {
  /** Whether the runtime may retry the step (default `true`; the IR's `non_retryable` list still applies). */
  retryable?: boolean;
  /** JSON details reported with the failure. */
  details?: unknown;
  cause?: unknown;
}

/**
 * Thrown by a task handler to fail the attempt with a chosen error code, for example
 * `throw new TaskError("INVALID_ORDER", "no items", { retryable: false })`.
 */
export class TaskError extends Error {
  readonly code: string;
  readonly retryable: boolean;
  readonly details: unknown;

  constructor(code: string, message: string, options: TaskErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "TaskError";
    this.code = code;
    this.retryable = options.retryable ?? true;
    this.details = options.details;
  }
}

/** True when repeating the request may help: a connection error or a 5xx answer. */
export function isRetryable(err: unknown): boolean {
  return err instanceof OrbitConnectionError ||
    (err instanceof OrbitApiError && err.status >= 500);
}

/** True for a 404 UNKNOWN_SESSION answer. */
export function isUnknownSession(err: unknown): boolean {
  return err instanceof OrbitApiError && err.status === 404 && err.code === "UNKNOWN_SESSION";
}

/**
 * {@link Client.result} found the execution failed, cancelled or timed out, or still running when
 * the wait ran out. `execution` is the execution as last read.
 */
export class OrbitExecutionError extends OrbitError {
  readonly execution: { execution_id: string; status: string; error?: unknown };
  readonly status: string;
  constructor(
    message: string,
    execution: { execution_id: string; status: string; error?: unknown },
  ) {
    super(message);
    this.name = "OrbitExecutionError";
    this.execution = execution;
    this.status = execution.status;
  }
}
