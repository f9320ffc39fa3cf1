/**
 * The ORBIT worker: registers the tasks it serves, long-polls for attempts, runs them with a
 * concurrency limit, heartbeats, reports each result exactly once, and survives server
 * restarts and failovers (every connection error and 5xx is retried with backoff; an unknown
 * session is registered again).
 *
 * Uses only `fetch`, `AbortController`, `setTimeout` and `crypto.randomUUID`: it runs on
 * Deno and Node 20 alike. On Deno its slots send their polls and results as plain HTTP/1.1 over
 * `Deno.connect` (`http1.ts`), a quarter of `fetch`'s CPU per request.
 *
 * @module
 */

import { OrbitError } from "./errors.ts";
import { type BackoffOptions, formatSeconds, Transport } from "./http.ts";
import { consoleLogger, type Logger } from "./logger.ts";
import {
  type AnyTask,
  type Inflight,
  type PolledTask,
  Stopped,
  type TaskFailure,
  type WorkerCore,
} from "./worker/common.ts";
import { abort, taskKey } from "./worker/execute.ts";
import { runHeartbeats } from "./worker/heartbeat.ts";
import { Session } from "./worker/session.ts";
import { Slots } from "./worker/slots.ts";

export type { PolledTask, TaskFailure };

// The worker's roles, one file each under worker/: session.ts (register, the session id,
// registering again, unregister), slots.ts (the producer: slots that long-poll and run one task
// at a time), execute.ts (a handler's run: context, cancellation, deadline), report.ts (the
// completer: complete/fail with retries), heartbeat.ts (heartbeats, leases, cancel notices).
// The Worker below composes them and owns the life cycle (start, stop, drain).

/** Options of a {@link Worker}. */
export interface WorkerOptions {
  /** Base URL of the ORBIT runtime (or of the load balancer in front of a cluster). */
  server: string;
  /** Bearer token. */
  token?: string;
  /** This worker's identity (the `worker_id` of registration and of the workers file). */
  workerId: string;
  /** Runtime reported at registration (default `typescript`). */
  runtime?: string;
  /** The tasks served. */
  tasks: AnyTask[];
  /** How many attempts run at once (default 8). */
  concurrency?: number;
  /** Long-poll wait in seconds, at most 60 (default 30). */
  pollWaitS?: number;
  /** Interval between heartbeats (default 2000 ms). */
  heartbeatMs?: number;
  /** Where log lines go (default: the console, level info). */
  logger?: Logger;
  /** Retry delays for connection errors and 5xx (default 200 ms doubling to 5 s, 20 % jitter). */
  backoff?: BackoffOptions;
  /** Timeout of every request but the long poll (default 30 s). */
  requestTimeoutMs?: number;
  /** A `fetch` implementation (default: the global one). */
  fetch?: typeof fetch;
  /**
   * Each concurrency slot polls for one task at a time and reports its results on an HTTP
   * connection of its own (default `true`; on Deno: plain HTTP/1.1 over `Deno.connect` for an
   * `http:` server, `fetch` with a `Deno.createHttpClient` of its own for `https:`; elsewhere
   * and with a custom `fetch` the slots share the `fetch` pool). Behind a load balancer that
   * spreads connections over the servers of a cluster in shared mode, a slot's tasks then come
   * from the server its connection reaches, which prefers the executions it owns, and their
   * results go back to that owner instead of being forwarded between servers.
   */
  connectionPerSlot?: boolean;
  /**
   * In a cluster in shared mode, spread the slots over the live servers (default `true`): the
   * worker reads `/v1/health` of `server`, and each slot polls one live node at the address
   * it advertises (`--advertise-addr`), which hands out the tasks of the executions it owns
   * first; the slot's results go back to that owner on the same connection, so the servers
   * forward almost nothing between them. A node whose address does not answer is left out
   * for 10 s (its slots use `server` meanwhile), a node that leaves the cluster has its slots
   * moved at once. With a single server, a standby cluster, or nodes without addresses, every
   * slot uses `server`, as with `false`.
   */
  spreadOverNodes?: boolean;
  /** How often the live nodes are read again when spreading (default 5000 ms). */
  nodeRefreshMs?: number;
}

