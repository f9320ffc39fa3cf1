/**
 * Composition of one server's engine: store, group committer, definitions, executions and
 * workers. `main.ts` opens it, recovers history, and hands it to the routes.
 */
import { GroupCommitter } from "./committer.ts";
import { Definitions } from "./definitions.ts";
import { type Clock, Executions } from "./executions.ts";
import { Metrics } from "./metrics.ts";
import type { Store } from "./store/store.ts";
import { Workers } from "./workers.ts";
import { SUPPORTED_IR } from "./engine/ir.ts";
import { API_VERSION, RUNTIME_VERSION } from "./version.ts";
import { log } from "./log.ts";

export interface RuntimeOptions {
  sessionTimeoutMs: number;
  maxActiveExecutions: number | null;
  clock?: Clock;
}

export const systemClock: Clock = { now: () => Date.now(), newId: () => crypto.randomUUID() };

export class Runtime {
  readonly metrics = new Metrics();
  readonly committer: GroupCommitter;
  readonly definitions: Definitions;
  readonly executions: Executions;
  readonly workers: Workers;
  readonly clock: Clock;
  readonly role = "single" as const;

  constructor(readonly store: Store, readonly opts: RuntimeOptions) {
    this.clock = opts.clock ?? systemClock;
    this.committer = new GroupCommitter(store, this.metrics, store.kind === "postgres" ? 4 : 1);
    this.definitions = new Definitions(store, this.clock.now);
    this.executions = new Executions(
      store,
      this.committer,
      this.definitions,
      this.clock,
      this.metrics,
      {
        maxActive: opts.maxActiveExecutions,
      },
    );
    this.workers = new Workers(this.executions, this.metrics, {
      sessionTimeoutMs: opts.sessionTimeoutMs,
      now: this.clock.now,
      newId: this.clock.newId,
    });
  }

  /** Rebuilds every running execution from history and starts the session sweeper. */
  async start(): Promise<void> {
    const r = await this.executions.recover();
    log.engine.info("recovered active executions from history", {
      executions: r.executions,
      in_flight: r.in_flight,
    });
    this.workers.start();
  }

  /** Stops timers and polls, lets in-flight appends finish, closes the store. */
  async stop(): Promise<void> {
    this.workers.stop();
    this.executions.stop();
    await this.committer.idle();
    await this.store.close();
  }

  cluster() {
    return { role: this.role, node_id: null, term: null, leader: null };
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

  ready() {
    return { ...this.cluster(), ready: true };
  }

  renderMetrics(): string {
    return this.metrics.render({
      orbit_active_executions: this.executions.active.size,
      orbit_worker_sessions: this.workers.sessions.size,
    });
  }
}
