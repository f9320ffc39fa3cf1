/**
 * The worker dispatcher of a single server (SPEC §4): long polls and their waiters, dispatch,
 * eager dispatch (of a result's next step, of a start's first task), and redelivery, composed
 * from the session store (./worker_sessions.ts) and the task queue (./task_queue.ts).
 *
 * `installed()` (called after every committed change) queues new steps and wakes waiting
 * polls at once; a poll takes tasks synchronously (so two polls never take the same one) and
 * then commits a StepDispatched for each, in one batch, before answering.
 *
 * The attempts of a session that expires or unregisters become StepAttemptUncertain and are
 * queued again with the same idempotency key; so do orphans (attempts recovered from history
 * that no worker reported within a session timeout) and attempts a live worker leaves out of
 * its heartbeats for a session timeout.
 */
import type { ErrorInfo, HistoryEvent } from "../engine/events.ts";
import type { Command } from "../engine/decide.ts";
import { type ExecutionState, newlyQueued, queuedSteps, type StepState } from "../engine/state.ts";
import type { Executions } from "../executions/executions.ts";
import type { ExecutionObserver, StartOffer } from "../executions/types.ts";
import { executionOfToken } from "../executions/types.ts";
import type { Metrics } from "../metrics.ts";
import { log } from "../log.ts";
import {
  dispatchTo,
  serves,
  type Session,
  type SessionRegistration,
  type SweepHandlers,
  type TaskPayload,
  WorkerSessions,
} from "./sessions.ts";
import { MemoryTaskQueue, type QueuedTask, type TaskQueue } from "./queue.ts";
import { TaskTakenError } from "../store/store.ts";

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

interface Waiter {
  session: Session;
  max: number;
  resolve: (picked: QueuedTask[]) => void;
  /** Answers tasks dispatched for it already (a new execution's first task); false if gone. */
  deliver: (tasks: TaskPayload[]) => boolean;
  /** The poll has answered (its wait ran out, its request closed, it got tasks). */
  done: boolean;
}

/**
 * What the routes use of a worker service: this module's in-memory one on a single server
 * and in standby mode, cluster/shared/workers.ts over the shared tables in shared mode.
 */
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

