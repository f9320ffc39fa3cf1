/**
 * Shared mode's worker service (reference page, "Task queue" and "Worker sessions"): the
 * routes' WorkerService over the shared tables, so that a worker can register, poll,
 * heartbeat and report through any server. This file composes the parts and holds the
 * request paths (poll, report, heartbeat, unregister); each part has its own file:
 *
 *   sessions.ts  the cluster's sessions (orbit_sessions), cached here, contacts written
 *   claims.ts    the claim statement over orbit_tasks, releases, lost claims found again
 *   attempts.ts  the owner's watch over the sessions holding its attempts
 *   eager.ts     the step a result makes ready, dispatched in the result's own append
 *
 * A poll takes first from this node's own queue (the mirror of the rows of executions it
 * owns: each dispatch claims its row in its own commit, no claim statement), then claims.
 * Tasks live in `orbit_tasks`, queued by their owner in the transaction of StepScheduled
 * (lib/executions/shared_changes.ts). A result reported here for an execution owned here is
 * applied here with eager dispatch, as on one server; owned elsewhere, it is forwarded
 * (cluster/shared/forward.ts) with the worker's session, and the owner answers the next task.
 *
 * Failure handling: a dispatch that cannot be recorded puts the row back on the queue; a
 * claim for an execution that no longer wants it is cancelled, and the worker hears it on its
 * next heartbeat. Long polls wake on NOTIFY orbit_tasks and look again every second.
 */
import type { ErrorInfo, HistoryEvent } from "../../lib/engine/events.ts";
import {
  type ExecutionState,
  newlyQueued,
  queuedSteps,
  stepOfToken,
  type StepState,
} from "../../lib/engine/state.ts";
import type { Executions } from "../../lib/executions/executions.ts";
import { executionOfToken, type StartOffer } from "../../lib/executions/types.ts";
import type { Metrics } from "../../lib/metrics.ts";
import { log } from "../../lib/log.ts";
import {
  dispatchQueued,
  dispatchTo,
  type EagerSession,
  payload,
  pollWaitMs,
  serves,
  type Session,
  type SessionView,
  type TaskPayload,
  type TokenHolder,
  undelivered,
  type WorkerService,
} from "../../lib/workers/dispatcher.ts";
import * as q from "../../sql/postgres/shared/mod.ts";
import { MemoryTaskQueue } from "../../lib/workers/queue.ts";
import { AttemptWatch } from "./attempts.ts";
import { Claims, POLL_RECHECK_MS } from "./claims.ts";
import { type EagerDispatch, eagerDispatch } from "./eager.ts";
import { queryOn, SharedSessions, type SharedWorkersOptions } from "./sessions.ts";

export type { SharedWorkersOptions } from "./sessions.ts";
export { claimWindow } from "./claims.ts";

const CONTACT_FLUSH_MS = 250;
const CONTACT_CHECK_MS = 500;
const LOCAL_PRUNE_MS = 5000;
const LOST_CLAIM_CHECK_MS = 1000;

export class SharedWorkers implements WorkerService {
  /** Tasks this server handed to workers since it started (health: tasks_claimed). */
  tasksClaimed = 0;
  readonly #sessions: SharedSessions;
  readonly #claims: Claims;
  readonly #attempts: AttemptWatch;
  readonly #q: <T>(text: string, params?: unknown[]) => Promise<T[]>;
  #wakers = new Set<() => void>();
  /** The polls of each session in the order they came (see poll). */
  #lines = new Map<string, Array<{ wake: () => void }>>();
  /** Polls waiting here, for a new execution's first task (offerFirst). */
  #waiting = new Set<
    {
      s: Session;
      deliver: (tasks: TaskPayload[]) => boolean;
      wake: () => void;
      /** Set aside for a start's first task (offerFirst): only its answer or release ends it. */
      offered: boolean;
    }
  >();
  /**
   * The queued tasks of executions owned here (their rows' mirror), for a result that frees a
   * slot (#takeLocal); entries that left the queue are dropped when met, and every few seconds.
   */
  #local: MemoryTaskQueue;
  #timers: ReturnType<typeof setInterval>[] = [];
  #stopped = false;

