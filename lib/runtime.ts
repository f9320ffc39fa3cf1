/**
 * Composition of one server's engine: store, group committer, definitions, executions,
 * workers and the scheduler. `main.ts` opens it, recovers history, and hands it to the routes.
 */
import { GroupCommitter } from "./executions/committer.ts";
import { Definitions } from "./definitions.ts";
import { ExecutionReads } from "./executions/reads.ts";
import { Executions } from "./executions/executions.ts";
import type { Clock, Ownership } from "./executions/types.ts";
import { Metrics } from "./metrics.ts";
import type { Store } from "./store/store.ts";
import { Dispatcher, type WorkerService } from "./workers/dispatcher.ts";
import { WorkerSessions } from "./workers/sessions.ts";
import { HttpAdapter } from "./steps/http.ts";
import { type ChildLimitOptions, Children, DEFAULT_CHILD_LIMITS } from "./steps/children.ts";
import { Scheduler } from "./schedules/scheduler.ts";
import { ScheduleService } from "./schedules/service.ts";
import { SUPPORTED_IR } from "./engine/ir.ts";
import { API_VERSION, RUNTIME_VERSION } from "./version.ts";
import { log } from "./log.ts";
import type { ClusterView } from "./cluster_view.ts";

export interface RuntimeOptions {
  sessionTimeoutMs: number;
  maxActiveExecutions: number | null;
  /** `--cache-executions`: idle executions beyond this many leave memory (none: all stay). */
  cacheExecutions?: number | null;
  /** Standby mode: the cluster this server takes part in (cluster/standby_node.ts). */
  cluster?: ClusterView | null;
  /** A standby's runtime: never started, reads only (waits re-read the database). */
  readOnly?: boolean;
  /** `--http-allow`: hosts the built-in HTTP adapter may call (none when absent). */
  httpAllow?: string[];
  /** The limits on child workflows (absent: DEFAULT_CHILD_LIMITS). */
  childLimits?: ChildLimitOptions;
  clock?: Clock;
  /**
   * Shared mode (cluster/shared/node.ts): the node's ownership of executions, its worker service
   * over the shared queue, what it loads at start instead of every running execution, and
   * the scheduler's owner id (claims of other nodes stay).
   */
  shared?: {
    ownership: Ownership;
    workers(executions: Executions, metrics: Metrics): WorkerService;
    recover(): Promise<{ executions: number; in_flight: number }>;
  } | null;
}

/**
 * A UUID version 7: the millisecond time in its first 48 bits, then 74 random bits. Ids made
 * later sort after (the ms at least), so the history rows of runs started together sit together
 * in `execution_events`' primary key (run_id, seq) instead of one random leaf page per run:
 * a commit writes fewer pages (on the SQLite bench 215 -> 140 KB written per order).
 */
export function timeOrderedId(now = Date.now()): string {
  const random = crypto.randomUUID(); // xxxxxxxx-xxxx-4xxx-Vxxx-xxxxxxxxxxxx
  const t = now.toString(16).padStart(12, "0");
  return `${t.slice(0, 8)}-${t.slice(8, 12)}-7${random.slice(15)}`;
}

export const systemClock: Clock = { now: () => Date.now(), newId: () => timeOrderedId() };

export class Runtime {
  readonly metrics = new Metrics();
  readonly committer: GroupCommitter;
  readonly definitions: Definitions;
  readonly executions: Executions;
  readonly workers: WorkerService;
  /** Runs orbit-ir/2 `http` steps. */
  readonly http: HttpAdapter;
  /** Starts the children of `child` steps and hands their results to the parents. */
  readonly children: Children;
  /** Fires schedule occurrences; a single server always runs it. */
  readonly scheduler: Scheduler;
  readonly schedules: ScheduleService;
  /** Reads of executions and histories for the routes (from the database, on every server). */
  readonly reads: ExecutionReads;
  readonly clock: Clock;