/** Options of {@link Worker.stop}. */
export interface StopOptions {
  /**
   * How long to wait for running tasks and the delivery of their results. When it passes, the
   * tasks' signals are aborted and undelivered results are given up (the runtime redelivers
   * those attempts after its session timeout). Default: wait as long as it takes.
   */
  timeoutMs?: number;
}

type State = "new" | "starting" | "running" | "stopping" | "stopped";

/** Serves tasks to an ORBIT runtime. See the module documentation. */
export class Worker {
  readonly workerId: string;
  readonly runtime: string;
  readonly concurrency: number;
  readonly pollWaitS: number;
  readonly heartbeatMs: number;
  readonly logger: Logger;

  readonly #transport: Transport;
  readonly #tasks = new Map<string, AnyTask>();

  #state: State = "new";

  /** Aborted when stop() begins: ends polling and backoff sleeps of the poll loop. */
  readonly #stopping = new AbortController();
  /** Aborted when the heartbeat loop must end (after the tasks are done). */
  readonly #hbStop = new AbortController();
  /** Aborted when a stop timeout passes: result deliveries give up. */
  readonly #abandon = new AbortController();

  readonly #inflight = new Map<string, Inflight>();
  /** Tasks an answer carried beyond the one asked for; the next free slot runs them. */
  readonly #backlog: PolledTask[] = [];

  /** The state the roles share (see worker/common.ts). */
  readonly #core: WorkerCore;
  readonly #session: Session;
  readonly #slots: Slots;

  #hbLoop: Promise<void> = Promise.resolve();
  #stopPromise: Promise<void> | null = null;
  #resolveDone!: () => void;
  readonly #done: Promise<void>;

