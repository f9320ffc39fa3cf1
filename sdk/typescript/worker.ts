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

import {
  isRetryable,
  isUnknownSession,
  OrbitApiError,
  OrbitConnectionError,
  OrbitError,
  TaskError,
} from "./errors.ts";
import { Backoff, type BackoffOptions, formatSeconds, sleep, Transport } from "./http.ts";
import { http1PoolFor } from "./http1.ts";
import { consoleLogger, type Logger } from "./logger.ts";
import { type TaskContext, type TaskDefinition, validate } from "./task.ts";

// deno-lint-ignore no-explicit-any
type AnyTask = TaskDefinition<any, any>;

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

type Outcome =
  | { kind: "complete"; output: unknown }
  | { kind: "fail"; error: TaskFailure };

/** One concurrency slot: its connection and its long poll. */
interface Slot {
  readonly transport: Transport;
  /** The slot's own connection (closed when the worker stops), when the runtime offers one. */
  readonly client: { close(): void } | null;
  poll: { sessionId: string; controller: AbortController } | null;
  /** The task this slot runs and the ones that follow it from results' answers. */
  chain: Promise<void> | null;
  /** Resolved when the slot will not poll again (the worker is stopping). */
  readonly pollsOver: Deferred;
}

/** A promise and its resolve (Promise.withResolvers is not in Node 20). */
interface Deferred {
  readonly promise: Promise<void>;
  resolve(): void;
}

