/**
 * The worker dispatcher (SPEC §4), one code path for a single server, standby mode and shared
 * mode: long polls and their waiting, dispatch, eager dispatch (of a result's next step, of a
 * start's first task, of a step another worker's poll waits for), and redelivery. What differs
 * between the modes is behind two interfaces:
 *
 *   SessionStore  where sessions live: memory (./sessions.ts, WorkerSessions) or the cluster's
 *                 `orbit_sessions` (cluster/shared/sessions.ts, SharedSessions)
 *   TaskQueue     the steps this server's own appends queued (./queue.ts, MemoryTaskQueue; in
 *                 shared mode the mirror of its own `orbit_tasks` rows)
 *
 * and, in shared mode only, `TaskClaims`: the claim statement over the tasks of other servers
 * (cluster/shared/claims.ts). cluster/shared/workers.ts composes the shared parts.
 *
 * `installed()` (called after every committed change) queues new steps and hands them to
 * waiting polls at once; a poll takes tasks synchronously (so two polls never take the same
 * one) and then commits a StepDispatched for each, in one batch, before answering. With
 * claims, the polls of a session stand in line: only the first claims again (on a
 * notification, and every `recheckMs`), so a worker holding one poll per slot costs one claim
 * per look, not one per slot.
 *
 * Attempts of a session that expires or unregisters become StepAttemptUncertain and are queued
 * again with the same idempotency key, on the execution's owner; so do orphans (attempts
 * recovered from history that no worker reported within a session timeout) and attempts a live
 * worker leaves out of its heartbeats for a session timeout (the session store finds them).
 */
import type { ErrorInfo, HistoryEvent } from "../engine/events.ts";
import type { Command } from "../engine/decide.ts";
import {
  type ExecutionState,
  newlyQueued,
  queuedSteps,
  stepOfToken,
  type StepState,
} from "../engine/state.ts";
import type { Executions } from "../executions/executions.ts";
import type { StartOffer } from "../executions/types.ts";
import { executionOfToken } from "../executions/types.ts";
import type { Metrics } from "../metrics.ts";
import { log } from "../log.ts";
import {
  dispatchTo,
  serves,
  type Session,
  type SessionRegistration,
  type TaskPayload,
} from "./sessions.ts";
import { MemoryTaskQueue, type QueuedTask, type TaskQueue } from "./queue.ts";
import { dispatchQueued, payload } from "./dispatch.ts";

export type {
  DispatcherParts,
  SessionStore,
  SessionView,
  TaskClaims,
  TokenHolder,
  WorkerService,
} from "./types.ts";
import type { DispatcherParts, SessionStore, TaskClaims, WorkerService } from "./types.ts";
export { payload } from "./dispatch.ts";
export {
  dispatchTo,
  type EagerSession,
  languageFits,
  serves,
  type Session,
  type TaskPayload,
  type TaskRegistration,
} from "./sessions.ts";

/**
 * How long a poll may wait here: what the worker asked, and at most half of --session-timeout
 * (at least a second). A poll in progress counts as the session's contact; a worker whose host
 * or network died mid-poll (no FIN reaches the server) must not look alive for the rest of a
 * 60 s wait, so the poll ends, its answer goes nowhere, and the silence starts to count.
 */
export function pollWaitMs(asked: number, sessionTimeoutMs: number): number {
  return Math.min(asked, Math.max(1000, Math.floor(sessionTimeoutMs / 2)));
}