export class Workers implements WorkerService {
  /** The sessions of the session store (the same map). */
  readonly sessions: Map<string, Session>;
  #sessions: WorkerSessions;
  #queue: TaskQueue;
  #waiters: Waiter[] = [];
  #sweeper: ReturnType<typeof setInterval> | undefined;
  /** What the sweep found due, redelivered. */
  #due: SweepHandlers = {
    expired: (s) => {
      this.#loseAttempts(s, `worker \`${s.worker_id}\` stopped responding`);
    },
    unlisted: (s, token) => {
      const id = executionOfToken(token);
      if (!id) return;
      this.executions.uncertain(
        id,
        token,
        `worker \`${s.worker_id}\` does not list the attempt in its heartbeats`,
      );
    },
    orphaned: (token) => {
      const id = executionOfToken(token);
      if (!id) return;
      this.executions.uncertain(
        id,
        token,
        "no worker reported the attempt within --session-timeout after this server started",
      );
    },
  };

  constructor(
    readonly executions: Executions,
    readonly metrics: Metrics,
    readonly opts: { sessionTimeoutMs: number; now: () => number; newId: () => string },
    parts: { sessions?: WorkerSessions; queue?: TaskQueue } = {},
  ) {
    this.#sessions = parts.sessions ?? new WorkerSessions(opts);
    this.sessions = this.#sessions.sessions;
    this.#queue = parts.queue ?? new MemoryTaskQueue(executions);
    executions.observer = this;
  }

  start(): void {
    this.#sweeper = setInterval(() => this.#sweep(), 250);
  }

  stop(): void {
    clearInterval(this.#sweeper);
    for (const w of this.#waiters.splice(0)) w.resolve([]);
  }

  register(r: SessionRegistration): string {
    return this.#sessions.register(r);
  }

  async poll(
    sessionId: string,
    max: number,
    waitMs: number,
    signal?: AbortSignal,
  ): Promise<TaskPayload[]> {
    const s = this.#sessions.contact(sessionId);
    const started = performance.now();
    waitMs = pollWaitMs(waitMs, this.opts.sessionTimeoutMs);
    s.polling++;
    try {
      max = Math.max(1, Math.min(max, s.concurrency));
      let picked: QueuedTask[] | TaskPayload[] = this.#queue.take(s, max);
      let given = false;
      if (picked.length === 0 && waitMs > 0 && !signal?.aborted) {
        picked = await new Promise<QueuedTask[] | TaskPayload[]>((resolve) => {
          const w: Waiter = {
            session: s,
            max,
            resolve: (p) => finish(p),
            deliver: (tasks) => {
              if (w.done) return false;
              given = true;
              finish(tasks);
              return true;
            },
            done: false,
          };
          const finish = (p: QueuedTask[] | TaskPayload[]) => {
            w.done = true;
            clearTimeout(timer);
            signal?.removeEventListener("abort", onAbort);
            const i = this.#waiters.indexOf(w);
            if (i >= 0) this.#waiters.splice(i, 1);
            resolve(p);
          };
          const onAbort = () => finish([]);
          const timer = setTimeout(() => finish([]), waitMs);
          signal?.addEventListener("abort", onAbort);
          this.#waiters.push(w);
        });
      }
      if (given) return this.#delivered(s, picked as TaskPayload[], signal);
      return await this.#dispatch(s, picked as QueuedTask[], signal);
    } finally {
      s.polling--;
      s.last_contact_ms = this.opts.now();
      this.metrics.pollLatency.observe((performance.now() - started) / 1000);
    }
  }

  heartbeat(sessionId: string, tokens: string[]): string[] {
    return this.#sessions.heartbeat(this.#sessions.contact(sessionId), tokens);
  }

  async unregister(sessionId: string): Promise<void> {
    const s = this.#sessions.contact(sessionId);
    this.#sessions.remove(sessionId);
    // Its polls still waiting here end now (empty): a task offered to one of them would go to
    // a session that is gone and wait a whole session timeout for its redelivery.
    for (const w of [...this.#waiters]) if (w.session === s) w.resolve([]);
    await this.#loseAttempts(s, `worker \`${s.worker_id}\` unregistered while holding the attempt`);
  }

  list() {
    return this.#sessions.list();
  }

  installed(
    prev: ExecutionState | null,
    next: ExecutionState,
    events: readonly HistoryEvent[] = [],
  ): void {
    // Tokens that died: tell their workers to cancel (except the one that reported).
    const reported = new Set<string>();
    for (const e of events) {
      if ((e.type === "StepSucceeded" || e.type === "StepFailed") && e.token) reported.add(e.token);
      if (e.type === "StepAttemptUncertain") {
        this.metrics.tasksRedelivered.inc();
        log.engine.warn("attempt outcome uncertain; redelivering", {
          execution_id: next.execution_id,
          step: e.step,
          attempt: e.attempt,
          reason: e.reason,
        });
      }
    }
    this.#sessions.installed(prev, next, reported);
    if (this.#queue.enqueue(next)) this.#wake();
  }

  /**
   * A new execution's first task for a poll waiting here, dispatched in the start's commit
   * (the same as a result's eager dispatch): the first waiting poll whose session serves one
   * of the queued steps is set aside until the commit answers.
   */
  offerFirst(state: ExecutionState): StartOffer | null {
    return this.#offer(state, queuedSteps(state));
  }

  /**
   * A step that a result made ready (queued by this append) and that the reporting worker
   * does not serve, for a poll of another session waiting here: dispatched in the result's
   * commit, as a start's first task (a worker of another language or task list gets it with no
   * commit of its own).
   */
  #offerReady(id: string, state: ExecutionState): StartOffer | null {
    if (this.#waiters.length === 0) return null;
    return this.#offer(state, newlyQueued(this.executions.stateOf(id), state));
  }

  #offer(state: ExecutionState, steps: Iterable<StepState>): StartOffer | null {
    if (this.#waiters.length === 0) return null;
    for (const st of steps) {
      const i = this.#waiters.findIndex((w) => serves(w.session, st));
      if (i < 0) continue;
      const w = this.#waiters[i]!;
      this.#waiters.splice(i, 1);
      const command = dispatchTo(state.execution_id, st.id, w.session, this.opts.newId);
      return {
        command,
        deliver: (next) => {
          const task = payload(next, st.id, command.token);
          this.metrics.tasksDispatched.inc();
          // The poll ended meanwhile (its wait ran out, its request closed): the dispatch names
          // the session, not the poll, so another poll of the session waiting here takes it;
          // with none, it is redelivered.
          if (w.deliver([task])) return;
          const other = this.#waiters.find((x) =>
            x.session.session_id === w.session.session_id && !x.done
          );
          if (!other?.deliver([task])) undelivered(this.executions, w.session, [task], "closed");
        },
        release: () => {
          if (w.done) return;
          this.#waiters.push(w);
          this.#wake();
        },
      };
    }
    return null;
  }

  #wake(): void {
    for (let i = 0; i < this.#waiters.length;) {
      const w = this.#waiters[i]!;
      const picked = this.#queue.take(w.session, w.max);
      if (picked.length > 0) w.resolve(picked); // removes itself from #waiters
      else i++;
    }
  }

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
    );
    this.metrics.tasksDispatched.inc({}, tasks.length);
    return this.#delivered(s, tasks, signal);
  }

  /** When the worker went away before it got the answer, it never saw these attempts. */
  #delivered(s: Session, tasks: TaskPayload[], signal?: AbortSignal): TaskPayload[] {
    if (!signal?.aborted) return tasks;
    undelivered(this.executions, s, tasks, "closed");
    return [];
  }

  /**
   * Applies a worker's result. When the worker names its session and `max_tasks`, it gets
   * its next tasks in the same answer: a step of the same execution that the result made
   * ready is dispatched in the same commit as the result (eager dispatch), further ones are
   * taken from the queue. A result is applied even when the session has expired.
   */
  async report(
    token: string,
    result: { output: unknown } | { error: ErrorInfo },
    take?: { sessionId: string; maxTasks: number },
    signal?: AbortSignal,
  ): Promise<{ accepted: boolean; tasks: TaskPayload[] }> {
    const s = take && take.maxTasks > 0 ? this.sessions.get(take.sessionId) : undefined;
    const want = s ? Math.min(take!.maxTasks, s.concurrency) : 0;
    let eager: { step: string; token: string } | null = null;
    // The freed slot's next task from the queue, when the result leaves nothing of its own
    // execution for it: dispatched now, while the result is decided, so that both appends
    // share one commit instead of the dispatch waiting for the next one.
    let fromQueue: Promise<TaskPayload[]> | null = null;
    // Or the step it made ready is another worker's (another language, another task list): a
    // poll of that worker waiting here gets it in the result's commit (#offerReady).
    let offer: StartOffer | null = null;
    const id = executionOfToken(token);
    const follow = (state: ExecutionState): Command | null => {
      offer?.release();
      offer = null;
      eager = null;
      const st = s ? queuedSteps(state).find((st) => serves(s, st)) : undefined;
      if (st) {
        const command = dispatchTo(state.execution_id, st.id, s!, this.opts.newId);
        eager = { step: st.id, token: command.token };
        return command;
      }
      if (s && !fromQueue && this.sessions.has(s.session_id)) {
        fromQueue = this.#dispatch(s, this.#queue.take(s, want), signal);
      }
      offer = id === null ? null : this.#offerReady(id, state);
      return offer?.command ?? null;
    };
    let r;
    try {
      r = await this.executions.report(token, result, follow);
    } catch (e) {
      (offer as StartOffer | null)?.release();
      // The result was not applied (or not known to be): the worker hears an error and retries
      // it; tasks already dispatched for its slot never reach it, so they go out again.
      if (fromQueue) {
        undelivered(this.executions, s!, await (fromQueue as Promise<TaskPayload[]>), "failed");
      }
      throw e;
    }
    const offered = offer as StartOffer | null;
    if (offered) {
      if (r.followed && r.state) offered.deliver(r.state);
      else offered.release();
    }
    // Only a report that was not refused (INVALID_TOKEN, UNKNOWN_TASK, …) counts as contact.
    if (s) s.last_contact_ms = this.opts.now();
    const tasks: TaskPayload[] = [];
    if (r.followed && r.state && eager) {
      this.metrics.tasksDispatched.inc();
      tasks.push(
        payload(r.state, (eager as { step: string }).step, (eager as { token: string }).token),
      );
    }
    if (fromQueue) tasks.push(...await (fromQueue as Promise<TaskPayload[]>));
    const more = want - tasks.length;
    if (s && !fromQueue && more > 0 && this.sessions.has(s.session_id)) {
      tasks.push(...await this.#dispatch(s, this.#queue.take(s, more), signal));
    }
    return { accepted: r.accepted, tasks: s ? this.#delivered(s, tasks, signal) : tasks };
  }

  #requeue(items: QueuedTask[]): void {
    this.#queue.requeue(items);
    this.#wake();
  }

  async #loseAttempts(s: Session, reason: string): Promise<void> {
    await Promise.all([...s.tokens].map((token) => {
      const id = executionOfToken(token);
      return id ? this.executions.uncertain(id, token, reason) : undefined;
    }));
  }

  #sweep(): void {
    this.#sessions.sweep(this.#due);
  }
}

