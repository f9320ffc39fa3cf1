/**
 * The ORBIT client: deploy definitions, start executions, wait for them, read their history,
 * signal, query and cancel them.
 *
 * Requests are not retried: an error from the runtime is thrown as an {@link OrbitApiError}
 * (a standby answers writes with 503 NOT_LEADER; send them through a load balancer that routes
 * to the leader, or retry). The exception are reads (GET), which are idempotent: a connection
 * error on a GET is retried a few times with backoff.
 *
 * @module
 */

import { OrbitApiError, OrbitConnectionError, OrbitExecutionError } from "./errors.ts";
import {
  type Affinity,
  Backoff,
  type BackoffOptions,
  type RequestOptions,
  sleep,
  Transport,
} from "./http.ts";
import { type Http1Pool, http1PoolFor } from "./http1.ts";
import { type InferOutput, parseWith, type StandardSchemaV1 } from "./task.ts";
import type { WorkflowDocument } from "./workflow.ts";

/** Options of a {@link Client}. */
export interface ClientOptions {
  /** Base URL of the ORBIT runtime, e.g. `http://127.0.0.1:7233`. */
  server: string;
  /** Bearer token. */
  token?: string;
  /** How many times a GET that hit a connection error is repeated (default 3). */
  getRetries?: number;
  /** Delays between those repeats (default 200 ms doubling, 20 % jitter). */
  backoff?: BackoffOptions;
  /** Timeout of a request other than a long wait (default 30 s). */
  requestTimeoutMs?: number;
  /** A `fetch` implementation (default: the global one). */
  fetch?: typeof fetch;
  /**
   * How requests travel (default `"fetch"`). `"http1"`: on Deno, for an `http:` server, plain
   * HTTP/1.1 over `Deno.connect` on kept-alive connections of the client's own (`http1.ts`):
   * about a quarter of the CPU `fetch` spends per request. Connections idle for 4 s are not
   * reused; a GET that meets a connection the server had closed is sent again on a new one.
   * Call {@link Client.close} when done: idle connections stay open until then.
   * Elsewhere, for `https:` and with a custom `fetch`, `"http1"` falls back to `fetch`.
   */
  transport?: "fetch" | "http1";
}

/** Status of an execution. */
export type ExecutionStatus =
  | "running"
  | "completed"
  | "failed"
  | "cancelled"
  | "timed_out"
  | "continued";

/** Statuses after which an execution (run) changes no more. */
export const TERMINAL_STATUSES: readonly ExecutionStatus[] = [
  "completed",
  "failed",
  "cancelled",
  "timed_out",
  "continued",
];

/** True for a status after which the run changes no more. */
export function isTerminal(status: string): boolean {
  return (TERMINAL_STATUSES as readonly string[]).includes(status);
}

/** An execution as the runtime reads it. */
export interface Execution {
  execution_id: string;
  run_id: string;
  root_id: string;
  workflow: string;
  version: string;
  status: ExecutionStatus;
  input: unknown;
  output?: unknown;
  error?: { code?: string; message?: string; [key: string]: unknown } | null;
  created_ms: number;
  closed_ms?: number | null;
  [key: string]: unknown;
}

/** One history event. */
export interface HistoryEvent {
  seq: number;
  type: string;
  time_ms: number;
  step?: string;
  attempt?: number;
  [key: string]: unknown;
}

/** One page of history. */
export interface HistoryPage {
  events: HistoryEvent[];
  next_after_seq?: number | null;
  [key: string]: unknown;
}

/** One page of executions. */
export interface ExecutionPage {
  executions: Execution[];
  next_cursor?: string | null;
  [key: string]: unknown;
}

/** Filters of {@link Client.list}. */
export interface ListOptions {
  workflow?: string;
  status?: ExecutionStatus | string;
  limit?: number;
  cursor?: string;
}

/** Options of {@link Client.start}. */
export interface StartOptions<S extends StandardSchemaV1 | undefined = undefined> {
  input?: unknown;
  /** Definition version (default: the latest; the document's own when a document is given). */
  version?: string;
  /** Choose the execution id: starting an existing id is a no-op that returns it. */
  executionId?: string;
  /** Validate `input` with this schema before sending it. */
  inputSchema?: S;
}

/** Options of {@link Client.wait}. */
export interface WaitOptions {
  /** Overall time to wait, in seconds (default: until the execution finishes). */
  timeoutS?: number;
  /** Abort the wait. */
  signal?: AbortSignal;
}

/** Options of {@link Client.result}. */
export interface ResultOptions<S extends StandardSchemaV1 | undefined> extends WaitOptions {
  /** Validate the output with this schema. */
  outputSchema?: S;
}

type WorkflowRef = string | WorkflowDocument | { build(): WorkflowDocument };

/** How many started executions' connections a Client remembers for their waits. */
const AFFINITY_ENTRIES = 4096;

/** Talks to the ORBIT HTTP API (`orbit-api/1`). */
export class Client {
  readonly #transport: Transport;
  readonly #getRetries: number;
  readonly #backoff: BackoffOptions;
  readonly #timeoutMs: number;