  constructor(options: WorkerOptions) {
    if (!options.workerId) throw new TypeError("Worker: `workerId` is required");
    if (!Array.isArray(options.tasks) || options.tasks.length === 0) {
      throw new TypeError("Worker: `tasks` must list at least one task definition");
    }
    this.workerId = options.workerId;
    this.runtime = options.runtime ?? "typescript";
    this.concurrency = Math.max(1, Math.floor(options.concurrency ?? 8));
    this.pollWaitS = Math.min(60, Math.max(0, options.pollWaitS ?? 30));
    this.heartbeatMs = Math.max(10, options.heartbeatMs ?? 2000);
    this.logger = options.logger ?? consoleLogger();
    this.#transport = new Transport({
      server: options.server,
      token: options.token,
      fetch: options.fetch,
    });
    const core: WorkerCore = {
      workerId: this.workerId,
      logger: this.logger,
      transport: this.#transport,
      server: this.#transport.server,
      backoff: options.backoff ?? {},
      requestTimeoutMs: options.requestTimeoutMs ?? 30_000,
      stopping: this.#stopping.signal,
      hbStop: this.#hbStop.signal,
      abandon: this.#abandon.signal,
      inflight: this.#inflight,
      backlog: this.#backlog,
    };
    this.#core = core;
    this.#session = new Session(
      core,
      { runtime: this.runtime, tasks: [...options.tasks], concurrency: this.concurrency },
      (sessionId) => this.#slots.abortPolls(sessionId),
    );
    this.#slots = new Slots(core, this.#session, this.#tasks, {
      server: options.server,
      token: options.token,
      fetch: options.fetch,
      connectionPerSlot: options.connectionPerSlot,
      concurrency: this.concurrency,
      pollWaitS: this.pollWaitS,
      spreadOverNodes: options.spreadOverNodes,
      nodeRefreshMs: options.nodeRefreshMs,
    });
    for (const task of options.tasks) {
      const key = taskKey(task.name, task.contract);
      if (this.#tasks.has(key)) {
        throw new TypeError(`Worker: task ${task.name} contract ${task.contract} is listed twice`);
      }
      this.#tasks.set(key, task);
    }
    this.#done = new Promise((resolve) => (this.#resolveDone = resolve));
  }

  /** The runtime's URL. */
  get server(): string {
    return this.#transport.server;
  }

  /** The current session id, if registered. */
  get sessionId(): string | null {
    return this.#session.id;
  }

  /** Whether each slot has a connection of its own (see {@link WorkerOptions.connectionPerSlot}). */
  get connectionPerSlot(): boolean {
    return this.#slots.connectionPerSlot;
  }

  /** The live nodes the slots are spread over (empty: every slot uses `server`). */
  get nodeAddresses(): readonly string[] {
    return this.#slots.nodes.addresses;
  }

  /** Tokens of the attempts being run or reported. */
  get runningTokens(): string[] {
    return [...this.#inflight.keys()];
  }

  /** `new`, `starting`, `running`, `stopping` or `stopped`. */
  get state(): State {
    return this.#state;
  }

  /**
   * Registers (retrying connection errors and 5xx until it succeeds) and starts polling and
   * heartbeating; resolves once the worker is running. Rejects when the runtime refuses the
   * registration (for example 401 or 403).
   */
  async start(): Promise<void> {
    if (this.#state !== "new") throw new OrbitError(`Worker.start: the worker is ${this.#state}`);
    this.#state = "starting";
    try {
      await this.#session.ensure();
    } catch (err) {
      if (err instanceof Stopped) return; // stop() was called while registering
      this.#state = "stopped";
      this.#hbStop.abort();
      this.#resolveDone();
      throw err;
    }
    // In a shared cluster, the live nodes to spread the slots over (one health read).
    await this.#slots.nodes.start();
    if (this.#stopping.signal.aborted) return;
    this.#state = "running";
    this.#slots.start();
    this.#hbLoop = runHeartbeats(this.#core, this.#session, this.heartbeatMs);
  }

  /** Starts the worker (if it is not started yet) and resolves when it has stopped. */
  async run(): Promise<void> {
    if (this.#state === "new") await this.start();
    await this.#done;
  }

  /** Resolves when the worker has stopped. */
  get done(): Promise<void> {
    return this.#done;
  }

  /**
   * Graceful shutdown: stops polling, lets running tasks finish, reports their results, stops
   * heartbeating and unregisters. Safe to call more than once.
   */
  stop(options: StopOptions = {}): Promise<void> {
    if (this.#stopPromise) return this.#stopPromise;
    if (this.#state === "stopped") return (this.#stopPromise = Promise.resolve());
    if (this.#state === "new") {
      this.#state = "stopped";
      this.#resolveDone();
      return (this.#stopPromise = Promise.resolve());
    }
    this.#state = "stopping";
    this.#stopping.abort(new Stopped());
    this.#stopPromise = this.#shutdown(options);
    return this.#stopPromise;
  }

  async #shutdown(options: StopOptions): Promise<void> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    try {
      const registering = this.#session.registering;
      if (registering) await registering.catch(() => {});
      if (this.#slots.started) await this.#slots.pollsOver();
      if (this.#inflight.size > 0 || this.#backlog.length > 0) {
        this.logger.info(`stopping: waiting for ${this.#inflight.size} running task(s)`);
      }
      const drained = this.#slots.drained();
      if (options.timeoutMs !== undefined) {
        const timeout = new Promise<"timeout">((resolve) => {
          timer = setTimeout(() => resolve("timeout"), options.timeoutMs);
        });
        if ((await Promise.race([drained, timeout])) === "timeout") {
          this.logger.warn(
            `stopping: ${this.#inflight.size} task(s) still running after ${
              formatSeconds(options.timeoutMs)
            }; abandoning them (the runtime redelivers them after its session timeout)`,
          );
          this.#backlog.length = 0;
          for (const entry of this.#inflight.values()) abort(entry, "shutdown");
          this.#abandon.abort(new Stopped());
          // Handlers that heed their signal end now; one that ignores it is not waited for.
          const grace = new Promise<void>((resolve) => {
            timer = setTimeout(resolve, 100);
          });
          await Promise.race([drained, grace]);
        }
      } else {
        await drained;
      }
      this.#hbStop.abort(new Stopped());
      await this.#hbLoop;
      await this.#session.unregister();
    } finally {
      this.#slots.close();
      if (timer !== undefined) clearTimeout(timer);
      this.#state = "stopped";
      this.logger.info("worker stopped", { worker_id: this.workerId });
      this.logger.flush?.();
      this.#resolveDone();
    }
  }
}
