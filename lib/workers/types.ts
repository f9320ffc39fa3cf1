/**
 * The contracts of the worker dispatcher (./dispatcher.ts): what the routes use of a worker
 * service, and the parts a dispatcher is composed of in each mode.
 */
import type { ErrorInfo } from "../engine/events.ts";
import type { ExecutionObserver } from "../executions/types.ts";
import type { Session, SessionRegistration, TaskPayload } from "./sessions.ts";
import type { TaskQueue } from "./queue.ts";

/** Who holds a live attempt: its task and contract, and its session's worker (null: gone). */
export interface TokenHolder {
  task: string;
  contract: string;
  worker_id: string | null;
}

/**
 * A session as `/pending` judges it: who it is, what it serves, when it was last heard from,
 * whether a poll of it is open here, and how many of its slots hold an attempt.
 */
export type SessionView =
  & Pick<
    Session,
    "session_id" | "worker_id" | "runtime" | "tasks" | "concurrency" | "last_contact_ms" | "polling"
  >
  & { busy: number };

/**
 * Where worker sessions live: this server's memory (WorkerSessions) or the cluster's
 * `orbit_sessions`, cached here (SharedSessions). The store also watches the attempts its
 * sessions hold and hands the ones whose worker went silent to `lost` (see start).
 */
export interface SessionStore extends Pick<ExecutionObserver, "installed" | "dropped"> {
  /** The sessions known here (all of them on one server; those served here in shared mode). */
  readonly sessions: ReadonlyMap<string, Session>;
  register(r: SessionRegistration): string | Promise<string>;
  /** The session, in contact now; 404 UNKNOWN_SESSION when it is unknown or expired. */
  contact(id: string): Session | Promise<Session>;
  /** The session was heard from (a result, the end of a poll). */
  touch(s: Session): void;
  /** A heartbeat listing the attempts its worker runs; answers the tokens to cancel. */
  heartbeat(s: Session, tokens: string[]): string[] | Promise<string[]>;
  /** The session unregistered: forgotten; answers the tokens of the attempts it held. */
  remove(s: Session): string[] | Promise<string[]>;
  /** `/v1/workers`. */
  list(): unknown[] | Promise<unknown[]>;
  /** Starts the store's checks; an attempt whose worker went silent goes to `lost`. */
  start(lost: (token: string, reason: string) => void): void;
  stop(): void;
}

/** Tasks queued by other servers (shared mode): the claim statement over `orbit_tasks`. */
export interface TaskClaims {
  /** Claims up to `max` tasks `s` serves, each dispatched (recorded on its owner). */
  claim(s: Session, max: number): Promise<TaskPayload[]>;
  /** How often the first waiting poll of a session claims again (a notification may be lost). */
  readonly recheckMs: number;
}

/** The parts a dispatcher is composed of (see the top of this file). */
export interface DispatcherParts {
  sessions: SessionStore;
  /** This server's queue; a MemoryTaskQueue by default. */
  queue?: TaskQueue;
  /** Shared mode: the tasks of other servers. */
  claims?: TaskClaims;
  /**
   * Shared mode: memory does not know the attempt a result names; its dispatch may still be an
   * entry of this node's inbox (a fast worker reported before the owner recorded it).
   */
  catchUp?(executionId: string): Promise<void>;
}

/**
 * What the routes use of a worker service: the Dispatcher, composed of memory parts on a
 * single server and in standby mode, of the shared tables in shared mode (SharedWorkers adds
 * the cluster-wide reads below).
 */
export interface WorkerService extends ExecutionObserver {
  /** Sessions this server knows (all of them here; the ones it served in shared mode). */
  readonly sessions: ReadonlyMap<string, Session>;
  register(
    r: Pick<Session, "worker_id" | "runtime" | "tasks" | "concurrency">,
  ): string | Promise<string>;
  poll(
    sessionId: string,
    max: number,
    waitMs: number,
    signal?: AbortSignal,
  ): Promise<TaskPayload[]>;
  heartbeat(sessionId: string, tokens: string[]): string[] | Promise<string[]>;
  unregister(sessionId: string): Promise<void>;
  report(
    token: string,
    result: { output: unknown } | { error: ErrorInfo },
    take?: { sessionId: string; maxTasks: number },
    signal?: AbortSignal,
  ): Promise<{ accepted: boolean; tasks: TaskPayload[] }>;
  list(): unknown[] | Promise<unknown[]>;
  /**
   * Shared mode, for the workers file's checks: the worker of a session this server has not
   * cached (null: no such session), and who holds the attempts whose executions it does not
   * hold (those not live are left out). Other servers' sessions and attempts are checked as its own.
   */
  sessionWorker?(sessionId: string): Promise<string | null>;
  tokenHolders?(tokens: string[]): Promise<Map<string, TokenHolder>>;
  /**
   * Shared mode: the live sessions of the whole cluster (`orbit_sessions`), for `/pending`; a
   * worker may talk to another server than the one asked, or than the execution's owner.
   * Without it, `sessions` are all there are.
   */
  sessionViews?(): Promise<SessionView[]>;
  /**
   * Shared mode: how many worker sessions the cluster has (`orbit_sessions`), for
   * `/v1/health`'s `worker_sessions`; without it, `sessions` are all there are.
   */
  sessionCount?(): Promise<number>;
  start(): void;
  stop(): void;
}
