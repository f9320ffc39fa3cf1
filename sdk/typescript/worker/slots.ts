/** Worker role, the producer: concurrency slots, each long-polling and running one task at a time. */

import { isRetryable, isUnknownSession, OrbitConnectionError } from "../errors.ts";
import { Backoff, formatSeconds, sleep, Transport } from "../http.ts";
import { http1PoolFor } from "../http1.ts";
import {
  describe,
  type Inflight,
  type Outcome,
  type PolledTask,
  SessionLost,
  Stopped,
  type WorkerCore,
} from "./common.ts";
import { execute, failureFrom, type TaskTable } from "./execute.ts";
import { Nodes, Rerouted } from "./nodes.ts";
import { deliver } from "./report.ts";
import type { Session } from "./session.ts";

/** How the slots connect and poll. */
export interface SlotOptions {
  server: string;
  token?: string;
  fetch?: typeof fetch;
  connectionPerSlot?: boolean;
  concurrency: number;
  /** Long-poll wait in seconds. */
  pollWaitS: number;
  /** Spread the slots over a shared cluster's live nodes (see worker/nodes.ts; default true). */
  spreadOverNodes?: boolean;
  /** How often the live nodes are read again (default 5000 ms). */
  nodeRefreshMs?: number;
}

/** One concurrency slot: its connection and its long poll. */
interface Slot {
  readonly index: number;
  /** The node this slot talks to (its advertised address), or null: the configured address. */
  target: string | null;
  transport: Transport;
  /** The slot's own connection (closed when the worker stops), when the runtime offers one. */
  client: { close(): void } | null;
  poll: { sessionId: string; controller: AbortController } | null;
  /** Ends the first delivery of a result to the slot's server when that server leaves. */
  delivery: AbortController | null;
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

/**
 * The worker's concurrency slots. Each polls, runs and reports on a connection of its own: a
 * long poll for one task, the task run, its result reported on the same connection with a
 * request for the next task (eager dispatch), and so on while answers carry one.
 */
export class Slots {
  readonly #core: WorkerCore;
  readonly #session: Session;
  readonly #tasks: TaskTable;
  readonly #pollWaitS: number;
  readonly #slots: Slot[];
  /** A connection of a slot's own to an address (the configured one, or a node's). */
  readonly #connect: (server: string) => Pick<Slot, "transport" | "client">;
  /** Which node each slot talks to. */
  readonly nodes: Nodes;
  /** Whether each slot has a connection of its own. */
  readonly connectionPerSlot: boolean;
  #started = false;