  readonly #pool: Http1Pool | null = null;
  /**
   * `transport: "http1"`: the connection each recent start went out on, by execution id, so that
   * its wait goes out on the same one when it is idle. Behind a balancer that routes connections
   * (the shared mode's round-robin proxy), the wait then reaches the server that owns the
   * execution and is answered from its memory, not through PostgreSQL's notifications. The
   * oldest entries make room past AFFINITY_ENTRIES.
   */
  readonly #affinity = new Map<string, Affinity>();

  constructor(options: ClientOptions) {
    if (options.transport === "http1" && !options.fetch) {
      this.#pool = http1PoolFor(options.server, {
        maxIdle: 256,
        idleMs: 4_000,
        resend: "idempotent",
      });
    }
    this.#transport = new Transport(options, this.#pool?.exchange);
    this.#getRetries = Math.max(0, options.getRetries ?? 3);
    this.#backoff = options.backoff ?? {};
    this.#timeoutMs = options.requestTimeoutMs ?? 30_000;
  }

  /** The runtime's URL. */
  get server(): string {
    return this.#transport.server;
  }

  /** Closes the idle connections of `transport: "http1"` (nothing to do for `fetch`). */
  close(): void {
    this.#pool?.close();
  }

  /** Deploys a definition (a document or a builder). Idempotent for an identical document. */
  deploy(doc: WorkflowDocument | { build(): WorkflowDocument }): Promise<Record<string, unknown>> {
    return this.#post("/v1/workflows", toDocument(doc));
  }

  /** Lists deployed definitions. */
  workflows(): Promise<unknown> {
    return this.#get("/v1/workflows");
  }

  /** Reads a definition (the latest version, or the one named). */
  workflow(name: string, version?: string): Promise<Record<string, unknown>> {
    const path = version === undefined
      ? `/v1/workflows/${enc(name)}`
      : `/v1/workflows/${enc(name)}/${enc(version)}`;
    return this.#get(path);
  }

  /**
   * Starts an execution of `workflow` (a name, a document or a builder). Answers the execution;
   * with an `executionId` that already exists, the existing one.
   */
  async start<S extends StandardSchemaV1 | undefined = undefined>(
    workflow: WorkflowRef,
    options: StartOptions<S> = {},
  ): Promise<Execution> {
    let name: string;
    let version = options.version;
    if (typeof workflow === "string") {
      name = workflow;
    } else {
      const doc = toDocument(workflow);
      name = doc.name;
      version ??= doc.version;
    }
    let input = options.input;
    if (options.inputSchema) input = await parseWith(options.inputSchema, input, `${name} input`);
    const body: Record<string, unknown> = { workflow: name };
    if (version !== undefined) body.version = version;
    if (input !== undefined) body.input = input;
    if (options.executionId !== undefined) body.execution_id = options.executionId;
    const affinity: Affinity | undefined = this.#pool ? {} : undefined;
    const execution = await this.#post<Execution>("/v1/executions", body, affinity);
    if (affinity && typeof execution?.execution_id === "string") {
      this.#affinity.delete(execution.execution_id);
      this.#affinity.set(execution.execution_id, affinity);
      if (this.#affinity.size > AFFINITY_ENTRIES) {
        this.#affinity.delete(this.#affinity.keys().next().value!);
      }
    }
    return execution;
  }

  /** Reads an execution. */
  get(executionId: string): Promise<Execution> {
    return this.#get(`/v1/executions/${enc(executionId)}`);
  }

  /**
   * Waits until the execution is terminal or `timeoutS` has passed, and answers it as last read
   * (check `status`). Long waits are cut into server waits of at most 300 s each.
   */
  async wait(executionId: string, options: WaitOptions = {}): Promise<Execution> {
    const deadline = options.timeoutS === undefined
      ? Infinity
      : Date.now() + Math.max(0, options.timeoutS) * 1000;
    const path = `/v1/executions/${enc(executionId)}/wait`;
    const affinity = this.#affinity.get(executionId);
    for (;;) {
      const remainingMs = deadline - Date.now();
      const waitS = Math.max(0, Math.min(300, Math.ceil(remainingMs / 1000)));
      const began = Date.now();
      const execution = await this.#get<Execution>(path, {
        query: { timeout_s: waitS },
        signal: options.signal,
        timeoutMs: waitS * 1000 + this.#timeoutMs,
        affinity,
      });
      if (isTerminal(execution.status)) {
        this.#affinity.delete(executionId);
        return execution;
      }
      const left = deadline - Date.now();
      if (left <= 0) return execution;
      // The runtime answered early without a final status: do not spin.
      if (Date.now() - began < 1000) await sleep(Math.min(1000, left), options.signal);
    }
  }

  /**
   * Waits for the execution and answers its output (validated with `outputSchema` if given).
   * Throws an {@link OrbitExecutionError} when it did not complete.
   */
  async result<S extends StandardSchemaV1 | undefined = undefined>(
    executionId: string,
    options: ResultOptions<S> = {},
  ): Promise<S extends StandardSchemaV1 ? InferOutput<S> : unknown> {
    const execution = await this.wait(executionId, options);
    if (execution.status !== "completed") {
      const why = execution.status === "running"
        ? "is still running"
        : `ended ${execution.status}${
          execution.error?.message
            ? `: ${execution.error.code ?? ""} ${execution.error.message}`
            : ""
        }`;
      throw new OrbitExecutionError(`execution ${executionId} ${why}`.trim(), execution);
    }
    return parseWith(options.outputSchema as S, execution.output, `${execution.workflow} output`);
  }

  /** Reads one page of history (events after `afterSeq`). */
  history(
    executionId: string,
    options: { afterSeq?: number; limit?: number } = {},
  ): Promise<HistoryPage> {
    return this.#get(`/v1/executions/${enc(executionId)}/history`, {
      query: { after_seq: options.afterSeq, limit: options.limit },
    });
  }

  /** Every history event, page after page (following `next_after_seq`). */
  async *historyEvents(
    executionId: string,
    options: { afterSeq?: number; limit?: number } = {},
  ): AsyncGenerator<HistoryEvent, void, undefined> {
    let afterSeq = options.afterSeq;
    for (;;) {
      const page = await this.history(executionId, { afterSeq, limit: options.limit });
      const events = Array.isArray(page?.events) ? page.events : [];
      yield* events;
      const next = page?.next_after_seq;
      if (next === undefined || next === null || events.length === 0 || next === afterSeq) return;
      afterSeq = next;
    }
  }

  /** Cancels an execution (its compensations run); answers it with its state. */
  cancel(executionId: string, reason?: string): Promise<Execution> {
    return this.#post(
      `/v1/executions/${enc(executionId)}/cancel`,
      reason === undefined ? {} : { reason },
    );
  }

  /** Lists executions, one page. */
  async list(options: ListOptions = {}): Promise<ExecutionPage> {
    const res = await this.#get<ExecutionPage | Execution[]>("/v1/executions", {
      query: {
        workflow: options.workflow,
        status: options.status,
        limit: options.limit,
        cursor: options.cursor,
      },
    });
    return Array.isArray(res) ? { executions: res } : res;
  }

  /** Every execution matching the filters, page after page (following `next_cursor`). */
  async *listAll(
    options: Omit<ListOptions, "cursor"> = {},
  ): AsyncGenerator<Execution, void, undefined> {
    let cursor: string | undefined;
    for (;;) {
      const page = await this.list({ ...options, cursor });
      const executions = Array.isArray(page.executions) ? page.executions : [];
      yield* executions;
      const next = page.next_cursor;
      if (!next || executions.length === 0 || next === cursor) return;
      cursor = next;
    }
  }

  /** Sends a signal. Answers `{seq, …}`. */
  signal(
    executionId: string,
    name: string,
    payload?: unknown,
  ): Promise<{ seq: number; [key: string]: unknown }> {
    return this.#post(
      `/v1/executions/${enc(executionId)}/signals/${enc(name)}`,
      payload === undefined ? {} : { payload },
    );
  }

  /** Evaluates a declared query on the execution's current state; answers its result. */
  async query<T = unknown>(executionId: string, name: string): Promise<T> {
    const res = await this.#get<{ result: T }>(
      `/v1/executions/${enc(executionId)}/queries/${enc(name)}`,
    );
    return res?.result;
  }

  /** The registered worker sessions. */
  workers(): Promise<Record<string, unknown>> {
    return this.#get("/v1/workers");
  }

  /** `GET /v1/health`. */
  health(): Promise<Record<string, unknown>> {
    return this.#get("/v1/health");
  }

  /** `GET /v1/ready`: the body, whatever the status (503 on a standby). */
  async ready(): Promise<{ ready?: boolean; [key: string]: unknown }> {
    try {
      return await this.#get("/v1/ready");
    } catch (err) {
      if (err instanceof OrbitApiError && err.status === 503 && isRecord(err.body)) {
        return err.body as { ready?: boolean };
      }
      throw err;
    }
  }

  #post<T>(path: string, body: unknown, affinity?: Affinity): Promise<T> {
    return this.#transport.post<T>(path, body, { timeoutMs: this.#timeoutMs, affinity });
  }

  /** A GET, repeated on connection errors only. */
  async #get<T>(path: string, options: RequestOptions = {}): Promise<T> {
    const backoff = new Backoff(this.#backoff);
    for (let attempt = 0;; attempt++) {
      try {
        return await this.#transport.get<T>(path, { timeoutMs: this.#timeoutMs, ...options });
      } catch (err) {
        if (
          !(err instanceof OrbitConnectionError) || attempt >= this.#getRetries ||
          options.signal?.aborted
        ) {
          throw err;
        }
        await sleep(backoff.next(), options.signal);
      }
    }
  }
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function enc(segment: string): string {
  return encodeURIComponent(segment);
}

function toDocument(doc: WorkflowDocument | { build(): WorkflowDocument }): WorkflowDocument {
  return typeof (doc as { build?: unknown }).build === "function"
    ? (doc as { build(): WorkflowDocument }).build()
    : (doc as WorkflowDocument);
}
