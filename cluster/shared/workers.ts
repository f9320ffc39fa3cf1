/**
 * Shared mode's worker service (reference page, "Task queue" and "Worker sessions"): the one
 * dispatcher of lib/workers/dispatcher.ts, composed of the shared parts, so that a worker can
 * register, poll, heartbeat and report through any server. Polls, offers, eager dispatch and
 * report are the dispatcher's, as on one server; what is shared mode's lives in its own file:
 *
 *   sessions.ts  the SessionStore: the cluster's sessions (orbit_sessions), cached here,
 *                contacts written, heartbeats confirmed
 *   attempts.ts  the owner's watch over the sessions holding its attempts (the store's checks)
 *   claims.ts    TaskClaims: the claim statement over orbit_tasks, releases, lost claims found
 *   eager.ts     a result forwarded to this owner: the step it makes ready, dispatched in its
 *                own append
 *
 * The dispatcher's TaskQueue here is the mirror of the rows of executions this node owns: a
 * poll takes from it first (each dispatch claims its row in its own commit, no claim
 * statement), then claims. Tasks live in `orbit_tasks`, queued by their owner in the
 * transaction of StepScheduled (lib/executions/shared_changes.ts). A result reported here for
 * an execution owned elsewhere is forwarded (cluster/shared/forward.ts) with the worker's
 * session, and the owner answers the next task.
 *
 * Failure handling: a dispatch that cannot be recorded puts the row back on the queue; a
 * claim for an execution that no longer wants it is cancelled, and the worker hears it on its
 * next heartbeat. Long polls wake on NOTIFY orbit_tasks and look again every second.
 */
import type { StepState } from "../../lib/engine/state.ts";
import type { Executions } from "../../lib/executions/executions.ts";
import type { Metrics } from "../../lib/metrics.ts";
import {
  Dispatcher,
  type EagerSession,
  serves,
  type SessionStore,
  type SessionView,
  type TokenHolder,
} from "../../lib/workers/dispatcher.ts";
import * as q from "../../sql/postgres/shared/mod.ts";
import { MemoryTaskQueue } from "../../lib/workers/queue.ts";
import { AttemptWatch } from "./attempts.ts";
import { Claims, FOREIGN_TASK_DELAY_MS, POLL_RECHECK_MS } from "./claims.ts";
import { type EagerDispatch, eagerDispatch } from "./eager.ts";
import { queryOn, SharedSessions, type SharedWorkersOptions } from "./sessions.ts";

export type { SharedWorkersOptions } from "./sessions.ts";
export { claimWindow } from "./claims.ts";

const CONTACT_FLUSH_MS = 250;
const CONTACT_CHECK_MS = 500;
const LOCAL_PRUNE_MS = 5000;
const LOST_CLAIM_CHECK_MS = 1000;

/** The parts of shared mode's dispatcher, built before it (see SharedWorkers). */
function sharedParts(executions: Executions, metrics: Metrics, opts: SharedWorkersOptions) {
  const w = { executions, metrics, opts, q: queryOn(opts.sql) };
  const sessions = new SharedSessions(w);
  const attempts = new AttemptWatch(w, sessions);
  let timers: ReturnType<typeof setInterval>[] = [];
  const store: SessionStore = {
    sessions: sessions.sessions,
    register: (r) => sessions.register(r),
    contact: (id) => sessions.contact(id),
    touch: (s) => sessions.touch(s),
    heartbeat: (s, tokens) => sessions.heartbeat(s, tokens),
    remove: (s) => sessions.remove(s),
    list: () => sessions.list(),
    installed: (prev, next) => attempts.installed(prev, next),
    dropped: (last) => attempts.dropped(last),
    // The owner judges its attempts itself (AttemptWatch), so nothing goes to `lost`.
    start: () => {
      timers.push(setInterval(() => sessions.flushContacts(), CONTACT_FLUSH_MS));
      timers.push(setInterval(() => attempts.check(), CONTACT_CHECK_MS));
    },
    stop: () => {
      for (const t of timers) clearInterval(t);
      timers = [];
    },
  };
  return { w, sessions, attempts, store, local: new MemoryTaskQueue(executions, () => opts.now()) };
}

export class SharedWorkers extends Dispatcher {
  readonly #sessions: SharedSessions;
  readonly #attempts: AttemptWatch;
  readonly #claims: Claims;
  /**
   * The queued tasks of executions owned here (their rows' mirror); entries that left the
   * queue are dropped when met, and every few seconds.
   */
  readonly #local: MemoryTaskQueue;
  #timers: ReturnType<typeof setInterval>[] = [];