  constructor(core: WorkerCore, session: Session, tasks: TaskTable, options: SlotOptions) {
    this.#core = core;
    this.#session = session;
    this.#tasks = tasks;
    this.#pollWaitS = options.pollWaitS;
    // A slot's own connection: plain HTTP/1.1 on Deno.connect for an http: server, Deno's
    // fetch with an HTTP client of its own for https:.
    const perSlot = options.connectionPerSlot !== false && !options.fetch;
    const httpClient = perSlot ? denoHttpClient() : undefined;
    this.#connect = (server: string): Pick<Slot, "transport" | "client"> => {
      const settings = { server, token: options.token };
      const pool = perSlot ? http1PoolFor(server) : null;
      if (pool) return { transport: new Transport(settings, pool.exchange), client: pool };
      if (!httpClient) {
        // The shared fetch pool: the worker's transport, or one more for a node's address.
        const transport = server === core.transport.server
          ? core.transport
          : new Transport({ ...settings, fetch: options.fetch });
        return { transport, client: null };
      }
      const client = httpClient({ poolMaxIdlePerHost: 1 });
      const transport = new Transport({
        ...settings,
        fetch: (input, init) => fetch(input, { ...init, client } as unknown as RequestInit),
      });
      return { transport, client };
    };
    this.#slots = Array.from({ length: options.concurrency }, (_, index) => ({
      index,
      target: null,
      ...this.#connect(core.transport.server),
      poll: null,
      delivery: null,
      chain: null,
      pollsOver: deferred(),
    }));
    this.connectionPerSlot = this.#slots[0]!.client !== null;
    this.nodes = new Nodes(core, {
      enabled: options.spreadOverNodes !== false,
      refreshMs: options.nodeRefreshMs ?? 5_000,
      onLeft: (left) => {
        for (const slot of this.#slots) {
          if (slot.target !== null && left.has(slot.target)) {
            slot.poll?.controller.abort(new Rerouted());
            slot.delivery?.abort(new Rerouted());
          }
        }
      },
    });
  }

  /** Whether the slots' loops were started. */
  get started(): boolean {
    return this.#started;
  }

  /** Starts every slot's loop (after `nodes.start()` read the cluster's live nodes). */
  start(): void {
    this.#started = true;
    for (const slot of this.#slots) void this.#runSlot(slot);
  }

  /** Points the slot at the node it should talk to now (a new connection when that changed). */
  #route(slot: Slot): void {
    const target = this.nodes.targetFor(slot.index);
    if (target === slot.target) return;
    slot.client?.close();
    Object.assign(slot, this.#connect(target ?? this.#core.transport.server));
    slot.target = target;
  }

  /** Resolves when no slot will poll again (after stopping began). */
  pollsOver(): Promise<void[]> {
    return Promise.all(this.#slots.map((slot) => slot.pollsOver.promise));
  }

  /** Ends the long polls of a session found unknown. */
  abortPolls(sessionId: string): void {
    for (const slot of this.#slots) {
      if (slot.poll?.sessionId === sessionId) slot.poll.controller.abort(new SessionLost());
    }
  }

  /** Closes the slots' own connections and stops reading the live nodes. */
  close(): void {
    this.nodes.stop();
    for (const slot of this.#slots) slot.client?.close();
  }

  /** Resolves when every task taken (running, reporting, or in the backlog) is done. */
  async drained(): Promise<void> {
    const core = this.#core;
    const chains = () => this.#slots.flatMap((slot) => (slot.chain ? [slot.chain] : []));
    while (core.inflight.size > 0 || core.backlog.length > 0 || chains().length > 0) {
      // Tasks accepted but not started yet (a runtime that answered more than it was asked).
      const slot = this.#slots[0]!;
      for (const task of core.backlog.splice(0)) void this.#run(slot, task);
      await Promise.allSettled([...core.inflight.values()].map((e) => e.done).concat(chains()));
    }
  }

  /**
   * One concurrency slot's loop: a long poll for one task on the slot's connection, the task
   * run, its result reported on the same connection with a request for the next task (eager
   * dispatch), and so on while answers carry one. Behind a balancer that spreads connections
   * over the servers of a cluster, the slot's poll, its result and the next step all reach
   * the same server, the one that owns the execution.
   */
  async #runSlot(slot: Slot): Promise<void> {
    const backoff = new Backoff(this.#core.backoff);
    const stop = this.#core.stopping;
    try {
      await this.#slotLoop(slot, stop, backoff);
    } finally {
      slot.pollsOver.resolve();
    }
  }

  async #slotLoop(slot: Slot, stop: AbortSignal, backoff: Backoff): Promise<void> {
    const core = this.#core;
    while (!stop.aborted) {
      let tasks: PolledTask[];
      const queued = core.backlog.shift();
      if (queued) {
        tasks = [queued];
      } else {
        this.#route(slot);
        try {
          tasks = await this.#poll(slot, stop);
          backoff.reset();
        } catch (err) {
          if (err instanceof Stopped || stop.aborted) break;
          if (slot.target !== null && err instanceof OrbitConnectionError) {
            // The node's address does not answer: the configured address meanwhile, at once.
            this.nodes.unreachable(slot.target, err.reason);
            continue;
          }
          const delay = backoff.next();
          const level = isRetryable(err) ? "warn" : "error";
          core.logger[level](
            `poll failed: ${describe(err, core.server)}; retrying in ${formatSeconds(delay)}`,
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
      for (const extra of tasks.slice(1)) core.backlog.push(extra);
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
    const sessionId = await this.#session.ensure();
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
        wait_s: this.#pollWaitS,
      }, { signal: poll.signal, timeoutMs: this.#pollWaitS * 1000 + 15_000 });
    } catch (err) {
      if (isUnknownSession(err)) {
        this.#session.forget(sessionId, "poll");
        return [];
      }
      if ((err instanceof SessionLost || err instanceof Rerouted) && !stop.aborted) return [];
      if (stop.aborted) throw new Stopped();
      throw err;
    } finally {
      stop.removeEventListener("abort", onStop);
      slot.poll = null;
    }
    const tasks = Array.isArray(res?.tasks) ? res.tasks : [];
    if (tasks.length > 1) {
      this.#core.logger.warn(`poll answered ${tasks.length} tasks for max_tasks=1`);
    }
    return tasks;
  }

  /**
   * Runs one task on the slot and reports its result; resolves when the slot is free again:
   * with the next task the result's answer carried (run it on this slot), or with nothing.
   * A result whose first delivery fails is retried in the background, the slot freed.
   */
  #run(slot: Slot, task: PolledTask): Promise<PolledTask | undefined> {
    const core = this.#core;
    if (!task || typeof task.token !== "string") {
      core.logger.error("poll answered a task without a token; ignoring it", { task });
      return Promise.resolve(undefined);
    }
    if (core.inflight.has(task.token)) {
      core.logger.debug(`task ${task.token} handed out again while it runs here; ignoring`);
      return Promise.resolve(undefined);
    }
    return new Promise((free) => {
      const controller = new AbortController();
      const entry: Inflight = { task, controller, handlerDone: false, done: Promise.resolve() };
      core.inflight.set(task.token, entry);
      entry.done = (async () => {
        let outcome: Outcome;
        try {
          outcome = await execute(core, this.#tasks, entry);
        } catch (err) {
          // execute catches everything; this is a last resort.
          outcome = { kind: "fail", error: failureFrom(err) };
        } finally {
          entry.handlerDone = true;
        }
        // The slot stays held while the result's first delivery asks for the next task in
        // the same request (eager dispatch); it is freed as soon as that is settled.
        let held = !core.stopping.aborted;
        const release = () => {
          if (!held) return;
          held = false;
          free(undefined);
        };
        if (!held) free(undefined);
        // Ends the first delivery when the slot's server leaves (onLeft) or the worker gives
        // up (abandon), by a listener: AbortSignal.any would add an entry to the worker's
        // long-lived abandon signal for every result, which Deno never removes.
        const cut = new AbortController();
        const onAbandon = () => cut.abort(core.abandon.reason);
        core.abandon.addEventListener("abort", onAbandon, { once: true });
        if (core.abandon.aborted) onAbandon();
        slot.delivery = cut;
        try {
          const next = await deliver(
            core,
            this.#session,
            slot.transport,
            task,
            outcome,
            held ? release : null,
            slot.target !== null,
            cut.signal,
          );
          if (held) {
            held = false;
            free(next[0]);
            for (const extra of next.slice(1)) core.backlog.push(extra);
          } else {
            for (const t of next) core.backlog.push(t);
          }
        } finally {
          core.abandon.removeEventListener("abort", onAbandon);
          if (slot.delivery === cut) slot.delivery = null;
          release();
          core.inflight.delete(task.token);
        }
      })();
    });
  }
}