/**
 * Shared mode: how long a queued step whose take the commit refused (TaskTakenError) stays out
 * of this server's takes, in its place at the front of the queue. Dropped instead, as it was,
 * its row became one that only a claim statement could reach while the step waited here: the
 * oldest of its task, so every later take of the task was refused for the age rule
 * (OWN_TASK_HEAD_START_MS) once it had waited half a second, each refusal dropped one more,
 * and a server with a backlog refused about one take per order for good (issue 39: one capped
 * shared server, 1,992 refusals in 2,400 orders, 60.6 orders/s and 2.97 ms of PostgreSQL per
 * order against 92.5 and 1.11 without). Kept, the claim statement that follows a refused take
 * (report, poll) takes the older rows meanwhile, and the step goes out with the next take after
 * the hold; were its row claimed elsewhere, the claim's dispatch drops it here when recorded.
 * The hold keeps the same report or poll from taking it again at once.
 */
export const TAKEN_HOLD_MS = 100;

/** A poll waiting here. */
interface Waiting {
  s: Session;
  max: number;
  /** Set aside for an offer (a task dispatched to it in another append): only its answer ends it. */
  offered: boolean;
  /** Queued tasks taken for it (#hand); false when it no longer waits. */
  give(picked: QueuedTask[]): boolean;
  /** Tasks dispatched for it already (an offer's); false when it no longer waits. */
  deliver(tasks: TaskPayload[]): boolean;
  /** Ends the wait so that the poll looks again (unless it is set aside for an offer). */
  look(): void;
}

/** A poll's place in its session's line (see the top of this file). */
interface Spot {
  look: () => void;
}

type WaitResult = { picked?: QueuedTask[]; tasks?: TaskPayload[] };

export class Dispatcher implements WorkerService {
  /** Tasks this server handed to workers since it started (shared mode's health: tasks_claimed). */
  tasksClaimed = 0;
  readonly #sessions: SessionStore;
  readonly #queue: TaskQueue;
  readonly #claims: TaskClaims | undefined;
  readonly #catchUp: ((id: string) => Promise<void>) | undefined;
  /** Polls waiting here, in the order they began to wait. */
  #waiting = new Set<Waiting>();
  /** The polls of each session in the order they came. */
  #lines = new Map<string, Spot[]>();
  #stopped = false;
  /** When the latest poll came to this server (opts.now()); none yet: -Infinity. */
  #lastPollMs = -Infinity;

  constructor(
    readonly executions: Executions,
    readonly metrics: Metrics,
    readonly opts: { sessionTimeoutMs: number; now: () => number; newId: () => string },
    parts: DispatcherParts,
  ) {
    this.#sessions = parts.sessions;
    this.#queue = parts.queue ?? new MemoryTaskQueue(executions, () => opts.now());
    this.#claims = parts.claims;
    this.#catchUp = parts.catchUp;
    executions.observer = this;
  }

  /**
   * Workers poll this server: a poll waits here now, or one came within `withinMs`. (Shared
   * mode tells the other servers so when it queues tasks: cluster/shared/notify.ts.)
   */
  pollsHere(withinMs: number): boolean {
    return this.#waiting.size > 0 || this.opts.now() - this.#lastPollMs <= withinMs;
  }

  get sessions(): ReadonlyMap<string, Session> {
    return this.#sessions.sessions;
  }