function deferred(): Deferred {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

type HttpClientFactory = (options: { poolMaxIdlePerHost?: number }) => { close(): void };

/** Deno's `Deno.createHttpClient`, where the worker runs on Deno. */
function denoHttpClient(): HttpClientFactory | undefined {
  const deno = (globalThis as { Deno?: { createHttpClient?: HttpClientFactory } }).Deno;
  return typeof deno?.createHttpClient === "function"
    ? deno.createHttpClient.bind(deno)
    : undefined;
}

interface Inflight {
  task: PolledTask;
  controller: AbortController;
  /** Why the signal was aborted, if it was. */
  abortedBy?: "cancel" | "deadline" | "shutdown";
  /** The handler has returned; only the result delivery is left. */
  handlerDone: boolean;
  done: Promise<void>;
}

/** The worker is stopping; thrown internally to unwind loops. */
class Stopped extends Error {
  constructor() {
    super("worker stopped");
    this.name = "Stopped";
  }
}

/** The session was found unknown while a poll of it was held. */
class SessionLost extends Error {
  constructor() {
    super("session lost");
    this.name = "SessionLost";
  }
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
  readonly #taskList: AnyTask[];
  readonly #backoff: BackoffOptions;
  readonly #requestTimeoutMs: number;

  #state: State = "new";
  #session: string | null = null;
  #registering: Promise<string> | null = null;
  #registeredOnce = false;

  /** Aborted when stop() begins: ends polling and backoff sleeps of the poll loop. */
  readonly #stopping = new AbortController();
  /** Aborted when the heartbeat loop must end (after the tasks are done). */
  readonly #hbStop = new AbortController();
  /** Aborted when a stop timeout passes: result deliveries give up. */
  readonly #abandon = new AbortController();

  readonly #inflight = new Map<string, Inflight>();
  /** Tasks an answer carried beyond the one asked for; the next free slot runs them. */
  readonly #backlog: PolledTask[] = [];
  readonly #slots: Slot[];
  readonly #connectionPerSlot: boolean;
  #slotsStarted = false;

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
    this.#backoff = options.backoff ?? {};
    this.#requestTimeoutMs = options.requestTimeoutMs ?? 30_000;
    this.#transport = new Transport({
      server: options.server,
      token: options.token,
      fetch: options.fetch,
    });
    // A slot's own connection: plain HTTP/1.1 on Deno.connect for an http: server, Deno's
    // fetch with an HTTP client of its own for https:.
    const perSlot = options.connectionPerSlot !== false && !options.fetch;
    const httpClient = perSlot ? denoHttpClient() : undefined;
    const settings = { server: options.server, token: options.token };
    const ownConnection = (): Pick<Slot, "transport" | "client"> => {
      const pool = perSlot ? http1PoolFor(this.#transport.server) : null;
      if (pool) return { transport: new Transport(settings, pool.exchange), client: pool };
      if (!httpClient) return { transport: this.#transport, client: null };
      const client = httpClient({ poolMaxIdlePerHost: 1 });
      const transport = new Transport({
        ...settings,
        fetch: (input, init) => fetch(input, { ...init, client } as unknown as RequestInit),
      });
      return { transport, client };
    };
    this.#slots = Array.from({ length: this.concurrency }, () => ({
      ...ownConnection(),
      poll: null,
      chain: null,
      pollsOver: deferred(),
    }));
    this.#connectionPerSlot = this.#slots[0]!.client !== null;
    for (const task of options.tasks) {
      const key = taskKey(task.name, task.contract);
      if (this.#tasks.has(key)) {
        throw new TypeError(`Worker: task ${task.name} contract ${task.contract} is listed twice`);
      }
      this.#tasks.set(key, task);
    }
    this.#taskList = [...options.tasks];
    this.#done = new Promise((resolve) => (this.#resolveDone = resolve));
  }

  /** The runtime's URL. */
  get server(): string {
    return this.#transport.server;
  }

  /** The current session id, if registered. */
  get sessionId(): string | null {
    return this.#session;
  }

  /** Whether each slot has a connection of its own (see {@link WorkerOptions.connectionPerSlot}). */
  get connectionPerSlot(): boolean {
    return this.#connectionPerSlot;
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
      await this.#ensureSession();
    } catch (err) {
      if (err instanceof Stopped) return; // stop() was called while registering
      this.#state = "stopped";
      this.#hbStop.abort();
      this.#resolveDone();
      throw err;
    }
    if (this.#stopping.signal.aborted) return;
    this.#state = "running";
    this.#slotsStarted = true;
    for (const slot of this.#slots) void this.#runSlot(slot);
    this.#hbLoop = this.#runHeartbeatLoop();
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
      if (this.#registering) await this.#registering.catch(() => {});
      if (this.#slotsStarted) await Promise.all(this.#slots.map((slot) => slot.pollsOver.promise));
      if (this.#inflight.size > 0 || this.#backlog.length > 0) {
        this.logger.info(`stopping: waiting for ${this.#inflight.size} running task(s)`);
      }
      const drained = this.#drained();
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
          for (const entry of this.#inflight.values()) this.#abort(entry, "shutdown");
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
      await this.#unregister();
    } finally {
      for (const slot of this.#slots) slot.client?.close();
      if (timer !== undefined) clearTimeout(timer);
      this.#state = "stopped";
      this.logger.info("worker stopped", { worker_id: this.workerId });
      this.logger.flush?.();
      this.#resolveDone();
    }
  }

  async #drained(): Promise<void> {
    const chains = () => this.#slots.flatMap((slot) => (slot.chain ? [slot.chain] : []));
    while (this.#inflight.size > 0 || this.#backlog.length > 0 || chains().length > 0) {
      // Tasks accepted but not started yet (a runtime that answered more than it was asked).
      const slot = this.#slots[0]!;
      for (const task of this.#backlog.splice(0)) void this.#run(slot, task);
      await Promise.allSettled([...this.#inflight.values()].map((e) => e.done).concat(chains()));
    }
  }

  // ---- session ------------------------------------------------------------------------

  #ensureSession(): Promise<string> {
    if (this.#session) return Promise.resolve(this.#session);
    if (!this.#registering) {
      this.#registering = this.#register().finally(() => (this.#registering = null));
    }
    return this.#registering;
  }

  async #register(): Promise<string> {
    const body = {
      worker_id: this.workerId,
      runtime: this.runtime,
      tasks: this.#taskList.map((t) => ({
        name: t.name,
        contract: t.contract,
        ...(t.language ? { language: t.language } : {}),
      })),
      concurrency: this.concurrency,
    };
    const res = await this.#retrying(
      "register",
      this.#stopping.signal,
      (signal) =>
        this.#transport.post<{ session_id: string }>("/v1/workers/register", body, {
          signal,
          timeoutMs: this.#requestTimeoutMs,
        }),
      // Before the first success, a refusal (401, 403, 422) is the caller's to see.
      () => this.#registeredOnce,
    );
    if (!res || typeof res.session_id !== "string") {
      throw new OrbitApiError({
        status: 200,
        code: "INVALID_RESPONSE",
        message: "register answered without a session_id",
        body: res,
      });
    }
    this.#session = res.session_id;
    this.#registeredOnce = true;
    this.logger.info(
      `worker registered worker_id=${this.workerId} runtime=${this.runtime} tasks=${this.#taskList.length} session_id=${res.session_id}`,
    );
    return res.session_id;
  }

  #forgetSession(sessionId: string, op: string): void {
    if (this.#session !== sessionId) return;
    this.#session = null;
    this.logger.warn(
      `${op}: the runtime does not know session ${sessionId} (UNKNOWN_SESSION); registering again`,
    );
    // A long poll of that session is pointless now: end it, the slot registers and polls again.
    for (const slot of this.#slots) {
      if (slot.poll?.sessionId === sessionId) slot.poll.controller.abort(new SessionLost());
    }
  }

  async #unregister(): Promise<void> {
    const sessionId = this.#session;
    if (!sessionId) return;
    const backoff = new Backoff(this.#backoff);
    for (let attempt = 1;; attempt++) {
      try {
        await this.#transport.post("/v1/workers/unregister", { session_id: sessionId }, {
          timeoutMs: this.#requestTimeoutMs,
        });
        this.#session = null;
        return;
      } catch (err) {
        if (isUnknownSession(err)) return;
        if (isRetryable(err) && attempt < 4) {
          const delay = backoff.next();
          this.logger.warn(
            `unregister failed: ${describe(err, this.server)}; retrying in ${formatSeconds(delay)}`,
          );
          await sleep(delay);
          continue;
        }
        this.logger.warn(`unregister failed: ${describe(err, this.server)}; giving up`);
        return;
      }
    }
  }

  // ---- slots: each polls, runs and reports on a connection of its own ------------------

  /**
   * One concurrency slot's loop: a long poll for one task on the slot's connection, the task
   * run, its result reported on the same connection with a request for the next task (eager
   * dispatch), and so on while answers carry one. Behind a balancer that spreads connections
   * over the servers of a cluster, the slot's poll, its result and the next step all reach
   * the same server, the one that owns the execution.
   */
  async #runSlot(slot: Slot): Promise<void> {
    const backoff = new Backoff(this.#backoff);
    const stop = this.#stopping.signal;
    try {
      await this.#slotLoop(slot, stop, backoff);
    } finally {
      slot.pollsOver.resolve();
    }
  }

  async #slotLoop(slot: Slot, stop: AbortSignal, backoff: Backoff): Promise<void> {
    while (!stop.aborted) {
      let tasks: PolledTask[];
      const queued = this.#backlog.shift();
      if (queued) {
        tasks = [queued];
      } else {
        try {
          tasks = await this.#poll(slot, stop);
          backoff.reset();
        } catch (err) {
          if (err instanceof Stopped || stop.aborted) break;
          const delay = backoff.next();
          const level = isRetryable(err) ? "warn" : "error";
          this.logger[level](
            `poll failed: ${describe(err, this.server)}; retrying in ${formatSeconds(delay)}`,
          );
          try {
            await sleep(delay, stop);
          } catch {
            break;
          }
          continue;
        }
      }
      // More than one task in an answer (a runtime that ignores max_tasks): the rest wait for
      // the next free slot.
      for (const extra of tasks.slice(1)) this.#backlog.push(extra);
      const first = tasks[0];
      if (!first) continue;
      const chain = this.#chain(slot, first);
      slot.chain = chain;
      // A slot running tasks polls no more once stopping (stop() waits for its tasks instead).
      const over = () => slot.pollsOver.resolve();
      if (stop.aborted) over();
      else stop.addEventListener("abort", over, { once: true });
      try {
        await chain;
      } finally {
        stop.removeEventListener("abort", over);
        slot.chain = null;
      }
    }
  }

  /** Runs a task and the next ones its results' answers carry, one after the other. */
  async #chain(slot: Slot, first: PolledTask): Promise<void> {
    let task: PolledTask | undefined = first;
    while (task) task = await this.#run(slot, task);
  }

  /** One long poll for one task on the slot's connection; [] when it ran out or was ended. */
  async #poll(slot: Slot, stop: AbortSignal): Promise<PolledTask[]> {
    const sessionId = await this.#ensureSession();
    // Aborted by stop(), or when the session is found unknown elsewhere (a heartbeat).
    const poll = new AbortController();
    const onStop = () => poll.abort(stop.reason);
    stop.addEventListener("abort", onStop, { once: true });
    slot.poll = { sessionId, controller: poll };
    let res: { tasks?: PolledTask[] } | null;
    try {
      res = await slot.transport.post<{ tasks?: PolledTask[] }>("/v1/workers/poll", {
        session_id: sessionId,
        max_tasks: 1,
        wait_s: this.pollWaitS,
      }, { signal: poll.signal, timeoutMs: this.pollWaitS * 1000 + 15_000 });
    } catch (err) {
      if (isUnknownSession(err)) {
        this.#forgetSession(sessionId, "poll");
        return [];
      }
      if (err instanceof SessionLost && !stop.aborted) return [];
      if (stop.aborted) throw new Stopped();
      throw err;
    } finally {
      stop.removeEventListener("abort", onStop);
      slot.poll = null;
    }
    const tasks = Array.isArray(res?.tasks) ? res.tasks : [];
    if (tasks.length > 1) this.logger.warn(`poll answered ${tasks.length} tasks for max_tasks=1`);
    return tasks;
  }

  /**
   * Runs one task on the slot and reports its result; resolves when the slot is free again:
   * with the next task the result's answer carried (run it on this slot), or with nothing.
   * A result whose first delivery fails is retried in the background, the slot freed.
   */
  #run(slot: Slot, task: PolledTask): Promise<PolledTask | undefined> {
    if (!task || typeof task.token !== "string") {
      this.logger.error("poll answered a task without a token; ignoring it", { task });
      return Promise.resolve(undefined);
    }
    if (this.#inflight.has(task.token)) {
      this.logger.debug(`task ${task.token} handed out again while it runs here; ignoring`);
      return Promise.resolve(undefined);
    }
    return new Promise((free) => {
      const controller = new AbortController();
      const entry: Inflight = { task, controller, handlerDone: false, done: Promise.resolve() };
      this.#inflight.set(task.token, entry);
      entry.done = (async () => {
        let outcome: Outcome;
        try {
          outcome = await this.#execute(entry);
        } catch (err) {
          // #execute catches everything; this is a last resort.
          outcome = { kind: "fail", error: failureFrom(err) };
        } finally {
          entry.handlerDone = true;
        }
        // The slot stays held while the result's first delivery asks for the next task in
        // the same request (eager dispatch); it is freed as soon as that is settled.
        let held = !this.#stopping.signal.aborted;
        const release = () => {
          if (!held) return;
          held = false;
          free(undefined);
        };
        if (!held) free(undefined);
        try {
          const next = await this.#deliver(slot.transport, task, outcome, held ? release : null);
          if (held) {
            held = false;
            free(next[0]);
            for (const extra of next.slice(1)) this.#backlog.push(extra);
          } else {
            for (const t of next) this.#backlog.push(t);
          }
        } finally {
          release();
          this.#inflight.delete(task.token);
        }
      })();
    });
  }

  #abort(entry: Inflight, why: "cancel" | "deadline" | "shutdown"): void {
    if (entry.controller.signal.aborted) return;
    entry.abortedBy = why;
    const message = why === "cancel"
      ? "the ORBIT runtime cancelled this attempt"
      : why === "deadline"
      ? "the attempt's deadline passed"
      : "the worker is shutting down";
    const reason = new Error(message);
    reason.name = "AbortError";
    entry.controller.abort(reason);
  }

  async #execute(entry: Inflight): Promise<Outcome> {
    const { task } = entry;
    const def = this.#tasks.get(taskKey(task.task, task.contract));
    this.logger.info("executing", {
      execution_id: task.execution_id,
      step: task.step,
      attempt: task.attempt,
      task: task.task,
      redelivery: task.redelivery,
    });
    if (!def) {
      return {
        kind: "fail",
        error: {
          code: "UNKNOWN_TASK",
          message:
            `worker ${this.workerId} does not serve task ${task.task} contract ${task.contract}`,
          retryable: true,
          details: {},
        },
      };
    }

    const input = await validate(def.input, task.input);
    if (!input.ok) {
      return {
        kind: "fail",
        error: {
          code: "INVALID_INPUT",
          message: `invalid input for ${def.name}: ${input.message}`,
          retryable: false,
          details: { issues: input.issues },
        },
      };
    }

    const deadlineMs = deadlineOf(task.deadline_ms);
    let timer: ReturnType<typeof setTimeout> | undefined;
    if (deadlineMs !== undefined) {
      const delay = deadlineMs - Date.now();
      // A deadline far in the future needs no timer (and setTimeout overflows past ~24 days).
      if (delay < 2 ** 31 - 1) {
        timer = setTimeout(() => this.#abort(entry, "deadline"), Math.max(0, delay));
      }
    }
    const ctx: TaskContext = {
      token: task.token,
      executionId: task.execution_id,
      step: task.step,
      attempt: task.attempt,
      idempotencyKey: task.idempotency_key,
      redelivery: Boolean(task.redelivery),
      deadlineMs,
      task: task.task,
      contract: task.contract,
      signal: entry.controller.signal,
      logger: this.logger,
    };

    let raw: unknown;
    try {
      raw = await def.handler(input.value, ctx);
    } catch (err) {
      if (err instanceof TaskError) return { kind: "fail", error: failureFrom(err) };
      if (entry.abortedBy === "cancel") {
        return {
          kind: "fail",
          error: {
            code: "CANCELLED",
            message: `task cancelled by the ORBIT runtime: ${errorMessage(err)}`,
            retryable: true,
            details: {},
          },
        };
      }
      if (entry.abortedBy === "deadline") {
        return {
          kind: "fail",
          error: {
            code: "DEADLINE_EXCEEDED",
            message: `the attempt's deadline passed: ${errorMessage(err)}`,
            retryable: true,
            details: {},
          },
        };
      }
      return { kind: "fail", error: failureFrom(err) };
    } finally {
      if (timer !== undefined) clearTimeout(timer);
    }

    const output = await validate(def.output, raw);
    if (!output.ok) {
      return {
        kind: "fail",
        error: {
          code: "INVALID_OUTPUT",
          message: `invalid output of ${def.name}: ${output.message}`,
          retryable: false,
          details: { issues: output.issues },
        },
      };
    }
    return { kind: "complete", output: output.value === undefined ? null : output.value };
  }

  /**
   * Reports an attempt's result, retrying until it is delivered (or the worker gives up).
   * With `slot` (a held concurrency slot), the first request also asks for one next task
   * (`session_id`, `max_tasks: 1`), which the runtime may hand out in its answer; `slot` is
   * called to give the slot up before any retry. Returns the tasks the answer carried.
   */
  async #deliver(
    transport: Transport,
    task: PolledTask,
    outcome: Outcome,
    slot: (() => void) | null,
  ): Promise<PolledTask[]> {
    let current = outcome;
    let substituted = false;
    const backoff = new Backoff(this.#backoff);
    const abandon = this.#abandon.signal;
    for (;;) {
      const path = current.kind === "complete" ? "/v1/tasks/complete" : "/v1/tasks/fail";
      const take = slot && this.#session && !this.#stopping.signal.aborted
        ? { session_id: this.#session, max_tasks: 1 }
        : {};
      const body = current.kind === "complete"
        ? { token: task.token, output: current.output, ...take }
        : { token: task.token, error: current.error, ...take };
      try {
        const res = await transport.post<{ accepted?: boolean; tasks?: PolledTask[] } | null>(
          path,
          body,
          {
            signal: abandon,
            timeoutMs: this.#requestTimeoutMs,
          },
        );
        const next = "session_id" in take && Array.isArray(res?.tasks) ? res.tasks : [];
        if (res && res.accepted === false) {
          this.logger.debug(
            `result not accepted (the step already has one) token=${task.token} step=${task.step}`,
          );
        } else if (current.kind === "fail") {
          this.logger.info("task failed", {
            execution_id: task.execution_id,
            step: task.step,
            attempt: task.attempt,
            code: current.error.code,
          });
        }
        return next;
      } catch (err) {
        if (abandon.aborted) {
          this.logger.warn(`giving up reporting the result of ${task.token} (worker stopped)`);
          return [];
        }
        // Retries do not hold a slot: the answer may take long while the runtime is away.
        slot?.();
        slot = null;
        if (isRetryable(err)) {
          const delay = backoff.next();
          this.logger.warn(
            `report result failed: ${describe(err, this.server)}; retrying in ${
              formatSeconds(delay)
            }`,
          );
          try {
            await sleep(delay, abandon);
          } catch {
            this.logger.warn(`giving up reporting the result of ${task.token} (worker stopped)`);
            return [];
          }
          continue;
        }
        // A result the runtime refuses (400, 413, 422), or that is not JSON (a BigInt, a cycle:
        // JSON.stringify throws a TypeError before anything is sent), would be dropped, and its
        // attempt redelivered every session timeout for ever: it is reported as a small failure
        // instead, once (the retry policy then decides). Only if that is refused too is it dropped.
        const refused = err instanceof OrbitApiError &&
          (err.status === 400 || err.status === 413 || err.status === 422);
        const notJson = err instanceof TypeError;
        if (!substituted && (refused || notJson)) {
          const what = current.kind === "complete" ? "output" : "failure";
          const reason = refused
            ? `the runtime refused the ${what}: ${(err as OrbitApiError).code}: ${
              (err as OrbitApiError).message
            }`
            : `the ${what} is not JSON: ${(err as Error).message}`;
          this.logger.error(
            `${reason} (${task.token}); reporting a failure instead`,
          );
          current = {
            kind: "fail",
            error: {
              code: notJson
                ? "RESULT_NOT_JSON"
                : current.kind === "complete"
                ? "OUTPUT_REJECTED"
                : "RESULT_REJECTED",
              message: reason.length > 2000 ? `${reason.slice(0, 1997)}...` : reason,
              retryable: false,
              details: {},
            },
          };
          substituted = true;
          continue;
        }
        this.logger.error(
          `report result failed: ${
            describe(err, this.server)
          }; dropping the result of ${task.token}`,
        );
        return [];
      }
    }
  }

  // ---- heartbeats ---------------------------------------------------------------------

  async #runHeartbeatLoop(): Promise<void> {
    const backoff = new Backoff(this.#backoff);
    const stop = this.#hbStop.signal;
    let delay = this.heartbeatMs;
    while (!stop.aborted) {
      try {
        await sleep(delay, stop);
      } catch {
        break;
      }
      delay = this.heartbeatMs;
      const sessionId = this.#session;
      if (!sessionId) {
        // The poll loop registers again; while stopping there is nothing to keep alive.
        if (!this.#stopping.signal.aborted) this.#ensureSession().catch(() => {});
        continue;
      }
      const tokens = [...this.#inflight.keys()];
      try {
        const res = await this.#transport.post<{ cancel?: string[] } | null>(
          "/v1/workers/heartbeat",
          { session_id: sessionId, tokens },
          { signal: stop, timeoutMs: this.#requestTimeoutMs },
        );
        backoff.reset();
        for (const token of res?.cancel ?? []) {
          const entry = this.#inflight.get(token);
          if (!entry || entry.handlerDone) continue;
          this.logger.info(`task cancelled by the runtime token=${token} step=${entry.task.step}`);
          this.#abort(entry, "cancel");
        }
      } catch (err) {
        if (stop.aborted) break;
        if (isUnknownSession(err)) {
          this.#forgetSession(sessionId, "heartbeat");
          if (!this.#stopping.signal.aborted) this.#ensureSession().catch(() => {});
          delay = 0;
          continue;
        }
        delay = backoff.next();
        const level = isRetryable(err) ? "warn" : "error";
        this.logger[level](
          `heartbeat failed: ${describe(err, this.server)}; retrying in ${formatSeconds(delay)}`,
        );
      }
    }
  }

  // ---- retries ------------------------------------------------------------------------

  /**
   * Runs `fn` until it succeeds, retrying connection errors and 5xx with backoff (and other
   * errors too when `retryOthers()` says so). Rejects with {@link Stopped} when `signal` aborts.
   */
  async #retrying<T>(
    op: string,
    signal: AbortSignal,
    fn: (signal: AbortSignal) => Promise<T>,
    retryOthers: () => boolean = () => false,
  ): Promise<T> {
    const backoff = new Backoff(this.#backoff);
    for (;;) {
      if (signal.aborted) throw new Stopped();
      try {
        return await fn(signal);
      } catch (err) {
        if (signal.aborted) throw new Stopped();
        const retryable = isRetryable(err);
        if (!retryable && !retryOthers()) throw err;
        const delay = backoff.next();
        this.logger[retryable ? "warn" : "error"](
          `${op} failed: ${describe(err, this.server)}; retrying in ${formatSeconds(delay)}`,
        );
        try {
          await sleep(delay, signal);
        } catch {
          throw new Stopped();
        }
      }
    }
  }
}

function taskKey(name: string, contract: string): string {
  return `${name}\u0000${contract}`;
}

/** `deadline_ms` is epoch milliseconds; small values are read as a duration from now. */
function deadlineOf(value: unknown): number | undefined {
  if (typeof value !== "number" || !Number.isFinite(value) || value <= 0) return undefined;
  return value > 1e11 ? value : Date.now() + value;
}

function errorMessage(err: unknown): string {
  if (err instanceof Error) return err.message || err.name;
  return String(err);
}

function failureFrom(err: unknown): TaskFailure {
  if (err instanceof TaskError) {
    return {
      code: err.code,
      message: err.message,
      retryable: err.retryable,
      details: err.details === undefined ? {} : err.details,
    };
  }
  const details: Record<string, unknown> = {};
  if (err instanceof Error) {
    details.type = err.name;
    if (err.stack) details.stack = err.stack.split("\n").slice(0, 12).join("\n");
  } else {
    details.type = typeof err;
  }
  return { code: "TASK_ERROR", message: errorMessage(err), retryable: true, details };
}

/** How a failed request reads in a log line. */
function describe(err: unknown, server: string): string {
  if (err instanceof OrbitConnectionError) return err.message;
  if (err instanceof OrbitApiError) {
    return `ORBIT runtime at ${server} answered ${err.status} ${err.code}: ${err.message}`;
  }
  return errorMessage(err);
}