  constructor(readonly store: Store, readonly opts: RuntimeOptions) {
    this.clock = opts.clock ?? systemClock;
    this.reads = new ExecutionReads(store);
    const shared = opts.shared ?? null;
    // One commit in flight at a time, on PostgreSQL too, and in shared mode: with four the
    // appends that queue behind a commit split over more, smaller ones (single server: 3.3
    // commits per order on the bench against 2.2; one shared server: 4.1 against 2.7 and
    // 128-134 against 150-157 orders/s), for no shorter cycle.
    this.committer = new GroupCommitter(store, this.metrics, 1);
    const limits = opts.childLimits ?? DEFAULT_CHILD_LIMITS;
    this.definitions = new Definitions(store, this.clock.now, {
      httpAllow: opts.httpAllow ?? [],
    });
    this.executions = new Executions(
      store,
      this.committer,
      this.definitions,
      this.clock,
      this.metrics,
      {
        maxActive: opts.maxActiveExecutions,
        cacheExecutions: opts.cacheExecutions ?? null,
        readOnly: opts.readOnly ?? false,
        ownership: shared?.ownership ?? null,
        childLimits: { max_depth: limits.maxDepth, max_children: limits.maxChildren },
      },
    );
    this.workers = shared
      ? shared.workers(this.executions, this.metrics)
      : this.#memoryWorkers(opts.sessionTimeoutMs);
    this.http = new HttpAdapter(this.executions, {
      allow: opts.httpAllow ?? [],
      newId: this.clock.newId,
      sessionTimeoutMs: opts.sessionTimeoutMs,
    });
    this.children = new Children(this.executions, limits.maxDescendants);
    this.executions.addObserver(this.http);
    this.executions.addObserver(this.children);
    this.scheduler = new Scheduler(
      { store, executions: this.executions, metrics: this.metrics, clock: this.clock },
      {
        // Shared mode: the process, not only the node id. A process replaced under its node id
        // (paused, then resumed after its successor started) must not take its successor's
        // claim for its own, nor its successor the claim of a pass it never ran.
        owner: opts.cluster && shared
          ? (opts.cluster.instance
            ? `${opts.cluster.nodeId}/${opts.cluster.instance}`
            : opts.cluster.nodeId)
          : `single-${this.clock.newId()}`,
      },
    );
    this.schedules = new ScheduleService(
      store,
      this.definitions,
      this.executions,
      this.scheduler,
      this.clock,
      this.metrics,
    );
  }

  /** Rebuilds every running execution from history and starts the session sweeper. */
  /** The dispatcher of one server (and standby mode): sessions and the task queue in memory. */
  #memoryWorkers(sessionTimeoutMs: number): Dispatcher {
    const opts = { sessionTimeoutMs, now: this.clock.now, newId: this.clock.newId };
    return new Dispatcher(this.executions, this.metrics, opts, {
      sessions: new WorkerSessions(opts),
    });
  }

  async start(): Promise<void> {
    const shared = this.opts.shared;
    const r = shared ? await shared.recover() : await this.executions.recover();
    log.engine.info("recovered active executions from history", {
      executions: r.executions,
      in_flight: r.in_flight,
    });
    this.children.afterRecovery();
    this.workers.start();
    // The only scheduler there is: claims left in the table are a previous process's. In
    // shared mode every node schedules, and other nodes' claims are live.
    await this.scheduler.start({ dropClaims: !shared });
  }

  /** Stops timers and polls, lets in-flight appends finish, closes the store. */
  async stop(): Promise<void> {
    await this.scheduler.stop();
    this.workers.stop();
    this.http.stop();
    this.children.stop();
    this.executions.stop();
    await this.committer.idle();
    await this.store.close();
  }

  async cluster(): Promise<Record<string, unknown>> {
    const c = this.opts.cluster;
    if (!c) return { role: "single", node_id: null, term: null, leader: null };
    return {
      role: c.role(),
      node_id: c.nodeId,
      term: c.term(),
      leader: c.leader(),
      ...(c.details ? await c.details() : {}),
    };
  }

  async health() {
    // Shared mode: the cluster's sessions (a worker registered through any server is served by
    // every one), read beside the cluster's fields.
    const [sessions, cluster] = await Promise.all([
      this.workers.sessionCount?.() ?? this.workers.sessions.size,
      this.cluster(),
    ]);
    return {
      status: "ok",
      api_version: API_VERSION,
      runtime_version: RUNTIME_VERSION,
      ir_versions: [...SUPPORTED_IR],
      active_executions: this.executions.running,
      worker_sessions: sessions,
      ...cluster,
    };
  }

  /**
   * 200 only on a server that may write: a single server, the leader within its lease, or a
   * shared node that has resumed its executions and writes its heartbeat.
   */
  async ready() {
    const cluster = await this.cluster();
    return { ...cluster, ready: this.opts.cluster ? this.opts.cluster.serving() : true };
  }

  renderMetrics(): string {
    return this.metrics.render({
      orbit_active_executions: this.executions.running,
      orbit_cached_executions: this.executions.heldCount,
      orbit_worker_sessions: this.workers.sessions.size,
      // Long polls this server holds open now: worker slots waiting here for a task.
      orbit_worker_polls_open: [...this.workers.sessions.values()].reduce(
        (n, s) => n + s.polling,
        0,
      ),
    });
  }
}