/**
 * Dispatches queued tasks to `s`, each in an append of its own (they share commits). A task
 * whose step no longer waits yields nothing; one whose dispatch failed is given to `requeue`
 * (the execution is re-read from its history first, and a dispatch that landed after all is
 * redelivered); in shared mode, one whose row another server claimed first (TaskTakenError)
 * yields nothing: the claim statement has it.
 */
export async function dispatchQueued(
  executions: Pick<Executions, "command">,
  s: Pick<Session, "worker_id" | "session_id">,
  picked: readonly QueuedTask[],
  newId: () => string,
  requeue: (q: QueuedTask) => void,
): Promise<TaskPayload[]> {
  const out = await Promise.all(picked.map(async (q): Promise<TaskPayload | null> => {
    const token = `${q.execution_id}/${newId()}`;
    try {
      const r = await executions.command(q.execution_id, {
        type: "dispatch",
        step: q.step,
        token,
        worker_id: s.worker_id,
        worker_session: s.session_id,
      });
      return r?.accepted ? payload(r.state, q.step, token) : null;
    } catch (e) {
      if (e instanceof TaskTakenError) return null;
      log.engine.error("dispatch failed; task stays queued", {
        execution_id: q.execution_id,
        step: q.step,
        error: (e as Error).message,
      });
      requeue(q);
      return null;
    }
  }));
  return out.filter((t): t is TaskPayload => t !== null);
}

/** Attempts dispatched for a request whose answer will not carry them: redelivered. */
export function undelivered(
  executions: Pick<Executions, "uncertain">,
  s: Pick<Session, "worker_id">,
  tasks: readonly TaskPayload[],
  how: "closed" | "failed",
): void {
  for (const t of tasks) {
    executions.uncertain(
      t.execution_id,
      t.token,
      how === "closed"
        ? `the request of worker \`${s.worker_id}\` closed before the task was delivered`
        : `the result reported by worker \`${s.worker_id}\` with the task's request failed`,
    );
  }
}

/** The SPEC §4 task payload of a dispatched step. */
export function payload(state: ExecutionState, step: string, token: string): TaskPayload {
  const st = state.steps[step]!;
  return {
    token,
    execution_id: state.execution_id,
    step,
    attempt: st.attempt,
    task: st.task,
    contract: st.contract,
    input: st.input,
    idempotency_key: st.idempotency_key,
    redelivery: st.redelivery,
    deadline_ms: st.deadline_ms,
  };
}