  constructor(
    readonly executions: Executions,
    readonly metrics: Metrics,
    readonly opts: SharedWorkersOptions,
  ) {
    executions.observer = this;
    this.#local = new MemoryTaskQueue(executions);
    this.#q = queryOn(opts.sql);
    const w = { executions, metrics, opts, q: this.#q };
    this.#sessions = new SharedSessions(w);
    this.#claims = new Claims(w, {
      requeued: () => this.requeued(),
      wake: () => this.wake(),
      uncertain: (id, token, reason) => this.#onOwner(id, { type: "uncertain", token, reason }),
    });
    this.#attempts = new AttemptWatch(w, this.#sessions);
    this.#sessions.onForget = (id) => {
      this.#claims.forget(id);
      for (const p of [...(this.#lines.get(id) ?? [])]) p.wake();
    };
  }

  /** The sessions cached here (served by this server). */
  get sessions(): Map<string, Session> {
    return this.#sessions.sessions;
  }

  start(): void {
    this.#timers.push(setInterval(() => this.#sessions.flushContacts(), CONTACT_FLUSH_MS));
    this.#timers.push(setInterval(() => this.#attempts.check(), CONTACT_CHECK_MS));
    this.#timers.push(setInterval(() => this.#local.prune(), LOCAL_PRUNE_MS));
    this.#timers.push(setInterval(() => this.#claims.recoverLost(), LOST_CLAIM_CHECK_MS));
  }

  stop(): void {
    this.#stopped = true;
    this.#claims.stopped = true;
    for (const t of this.#timers) clearInterval(t);
    this.#timers = [];
    for (const w of [...this.#wakers]) w();
    for (const w of [...this.#waiting]) w.wake();
  }

  /**
   * NOTIFY orbit_tasks (or a local enqueue): waiting polls look again, at once. The
   * notification names no owner, and a poll here that finds only rows owned elsewhere takes
   * them without waiting: the owner's own polls were woken at its commit (node.ts,
   * afterCommit), before its NOTIFY went out, so they claim first; when they did not take the
   * row, no worker is idle there, and a worker idle here is worth more than the forward saved.
   */
  wake(): void {
    for (const w of [...this.#wakers]) w();
  }

  /** wake() for rows this node's memory may not hold (see Claims.#remoteGen). */
  wakeRemote(): void {
    this.#claims.remoteChanged();
    this.wake();
  }

  /**
   * Claimed rows went back on the queue (a release, a takeover): they may be any node's
   * executions', so polls here and on the other nodes look again.
   */
  requeued(): void {
    this.wakeRemote();
    this.opts.notify([{ channel: "orbit_tasks", payload: "" }]);
  }

  /**
   * A new execution's first task for a poll waiting here, dispatched in the start's commit
   * (its row written claimed, as for a result's eager dispatch): no claim statement and no
   * second commit. The poll is set aside (no wake-up reaches it) until the commit answers.
   */
  offerFirst(state: ExecutionState): StartOffer | null {
    return this.#offer(state, queuedSteps(state));
  }

  /**
   * A step that a result made ready (queued by this append, so no other server can be
   * claiming its row) and that the reporting worker does not serve, for a poll of another
   * session waiting here: dispatched in the result's commit, its row written claimed, as for a
   * start's first task (a worker of another language or task list: no claim statement, no
   * commit of its own).
   */
  #offerReady(id: string, state: ExecutionState): StartOffer | null {
    if (this.#waiting.size === 0) return null;
    return this.#offer(state, newlyQueued(this.executions.stateOf(id), state));
  }

  #offer(state: ExecutionState, steps: Iterable<StepState>): StartOffer | null {
    if (this.#waiting.size === 0) return null;
    for (const st of steps) {
      for (const w of this.#waiting) {
        if (!serves(w.s, st)) continue;
        this.#waiting.delete(w);
        this.#wakers.delete(w.wake);
        w.offered = true;
        const command = dispatchTo(state.execution_id, st.id, w.s, this.opts.newId);
        return {
          command,
          deliver: (next) => {
            const task = payload(next, st.id, command.token);
            this.tasksClaimed++;
            this.metrics.tasksDispatched.inc();
            // The poll's request closed meanwhile (nothing else ends a poll set aside): the
            // dispatch names the session, not the poll, so another poll of the session waiting
            // here takes it; with none, it is redelivered.
            if (!w.deliver([task]) && !this.#handOver(w.s, task)) {
              undelivered(this.executions, w.s, [task], "closed");
            }
          },
          release: () => {
            w.offered = false;
            w.wake();
          },
        };
      }
    }
    return null;
  }

  /** Hands a task dispatched to `s` to another poll of that session waiting here. */
  #handOver(s: Session, task: TaskPayload): boolean {
    for (const e of this.#waiting) {
      if (e.s.session_id === s.session_id && e.deliver([task])) return true;
    }
    return false;
  }

  /** Attempts of executions just taken over: redelivered after a session timeout. */
  adoptOrphans(tokens: string[]): void {
    this.#attempts.adoptOrphans(tokens);
  }

  sessionWorker(sessionId: string): Promise<string | null> {
    return this.#sessions.workerOf(sessionId);
  }

  async tokenHolders(tokens: string[]): Promise<Map<string, TokenHolder>> {
    const rows = await this.#q<
      { token: string; task_name: string; contract_version: string; worker_id: string | null }
    >(q.TOKEN_HOLDERS, [tokens]);
    return new Map(rows.map((r) => [
      r.token,
      { task: r.task_name, contract: r.contract_version, worker_id: r.worker_id },
    ]));
  }

  register(r: Pick<Session, "worker_id" | "runtime" | "tasks" | "concurrency">): Promise<string> {
    return this.#sessions.register(r);
  }

  async poll(
    sessionId: string,
    max: number,
    waitMs: number,
    signal?: AbortSignal,
  ): Promise<TaskPayload[]> {
    const s = await this.#sessions.get(sessionId);
    const started = performance.now();
    const end = this.opts.now() + pollWaitMs(waitMs, this.opts.sessionTimeoutMs);
    s.polling++;
    // The polls of a session waiting here stand in line: only the first looks again (on a
    // notification, and every second), so a worker holding one poll per slot costs one claim
    // per look, not one per slot. When the first leaves, the next looks at once.
    const me = { wake: () => {} };
    let line = this.#lines.get(s.session_id);
    if (!line) this.#lines.set(s.session_id, line = []);
    line.push(me);
    const first = () => line![0] === me;
    try {
      max = Math.max(1, Math.min(max, s.concurrency));
      for (let look = true;; look = first()) {
        // Forgotten meanwhile (SharedSessions.forget): nothing more for it; its next request answers 404.
        if (!this.sessions.has(s.session_id)) return [];
        // A look takes from this node's own queue first, as one server takes from its memory:
        // each dispatch claims its row in its own commit, no claim statement.
        const tasks = look ? await this.#takeLocal(s, max) : [];
        if (look && tasks.length === 0) tasks.push(...await this.#claim(s, max));
        if (tasks.length > 0 || signal?.aborted) return this.#delivered(s, tasks, signal);
        const left = end - this.opts.now();
        if (left <= 0 || this.#stopped || !this.sessions.has(s.session_id)) return [];
        let given: TaskPayload[] | null = null;
        await new Promise<void>((resolve) => {
          let finished = false;
          const entry = {
            s,
            deliver: (tasks: TaskPayload[]) => {
              if (finished) return false;
              given = tasks;
              done();
              return true;
            },
            wake: () => {},
            offered: false,
          };
          const done = () => {
            finished = true;
            clearTimeout(timer);
            this.#wakers.delete(done);
            this.#waiting.delete(entry);
            signal?.removeEventListener("abort", done);
            resolve();
          };
          entry.wake = done; // the same function as in #wakers, so that an offer can unhook it
          // The line moving on (the first poll left) or the wait running out does not end a poll
          // set aside for an offer: it would miss the task dispatched to it (redelivered then).
          const unlessOffered = () => {
            if (!entry.offered) done();
          };
          me.wake = unlessOffered;
          const timer = setTimeout(unlessOffered, first() ? Math.min(POLL_RECHECK_MS, left) : left);
          if (first()) this.#wakers.add(done);
          this.#waiting.add(entry);
          signal?.addEventListener("abort", done);
        });
        if (given) return this.#delivered(s, given, signal);
      }
    } finally {
      const wasFirst = first();
      line.splice(line.indexOf(me), 1);
      if (line.length === 0) this.#lines.delete(s.session_id);
      else if (wasFirst) line[0]!.wake();
      s.polling--;
      this.#sessions.touch(s);
      this.metrics.pollLatency.observe((performance.now() - started) / 1000);
    }
  }

  /** Claims up to `max` tasks for the session (claims.ts) and counts them. */
  async #claim(s: Session, max: number): Promise<TaskPayload[]> {
    const tasks = await this.#claims.claim(s, max);
    this.tasksClaimed += tasks.length;
    this.metrics.tasksDispatched.inc({}, tasks.length);
    return tasks;
  }

  /**
   * Dispatches up to `max` tasks queued for executions this node owns (the local mirror of
   * their rows) to `s`, each in an append that claims its row (COMMIT_OWNED's take). A take
   * refused because another server claimed the row, or because an older row of the task
   * waits, yields nothing here: the claim statement decides then.
   */
  async #takeLocal(s: Session, max: number): Promise<TaskPayload[]> {
    const tasks = await dispatchQueued(
      this.executions,
      s,
      this.#local.take(s, max),
      this.opts.newId,
      (item) => this.#local.requeue([item]),
    );
    this.tasksClaimed += tasks.length;
    this.metrics.tasksDispatched.inc({}, tasks.length);
    return tasks;
  }
  /** A worker that went away before the answer never saw these attempts. */
  #delivered(s: Session, tasks: TaskPayload[], signal?: AbortSignal): TaskPayload[] {
    if (!signal?.aborted) return tasks;
    for (const t of tasks) {
      const cmd = {
        type: "uncertain" as const,
        token: t.token,
        reason: `the request of worker \`${s.worker_id}\` closed before the task was delivered`,
      };
      this.#onOwner(t.execution_id, cmd);
    }
    return [];
  }

  /** Runs an uncertain command on the execution's owner, here or through its inbox. */
  #onOwner(id: string, cmd: { type: "uncertain"; token: string; reason: string }): void {
    if (this.executions.holds(id)) {
      this.executions.uncertain(id, cmd.token, cmd.reason);
    } else if (this.executions.remote) {
      this.executions.remote.forward(id, cmd).catch((e) =>
        log.engine.error("cannot forward an uncertain attempt", {
          execution_id: id,
          error: (e as Error).message,
        })
      );
    }
  }
  async heartbeat(sessionId: string, tokens: string[]): Promise<string[]> {
    const s = await this.#sessions.get(sessionId);
    const cancel = new Set(
      (await this.#q<{ token: string }>(q.TAKE_CANCELLED, [sessionId, tokens])).map((r) => r.token),
    );
    // A token no server knows any more (its result was applied, or it never existed).
    const unknown = tokens.filter((t) => !cancel.has(t) && !s.told.has(t));
    if (unknown.length > 0) {
      const known = new Set(
        (await this.#q<{ token: string }>(q.KNOWN_TOKENS, [unknown])).map((r) => r.token),
      );
      for (const t of unknown) {
        const id = executionOfToken(t);
        const st = id ? this.executions.stateOf(id) : undefined;
        // Memory in doubt may lack a dispatch that landed: not a reason to cancel.
        if (id && this.executions.inDoubt(id)) continue;
        if (!known.has(t) && !(st && stepOfToken(st, t))) cancel.add(t);
      }
    }
    for (const t of cancel) s.told.add(t);
    if (s.told.size > 10_000) s.told.clear();
    const running = tokens.filter((t) => !cancel.has(t));
    if (running.length > 0) await this.#q(q.CONFIRM_TOKENS, [running, this.opts.now()]);
    return [...cancel];
  }
  async unregister(sessionId: string): Promise<void> {
    const s = await this.#sessions.get(sessionId);
    await this.#sessions.remove(sessionId);
    const held = await this.#q<{ token: string; execution_id: string }>(
      q.CLAIMED_BY_SESSION,
      [sessionId],
    );
    for (const h of held) {
      this.#onOwner(h.execution_id, {
        type: "uncertain",
        token: h.token,
        reason: `worker \`${s.worker_id}\` unregistered while holding the attempt`,
      });
    }
  }
  async report(
    token: string,
    result: { output: unknown } | { error: ErrorInfo },
    take?: { sessionId: string; maxTasks: number },
    signal?: AbortSignal,
  ): Promise<{ accepted: boolean; tasks: TaskPayload[] }> {
    const id = executionOfToken(token);
    const a = id ? this.executions.stateOf(id) : undefined;
    // The dispatch of this token may still be in this node's inbox (a fast worker reported
    // before the owner recorded it): apply the inbox first, in order.
    if (id && a && !stepOfToken(a, token)) await this.opts.drainInbox(id);
    // Eager dispatch, as on one server: when this node owns the execution and the worker
    // named its session, a step the result makes ready is dispatched to it in the same
    // append (its task row is written claimed). Only a step that was not queued before: a
    // queued row may be claimed by another server at this very moment.
    const s = take && take.maxTasks > 0 ? this.sessions.get(take.sessionId) : undefined;
    const want = s ? Math.min(take!.maxTasks, s.concurrency) : 0;
    const eager = s && id && a ? this.eager(id, s) : undefined;
    // The result leaves nothing of its execution for the freed slot: a task queued here for an
    // execution this node owns is dispatched to it now, while the result is decided, so that
    // both appends share one commit, which also claims the task's row (no claim statement;
    // COMMIT_OWNED's take). The row may be claimed elsewhere meanwhile, or an older row of the
    // task may wait elsewhere: that dispatch is then not written, and the claim below decides.
    let local: Promise<TaskPayload[]> | null = null;
    // Or the step it made ready is another worker's (another language, another task list): a
    // poll of that worker waiting here gets it in the result's commit (#offerReady).
    let offer: StartOffer | null = null;
    const follow = id && a
      ? (state: ExecutionState) => {
        offer?.release();
        offer = null;
        const command = eager?.follow(state) ?? null;
        if (command) return command;
        if (eager && !local && !signal?.aborted && this.sessions.has(s!.session_id)) {
          local = this.#takeLocal(s!, want);
        }
        offer = this.#offerReady(id, state);
        return offer?.command ?? null;
      }
      : undefined;
    // Owned elsewhere: unless workers serving it talk to the owner (eager), the owner dispatches
    // the next step to this session in the commit of the result and sends it with its reply.
    const remote = s && id && !a
      ? {
        session_id: s.session_id,
        worker_id: s.worker_id,
        runtime: s.runtime,
        tasks: s.tasks,
      }
      : undefined;
    let r;
    try {
      r = await this.executions.report(token, result, follow, remote);
    } catch (e) {
      (offer as StartOffer | null)?.release();
      // The result was not applied (or not known to be): the worker hears an error and retries
      // it; tasks dispatched for its slot never reach it, so they go out again.
      if (local) {
        undelivered(this.executions, s!, await (local as Promise<TaskPayload[]>), "failed");
      }
      throw e;
    }
    const offered = offer as StartOffer | null;
    if (offered) {
      if (r.followed && r.state) offered.deliver(r.state);
      else offered.release();
    }
    if (s) this.#sessions.touch(s);
    const tasks = eager ? eager.tasks(r) : (r.tasks ?? []);
    if (tasks.length > 0) {
      this.tasksClaimed += tasks.length;
      this.metrics.tasksDispatched.inc({}, tasks.length);
    }
    if (local) tasks.push(...await (local as Promise<TaskPayload[]>)); // counted by #takeLocal
    // Nothing yet for the freed slot: its next task comes from the queue now, in this answer,
    // as on one server (the claim prefers this node's own executions), instead of after the
    // worker's next poll.
    const usable = () =>
      s !== undefined && want > tasks.length && !signal?.aborted &&
      this.sessions.has(s.session_id);
    // First from this node's own queue, as one server looks at its queue again after the
    // commit: a task queued by a commit that landed with this result's is taken in a commit
    // of its own dispatch (no claim statement) rather than through the claim and the
    // dispatch commit after it.
    if (usable()) {
      tasks.push(...await this.#takeLocal(s!, want - tasks.length));
    }
    if (usable()) {
      const more = want - tasks.length;
      // The result is applied whatever happens here: a failed claim only leaves the slot to poll.
      tasks.push(
        ...await this.#claim(s!, more).catch((e) => {
          log.engine.warn("claim after a result failed; the worker polls", {
            error: (e as Error).message,
          });
          return [];
        }),
      );
    }
    return { accepted: r.accepted, tasks: s ? this.#delivered(s, tasks, signal) : tasks };
  }

  /** Eager dispatch of the step a result makes ready (eager.ts). */
  eager(id: string, s: EagerSession, forwarded = false): EagerDispatch {
    return eagerDispatch(
      {
        stateOf: (x) => this.executions.stateOf(x),
        newId: this.opts.newId,
        offerReady: (state) => this.#offerReady(id, state),
        servedHere: (st) => {
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

  sessionViews(): Promise<SessionView[]> {
    return this.#sessions.views();
  }

  sessionCount(): Promise<number> {
    return this.#sessions.count();
  }

  list(): Promise<unknown[]> {
    return this.#sessions.list();
  }

  installed(
    prev: ExecutionState | null,
    next: ExecutionState,
    events: readonly HistoryEvent[] = [],
  ): void {
    if (this.#attempts.installed(prev, next, events)) {
      this.#local.enqueue(next);
      this.wake();
    }
  }

  dropped(last: ExecutionState): void {
    this.#attempts.dropped(last);
  }
}