  start(): void {
    this.#stopped = false;
    this.#sessions.start((token, reason) => {
      const id = executionOfToken(token);
      if (id) void this.uncertain(id, token, reason);
    });
  }

  stop(): void {
    this.#stopped = true;
    this.#sessions.stop();
    for (const w of [...this.#waiting]) w.look();
  }

  register(r: SessionRegistration): string | Promise<string> {
    return this.#sessions.register(r);
  }

  list(): unknown[] | Promise<unknown[]> {
    return this.#sessions.list();
  }

  async heartbeat(sessionId: string, tokens: string[]): Promise<string[]> {
    return await this.#sessions.heartbeat(await this.#sessions.contact(sessionId), tokens);
  }

  async unregister(sessionId: string): Promise<void> {
    const s = await this.#sessions.contact(sessionId);
    const held = await this.#sessions.remove(s);
    // Its polls still waiting here end now (empty): a task offered to one of them would go to
    // a session that is gone and wait a whole session timeout for its redelivery.
    this.sessionGone(s.session_id);
    const reason = `worker \`${s.worker_id}\` unregistered while holding the attempt`;
    await Promise.all(held.map((token) => {
      const id = executionOfToken(token);
      return id ? this.uncertain(id, token, reason) : undefined;
    }));
  }

  /** The session is forgotten here: its polls waiting here look again, find it gone, and end. */
  sessionGone(sessionId: string): void {
    for (const spot of [...(this.#lines.get(sessionId) ?? [])]) spot.look();
  }

  async poll(
    sessionId: string,
    max: number,
    waitMs: number,
    signal?: AbortSignal,
  ): Promise<TaskPayload[]> {
    // No await before the poll waits unless something is asynchronous (a session read, a
    // dispatch, a claim): a poll made just before a start is waiting when the start looks.
    const found = this.#sessions.contact(sessionId);
    const s = found instanceof Promise ? await found : found;
    const started = performance.now();
    const end = this.opts.now() + pollWaitMs(waitMs, this.opts.sessionTimeoutMs);
    s.polling++;
    this.#lastPollMs = this.opts.now();
    const me: Spot = { look: () => {} };
    let line = this.#lines.get(s.session_id);
    if (!line) this.#lines.set(s.session_id, line = []);
    line.push(me);
    const first = () => line![0] === me;
    try {
      max = Math.max(1, Math.min(max, s.concurrency));
      for (let claim = true;; claim = first()) {
        // Gone meanwhile (unregistered, forgotten): nothing more for it; its next request answers 404.
        if (this.#stopped || !this.sessions.has(s.session_id)) return [];
        // This server's own queue first: each dispatch is an append of its own (in shared mode
        // it claims its row in the same commit, no claim statement); then other servers' tasks.
        const picked = this.#queue.take(s, max);
        let tasks = picked.length > 0 ? await this.#dispatch(s, picked, signal) : [];
        if (tasks.length === 0 && claim && this.#claims && !signal?.aborted) {
          tasks = await this.#claim(s, max);
        }
        if (tasks.length > 0 || signal?.aborted) return this.#delivered(s, tasks, signal);
        const left = end - this.opts.now();
        if (left <= 0 || this.#stopped || !this.sessions.has(s.session_id)) return [];
        const got = await this.#wait(s, max, me, left, signal);
        if (got.tasks) return this.#delivered(s, got.tasks, signal);
        if (got.picked) {
          tasks = await this.#dispatch(s, got.picked, signal);
          if (tasks.length > 0 || signal?.aborted) return this.#delivered(s, tasks, signal);
        }
      }
    } finally {
      const wasFirst = first();
      line.splice(line.indexOf(me), 1);
      if (line.length === 0) this.#lines.delete(s.session_id);
      else if (wasFirst && this.#claims) line[0]!.look();
      s.polling--;
      this.#sessions.touch(s);
      this.metrics.pollLatency.observe((performance.now() - started) / 1000);
    }
  }

  /**
   * Waits for queued tasks (#hand), tasks dispatched to the poll already (an offer), a reason
   * to look again (a wake-up, the line moving on, the re-check), its end, or its request closing.
   */
  #wait(s: Session, max: number, me: Spot, left: number, signal?: AbortSignal) {
    return new Promise<WaitResult>((resolve) => {
      let done = false;
      const finish = (r: WaitResult) => {
        if (done) return false;
        done = true;
        clearTimeout(timer);
        this.#waiting.delete(w);
        signal?.removeEventListener("abort", onAbort);
        resolve(r);
        return true;
      };
      const w: Waiting = {
        s,
        max,
        offered: false,
        give: (picked) => finish({ picked }),
        deliver: (tasks) => finish({ tasks }),
        // The line moving on or the wait running out does not end a poll set aside for an
        // offer: it would miss the task dispatched to it (redelivered then).
        look: () => {
          if (!w.offered) finish({});
        },
      };
      const onAbort = () => finish({});
      me.look = w.look;
      const recheck = this.#claims && this.#lines.get(s.session_id)?.[0] === me;
      const timer = setTimeout(w.look, recheck ? Math.min(this.#claims!.recheckMs, left) : left);
      signal?.addEventListener("abort", onAbort);
      this.#waiting.add(w);
    });
  }

  /**
   * Tasks were queued here (an append of this server), or may be claimable (shared mode): the
   * queued ones go to the polls waiting here that serve them, at once; with claims, the first
   * waiting poll of each session looks again.
   */
  wake(): void {
    for (const w of this.#waiting) {
      if (w.offered) continue;
      const picked = this.#queue.take(w.s, w.max);
      if (picked.length > 0) w.give(picked); // leaves #waiting
    }
    if (!this.#claims) return;
    for (const line of this.#lines.values()) line[0]!.look();
  }

  /**
   * A new execution's first task for a poll waiting here, dispatched in the start's commit
   * (the same as a result's eager dispatch; in shared mode its row is written claimed): the
   * first waiting poll whose session serves one of the queued steps is set aside until the
   * commit answers.
   */
  offerFirst(state: ExecutionState): StartOffer | null {
    return this.#offer(state, queuedSteps(state));
  }

  /**
   * A step that a result made ready (queued by this append, so no other server can be
   * claiming its row) and that the reporting worker does not serve, for a poll of another
   * session waiting here: dispatched in the result's commit, as a start's first task (a worker
   * of another language or task list gets it with no commit of its own).
   */
  offerReady(id: string, state: ExecutionState): StartOffer | null {
    if (this.#waiting.size === 0) return null;
    return this.#offer(state, newlyQueued(this.executions.stateOf(id), state));
  }

  #offer(state: ExecutionState, steps: Iterable<StepState>): StartOffer | null {
    if (this.#waiting.size === 0) return null;
    for (const st of steps) {
      for (const w of this.#waiting) {
        if (w.offered || !serves(w.s, st)) continue;
        this.#waiting.delete(w);
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
              this.#undelivered(w.s, [task], "closed");
            }
          },
          release: () => {
            w.offered = false;
            w.look();
          },
        };
      }
    }
    return null;
  }

  /** Hands a task dispatched to `s` to another poll of that session waiting here. */
  #handOver(s: Session, task: TaskPayload): boolean {
    for (const w of this.#waiting) {
      if (w.s.session_id === s.session_id && !w.offered && w.deliver([task])) return true;
    }
    return false;
  }

  /**
   * Dispatches tasks taken from this server's queue to `s`, each in an append of its own (they
   * share commits). Taken for a request that closed, or a session gone, they go back.
   */
  async #dispatch(s: Session, picked: QueuedTask[], signal?: AbortSignal): Promise<TaskPayload[]> {
    if (picked.length === 0) return [];
    if (signal?.aborted || !this.sessions.has(s.session_id)) {
      this.#requeue(picked);
      return [];
    }
    const tasks = await dispatchQueued(
      this.executions,
      s,
      picked,
      this.opts.newId,
      (q) => this.#requeue([q]),
      // Kept, not woken for: the polls would take it again at once.
      (q) => {
        this.metrics.takesRefused.inc();
        this.#queue.requeue([q], this.opts.now() + TAKEN_HOLD_MS);
      },
    );
    this.tasksClaimed += tasks.length;
    this.metrics.tasksDispatched.inc({}, tasks.length);
    return tasks;
  }

  /** Claims up to `max` tasks of other servers for the session and counts them. */
  async #claim(s: Session, max: number): Promise<TaskPayload[]> {
    const tasks = await this.#claims!.claim(s, max);
    this.tasksClaimed += tasks.length;
    this.metrics.tasksDispatched.inc({}, tasks.length);
    return tasks;
  }

  #requeue(items: QueuedTask[]): void {
    this.#queue.requeue(items);
    this.wake();
  }

  /** When the worker went away before it got the answer, it never saw these attempts. */
  #delivered(s: Session, tasks: TaskPayload[], signal?: AbortSignal): TaskPayload[] {
    if (!signal?.aborted) return tasks;
    this.#undelivered(s, tasks, "closed");
    return [];
  }

  /** Attempts dispatched for a request whose answer will not carry them: redelivered. */
  #undelivered(s: Session, tasks: readonly TaskPayload[], how: "closed" | "failed"): void {
    for (const t of tasks) {
      void this.uncertain(
        t.execution_id,
        t.token,
        how === "closed"
          ? `the request of worker \`${s.worker_id}\` closed before the task was delivered`
          : `the result reported by worker \`${s.worker_id}\` with the task's request failed`,
      );
    }
  }

  /**
   * Makes an attempt uncertain (redelivered with the same idempotency key) on the execution's
   * owner: here, or (shared mode) through its inbox, without waiting for the owner.
   */
  uncertain(id: string, token: string, reason: string): Promise<unknown> | undefined {
    const remote = this.executions.remote;
    if (!remote || this.executions.holds(id)) {
      return this.executions.uncertain(id, token, reason);
    }
    remote.forward(id, { type: "uncertain", token, reason }).catch((e) =>
      log.engine.error("cannot forward an uncertain attempt", {
        execution_id: id,
        error: (e as Error).message,
      })
    );
    return undefined;
  }

  /**
   * Applies a worker's result. When the worker names its session and `max_tasks`, it gets
   * its next tasks in the same answer: a step of the same execution that the result made
   * ready is dispatched in the same commit as the result (eager dispatch), further ones are
   * taken from the queue (and, in shared mode, claimed). A result is applied even when the
   * session has expired. In shared mode a result for an execution owned elsewhere is forwarded
   * with the worker's session, and the owner answers the next task.
   */
  async report(
    token: string,
    result: { output: unknown } | { error: ErrorInfo },
    take?: { sessionId: string; maxTasks: number },
    signal?: AbortSignal,
  ): Promise<{ accepted: boolean; tasks: TaskPayload[] }> {
    const id = executionOfToken(token);
    const known = id ? this.executions.stateOf(id) : undefined;
    if (id && known && !stepOfToken(known, token)) await this.#catchUp?.(id);
    const s = take && take.maxTasks > 0 ? this.sessions.get(take.sessionId) : undefined;
    const want = s ? Math.min(take!.maxTasks, s.concurrency) : 0;
    // Decided here: held in memory, or (one server) loaded from the store. In shared mode an
    // execution not held here is owned elsewhere, and its owner decides (forwarding).
    const here = id !== null && (known !== undefined || !this.#claims);
    let eager: { step: string; token: string } | null = null;
    // The freed slot's next task from the queue, when the result leaves nothing of its own
    // execution for it: dispatched now, while the result is decided, so that both appends
    // share one commit instead of the dispatch waiting for the next one.
    let fromQueue: Promise<TaskPayload[]> | null = null;
    // Or the step it made ready is another worker's (another language, another task list): a
    // poll of that worker waiting here gets it in the result's commit (offerReady).
    let offer: StartOffer | null = null;
    const follow = here
      ? (state: ExecutionState): Command | null => {
        offer?.release();
        offer = null;
        eager = null;
        const st = s ? this.#eagerSteps(id, state).find((st) => serves(s, st)) : undefined;
        if (st) {
          const command = dispatchTo(state.execution_id, st.id, s!, this.opts.newId);
          eager = { step: st.id, token: command.token };
          return command;
        }
        if (s && !fromQueue && !signal?.aborted && this.sessions.has(s.session_id)) {
          fromQueue = this.#dispatch(s, this.#queue.take(s, want), signal);
        }
        offer = this.offerReady(id, state);
        return offer?.command ?? null;
      }
      : undefined;
    // Owned elsewhere (shared mode): unless workers serving it talk to the owner, the owner
    // dispatches the next step to this session in the commit of the result.
    const remote = s && id && !known
      ? { session_id: s.session_id, worker_id: s.worker_id, runtime: s.runtime, tasks: s.tasks }
      : undefined;
    let r;
    try {
      r = await this.executions.report(token, result, follow, remote);
    } catch (e) {
      (offer as StartOffer | null)?.release();
      // The result was not applied (or not known to be): the worker hears an error and retries
      // it; tasks already dispatched for its slot never reach it, so they go out again.
      if (fromQueue) this.#undelivered(s!, await (fromQueue as Promise<TaskPayload[]>), "failed");
      throw e;
    }
    const offered = offer as StartOffer | null;
    if (offered) {
      if (r.followed && r.state) offered.deliver(r.state);
      else offered.release();
    }
    // Only a report that was not refused (INVALID_TOKEN, UNKNOWN_TASK, …) counts as contact.
    if (s) this.#sessions.touch(s);
    const e = eager as { step: string; token: string } | null;
    const tasks: TaskPayload[] = e
      ? (r.followed && r.state ? [payload(r.state, e.step, e.token)] : [])
      : [...(r.tasks ?? [])]; // an owner elsewhere dispatched them
    if (tasks.length > 0) {
      this.tasksClaimed += tasks.length;
      this.metrics.tasksDispatched.inc({}, tasks.length);
    }
    if (fromQueue) tasks.push(...await (fromQueue as Promise<TaskPayload[]>)); // counted
    const usable = () =>
      s !== undefined && want > tasks.length && !signal?.aborted &&
      this.sessions.has(s.session_id);
    // Nothing yet for the freed slot: its next task comes from the queue now, in this answer
    // (a task queued by a commit that landed with this result's), instead of after the
    // worker's next poll; in shared mode then from a claim.
    if (usable()) {
      tasks.push(...await this.#dispatch(s!, this.#queue.take(s!, want - tasks.length)));
    }
    if (this.#claims && usable()) {
      // The result is applied whatever happens here: a failed claim only leaves the slot to poll.
      tasks.push(
        ...await this.#claim(s!, want - tasks.length).catch((e) => {
          log.engine.warn("claim after a result failed; the worker polls", {
            error: (e as Error).message,
          });
          return [];
        }),
      );
    }
    return { accepted: r.accepted, tasks: s ? this.#delivered(s, tasks, signal) : tasks };
  }

  /**
   * The steps a result's append may dispatch to the reporting worker: on one server any queued
   * step (nobody else hands them out); in shared mode only a step this append queues, as a
   * queued row may be claimed by another server at this very moment.
   */
  #eagerSteps(id: string, state: ExecutionState): StepState[] {
    return this.#claims ? newlyQueued(this.executions.stateOf(id), state) : queuedSteps(state);
  }

  installed(
    prev: ExecutionState | null,
    next: ExecutionState,
    events: readonly HistoryEvent[] = [],
  ): void {
    let queued = false;
    for (const e of events) {
      if (e.type === "StepScheduled") queued = true;
      if (e.type === "StepAttemptUncertain") {
        queued = true;
        this.metrics.tasksRedelivered.inc();
        log.engine.warn("attempt outcome uncertain; redelivering", {
          execution_id: next.execution_id,
          step: e.step,
          attempt: e.attempt,
          reason: e.reason,
        });
      }
    }
    this.#sessions.installed(prev, next, events);
    // Shared mode's queue mirrors only the rows this node's own appends queue; an execution
    // loaded here (a takeover) has its queued rows claimed by the claim statement.
    if ((queued || !this.#claims) && this.#queue.enqueue(next)) this.wake();
  }

  dropped(last: ExecutionState): void {
    this.#sessions.dropped?.(last);
  }
}
