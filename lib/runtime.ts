/**
 * Composition of one server's engine: store, group committer, definitions, executions,
 * workers and the scheduler. `main.ts` opens it, recovers history, and hands it to the routes.
 */
import { GroupCommitter } from "./committer.ts";
import { Definitions } from "./definitions.ts";
import { type Clock, Executions } from "./executions.ts";
import { Metrics } from "./metrics.ts";
import type { Store } from "./store/store.ts";
import { Workers } from "./workers.ts";
import { HttpAdapter } from "./http_adapter.ts";
import { Children } from "./children.ts";
import { Scheduler } from "./scheduler.ts";
import { ScheduleService } from "./schedule_service.ts";
import { SUPPORTED_IR } from "./engine/ir.ts";
import { API_VERSION, RUNTIME_VERSION } from "./version.ts";
import { log } from "./log.ts";
import type { ClusterView } from "../cluster/node.ts";

export interface RuntimeOptions {
  sessionTimeoutMs: number;
  maxActiveExecutions: number | null;
  /** Standby mode: the cluster this server takes part in (cluster/node.ts). */
  cluster?: ClusterView | null;
  /** A standby's runtime: never started, reads only (waits re-read the database). */
  readOnly?: boolean;
  /** `--http-allow`: hosts the built-in HTTP adapter may call (none when absent). */
  httpAllow?: string[];
  clock?: Clock;
}

export const systemClock: Clock = { now: () => Date.now(), newId: () => crypto.randomUUID() };

export class Runtime {
  readonly metrics = new Metrics();
  readonly committer: GroupCommitter;
  readonly definitions: Definitions;
  readonly executions: Executions;
  readonly workers: Workers;
  /** Runs orbit-ir/2 `http` steps. */
  readonly http: HttpAdapter;
  /** Starts the children of `child` steps and hands their results to the parents. */
  readonly children: Children;
  /** Fires schedule occurrences; a single server always runs it. */
  readonly scheduler: Scheduler;
  readonly schedules: ScheduleService;
  readonly clock: Clock;

  constructor(readonly store: Store, readonly opts: RuntimeOptions) {
    this.clock = opts.clock ?? systemClock;
    this.committer = new GroupCommitter(store, this.metrics, store.kind === "postgres" ? 4 : 1);
    this.definitions = new Definitions(store, this.clock.now, { httpAllow: opts.httpAllow ?? [] });
    this.executions = new Executions(
      store,
      this.committer,
      this.definitions,
      this.clock,
      this.metrics,
      {
        maxActive: opts.maxActiveExecutions,
        readOnly: opts.readOnly ?? false,
      },
    );
    this.workers = new Workers(this.executions, this.metrics, {
      sessionTimeoutMs: opts.sessionTimeoutMs,
      now: this.clock.now,
      newId: this.clock.newId,
    });
    this.http = new HttpAdapter(this.executions, {
      allow: opts.httpAllow ?? [],
      newId: this.clock.newId,
      sessionTimeoutMs: opts.sessionTimeoutMs,
    });
    this.children = new Children(this.executions);
    this.executions.addObserver(this.http);
    this.executions.addObserver(this.children);
    this.scheduler = new Scheduler(
      { store, executions: this.executions, metrics: this.metrics, clock: this.clock },
      { owner: `single-${this.clock.newId()}` },
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
  async start(): Promise<void> {
    const r = await this.executions.recover();
    log.engine.info("recovered active executions from history", {
      executions: r.executions,
      in_flight: r.in_flight,
    });
    this.children.afterRecovery();
    this.workers.start();
    // The only scheduler there is: claims left in the table are a previous process's.
    await this.scheduler.start({ dropClaims: true });
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

  cluster() {
    const c = this.opts.cluster;
    if (!c) return { role: "single", node_id: null, term: null, leader: null };
    return { role: c.role(), node_id: c.nodeId, term: c.term(), leader: c.leader() };
  }

  health() {
    return {
      status: "ok",
      api_version: API_VERSION,
      runtime_version: RUNTIME_VERSION,
      ir_versions: [...SUPPORTED_IR],
      active_executions: this.executions.active.size,
      worker_sessions: this.workers.sessions.size,
      ...this.cluster(),
    };
  }

  /** 200 only on a server that may write: a single server, or the leader within its lease. */
  ready() {
    return { ...this.cluster(), ready: this.opts.cluster ? this.opts.cluster.serving() : true };
  }

  renderMetrics(): string {
    return this.metrics.render({
      orbit_active_executions: this.executions.active.size,
      orbit_worker_sessions: this.workers.sessions.size,
    });
  }
}