  constructor(executions: Executions, metrics: Metrics, readonly shared: SharedWorkersOptions) {
    const p = sharedParts(executions, metrics, shared);
    // The claims call back into the dispatcher, which exists once super() has run.
    let self: SharedWorkers | null = null;
    const claims = new Claims(p.w, {
      requeued: () => self?.requeued(),
      wake: () => self?.wake(),
      uncertain: (id, token, reason) => void self?.uncertain(id, token, reason),
    });
    super(executions, metrics, shared, {
      sessions: p.store,
      queue: p.local,
      claims: { claim: (s, max) => claims.claim(s, max), recheckMs: POLL_RECHECK_MS },
      catchUp: (id) => shared.drainInbox(id),
    });
    self = this;
    this.#sessions = p.sessions;
    this.#attempts = p.attempts;
    this.#claims = claims;
    this.#local = p.local;
    this.#sessions.onForget = (id) => {
      claims.forget(id);
      this.sessionGone(id);
    };
  }

  override start(): void {
    super.start();
    this.#claims.stopped = false;
    this.#timers.push(setInterval(() => this.#local.prune(), LOCAL_PRUNE_MS));
    this.#timers.push(setInterval(() => this.#claims.recoverLost(), LOST_CLAIM_CHECK_MS));
  }

  override stop(): void {
    this.#claims.stopped = true;
    if (this.#foreignTimer !== null) clearTimeout(this.#foreignTimer);
    this.#foreignTimer = null;
    for (const t of this.#timers) clearInterval(t);
    this.#timers = [];
    super.stop();
  }

  /** wake() for rows this node's memory may not hold (see Claims.#remoteGen). */
  wakeRemote(): void {
    this.#claims.remoteChanged();
    this.wake();
  }

  #foreignTimer: ReturnType<typeof setTimeout> | null = null;

  /**
   * Another node queued rows that its own workers' polls are about to take (TasksAnnounced
   * `served`): this node's polls look for them after FOREIGN_TASK_DELAY_MS, one look for every
   * announcement in that time. Taken here at once, each such task would cost a claim statement,
   * a `dispatched` entry in the owner's inbox and the forward of its result, and keep this
   * node's slot from its own next task (measured: docs/performance-log.md, 2026-12-07).
   */
  wakeForeign(): void {
    if (this.#foreignTimer !== null) return;
    this.#foreignTimer = setTimeout(() => {
      this.#foreignTimer = null;
      this.wakeRemote();
    }, FOREIGN_TASK_DELAY_MS);
  }

  /**
   * Claimed rows went back on the queue (a release, a takeover): they may be any node's
   * executions', so polls here and on the other nodes look again.
   */
  requeued(): void {
    this.wakeRemote();
    this.shared.notify([{ channel: "orbit_tasks", payload: "" }]);
  }

  /** Attempts of executions just taken over: redelivered after a session timeout. */
  adoptOrphans(tokens: string[]): void {
    this.#attempts.adoptOrphans(tokens);
  }

  sessionWorker(sessionId: string): Promise<string | null> {
    return this.#sessions.workerOf(sessionId);
  }

  async tokenHolders(tokens: string[]): Promise<Map<string, TokenHolder>> {
    const rows = await queryOn(this.shared.sql)<
      { token: string; task_name: string; contract_version: string; worker_id: string | null }
    >(q.TOKEN_HOLDERS, [tokens]);
    return new Map(rows.map((r) => [
      r.token,
      { task: r.task_name, contract: r.contract_version, worker_id: r.worker_id },
    ]));
  }

  sessionViews(): Promise<SessionView[]> {
    return this.#sessions.views();
  }

  sessionCount(): Promise<number> {
    return this.#sessions.count();
  }

  /** Eager dispatch of the step a result forwarded to this owner makes ready (eager.ts). */
  eager(id: string, s: EagerSession, forwarded = false): EagerDispatch {
    return eagerDispatch(
      {
        stateOf: (x) => this.executions.stateOf(x),
        newId: this.opts.newId,
        offerReady: (state) => this.offerReady(id, state),
        servedHere: (st: StepState) => {
          const since = this.opts.now() - this.opts.sessionTimeoutMs;
          for (const x of this.sessions.values()) {
            if (x.last_contact_ms >= since && serves(x, st)) return true;
          }
          return false;
        },
      },
      id,
      s,
      forwarded,
    );
  }
}
