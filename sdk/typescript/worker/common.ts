/** Worker, shared ground of the roles: the attempt types, the state they share, internal errors. */

import { OrbitApiError, OrbitConnectionError } from "../errors.ts";
import type { BackoffOptions, Transport } from "../http.ts";
import type { Logger } from "../logger.ts";
import type { TaskDefinition } from "../task.ts";

// deno-lint-ignore no-explicit-any
export type AnyTask = TaskDefinition<any, any>;

/** One attempt as the runtime hands it out (`POST /v1/workers/poll`). */
export interface PolledTask {
  token: string;
  execution_id: string;
  step: string;
  attempt: number;
  task: string;
  contract: string;
  input: unknown;
  idempotency_key: string;
  redelivery: boolean;
  deadline_ms?: number | null;
  [key: string]: unknown;
}

/** The error object of `POST /v1/tasks/fail`. */
export interface TaskFailure {
  code: string;
  message: string;
  retryable: boolean;
  details: unknown;
}

export type Outcome =
  | { kind: "complete"; output: unknown }
  | { kind: "fail"; error: TaskFailure };

/** An attempt taken and not yet reported: running, or its result being delivered. */
export interface Inflight {
  task: PolledTask;
  controller: AbortController;
  /** Why the signal was aborted, if it was. */
  abortedBy?: "cancel" | "deadline" | "shutdown";
  /** The handler has returned; only the result delivery is left. */
  handlerDone: boolean;
  done: Promise<void>;
}

/** What the roles (session, slots, execute, report, heartbeat) share, owned by the Worker. */
export interface WorkerCore {
  readonly workerId: string;
  readonly logger: Logger;
  /** The worker's shared connection: register, heartbeat, unregister (and slots without one). */
  readonly transport: Transport;
  /** The runtime's URL (for log lines). */
  readonly server: string;
  readonly backoff: BackoffOptions;
  /** Timeout of every request but the long poll. */
  readonly requestTimeoutMs: number;
  /** Aborted when stop() begins: ends polling and backoff sleeps of the poll loop. */
  readonly stopping: AbortSignal;
  /** Aborted when the heartbeat loop must end (after the tasks are done). */
  readonly hbStop: AbortSignal;
  /** Aborted when a stop timeout passes: result deliveries give up. */
  readonly abandon: AbortSignal;
  /** Attempts being run or reported, by token. */
  readonly inflight: Map<string, Inflight>;
  /** Tasks an answer carried beyond the one asked for; the next free slot runs them. */
  readonly backlog: PolledTask[];
}

/** The worker is stopping; thrown internally to unwind loops. */
export class Stopped extends Error {
  constructor() {
    super("worker stopped");
    this.name = "Stopped";
  }
}

/** The session was found unknown while a poll of it was held. */
export class SessionLost extends Error {
  constructor() {
    super("session lost");
    this.name = "SessionLost";
  }
}

export function errorMessage(err: unknown): string {
  if (err instanceof Error) return err.message || err.name;
  return String(err);
}

/** How a failed request reads in a log line. */
export function describe(err: unknown, server: string): string {
  if (err instanceof OrbitConnectionError) return err.message;
  if (err instanceof OrbitApiError) {
    return `ORBIT runtime at ${server} answered ${err.status} ${err.code}: ${err.message}`;
  }
  return errorMessage(err);
}
