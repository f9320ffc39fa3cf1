/**
 * Worker sessions, long polls and the task queue (SPEC §4).
 *
 * The queue is derived from execution state: a step whose status is `scheduled` is queued.
 * `installed()` (called after every committed change) adds new ones and wakes waiting polls at
 * once; a poll takes tasks synchronously (so two polls never take the same one) and then
 * commits a StepDispatched for each, in one batch, before answering.
 *
 * Sessions live in memory. A session expires one --session-timeout after its last contact (a
 * poll in progress counts as contact); its attempts become StepAttemptUncertain and are queued
 * again with the same idempotency key. Attempts recovered from history whose worker has not
 * been heard of ("orphans") get the same treatment one session timeout after the start, unless
 * a heartbeat of a new session names their token first.
 */
import type { ErrorInfo, HistoryEvent } from "./engine/events.ts";
import type { Command } from "./engine/decide.ts";
import { type ExecutionState, liveTokens, queuedSteps } from "./engine/state.ts";
import type { ExecutionObserver, Executions, StartOffer } from "./executions.ts";
import { executionOfToken } from "./executions.ts";
import { notFound } from "./errors.ts";
import type { Metrics } from "./metrics.ts";
import { log } from "./log.ts";

export interface TaskRegistration {
  name: string;
  contract: string;
  language?: string | undefined;
}

export interface Session {
  session_id: string;
  worker_id: string;
  runtime: string;
  tasks: TaskRegistration[];
  concurrency: number;
  created_ms: number;
  last_contact_ms: number;
  polling: number;
  tokens: Set<string>;
  cancel: Set<string>;
  told: Set<string>;
}

/** What an owner needs of a worker's session to dispatch a task to it. */
export type EagerSession = Pick<Session, "session_id" | "worker_id" | "runtime" | "tasks">;

export interface TaskPayload {
  token: string;
  execution_id: string;
  step: string;
  attempt: number;
  task: string;
  contract: string;
  input: unknown;
  idempotency_key: string;
  redelivery: boolean;
  deadline_ms: number | null;
}

interface Queued {
  execution_id: string;
  step: string;
  attempt: number;
  language: string | null;
}

const queuedId = (q: Queued) => `${q.execution_id}\u0000${q.step}\u0000${q.attempt}`;

interface Waiter {
  session: Session;
  max: number;
  resolve: (picked: Queued[]) => void;
  /** Answers tasks dispatched for it already (a new execution's first task); false if gone. */
  deliver: (tasks: TaskPayload[]) => boolean;
  /** The poll has answered (its wait ran out, its request closed, it got tasks). */
  done: boolean;
}

const key = (task: string, contract: string) => `${task}\u0000${contract}`;

/**
 * What the routes use of a worker service: this module's in-memory one on a single server
 * and in standby mode, cluster/shared_workers.ts over the shared tables in shared mode.
 */
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
  start(): void;
  stop(): void;
}

export class Workers implements WorkerService {
  readonly sessions = new Map<string, Session>();
  #queue = new Map<string, Queued[]>();
  #queued = new Set<string>();
  #waiters: Waiter[] = [];
  #tokenSession = new Map<string, string>();
  #orphans = new Map<string, number>();
  /**
   * Live attempts of live sessions: when the worker last had it (its dispatch, or a heartbeat
   * listing it), and whether a heartbeat since then left it out (`doubted`: reported once).
   */
  #confirmed = new Map<string, { at: number; missed: boolean; doubted: boolean }>();
  #sweeper: ReturnType<typeof setInterval> | undefined;

  constructor(
    readonly executions: Executions,
    readonly metrics: Metrics,
    readonly opts: { sessionTimeoutMs: number; now: () => number; newId: () => string },
  ) {
    executions.observer = this;
  }

  start(): void {
    this.#sweeper = setInterval(() => this.#sweep(), 250);
  }

  stop(): void {
    clearInterval(this.#sweeper);
    for (const w of this.#waiters.splice(0)) w.resolve([]);
  }

  register(
    r: Omit<
      Session,
      "session_id" | "created_ms" | "last_contact_ms" | "polling" | "tokens" | "cancel" | "told"
    >,
  ): string {
    const now = this.opts.now();
    const s: Session = {
      ...r,
      session_id: this.opts.newId(),
      created_ms: now,
      last_contact_ms: now,
      polling: 0,
      tokens: new Set(),
      cancel: new Set(),
      told: new Set(),
    };
    this.sessions.set(s.session_id, s);
    log.engine.info("worker registered", {
      worker_id: r.worker_id,
      runtime: r.runtime,
      tasks: r.tasks.length,
    });
    return s.session_id;
  }

  #session(id: string): Session {
    const s = this.sessions.get(id);
    if (!s) {
      throw notFound(
        "UNKNOWN_SESSION",
        `worker session ${id} is unknown or expired; register again`,
      );
    }
    s.last_contact_ms = this.opts.now();
    return s;
  }

  async poll(
    sessionId: string,
    max: number,
    waitMs: number,
    signal?: AbortSignal,
  ): Promise<TaskPayload[]> {
    const s = this.#session(sessionId);
    const started = performance.now();
    s.polling++;
    try {
      max = Math.max(1, Math.min(max, s.concurrency));
      let picked: Queued[] | TaskPayload[] = this.#pick(s, max);
      let given = false;
      if (picked.length === 0 && waitMs > 0 && !signal?.aborted) {
        picked = await new Promise<Queued[] | TaskPayload[]>((resolve) => {
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
          const finish = (p: Queued[] | TaskPayload[]) => {
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
      return await this.#dispatch(s, picked as Queued[], signal);
    } finally {
      s.polling--;
      s.last_contact_ms = this.opts.now();
      this.metrics.pollLatency.observe((performance.now() - started) / 1000);
    }
  }

  heartbeat(sessionId: string, tokens: string[]): string[] {
    const s = this.#session(sessionId);
    const cancel = new Set(s.cancel);
    s.cancel.clear();
    for (const t of tokens) {
      if (
        this.#orphans.delete(t) ||
        (this.#tokenSession.has(t) && this.#tokenSession.get(t) !== s.session_id)
      ) {
        // A worker that registered again still runs this attempt: it now belongs to this session.
        const old = this.sessions.get(this.#tokenSession.get(t) ?? "");
        old?.tokens.delete(t);
        this.#tokenSession.set(t, s.session_id);
        s.tokens.add(t);
      } else if (!this.#tokenSession.has(t) && !s.told.has(t)) {
        cancel.add(t);
      }
    }
    for (const t of cancel) s.told.add(t);
    if (s.told.size > 10_000) s.told.clear();
    const listed = new Set(tokens);
    const now = this.opts.now();
    for (const t of s.tokens) {
      const c = this.#confirmed.get(t);
      if (!c) continue;
      if (listed.has(t)) {
        c.at = now;
        c.missed = false;
      } else {
        c.missed = true;
      }
    }
    return [...cancel];
  }

  async unregister(sessionId: string): Promise<void> {
    const s = this.#session(sessionId);
    this.sessions.delete(sessionId);
    await this.#loseAttempts(s, `worker \`${s.worker_id}\` unregistered while holding the attempt`);
  }

  list() {
    return [...this.sessions.values()].map((s) => ({
      session_id: s.session_id,
      worker_id: s.worker_id,
      runtime: s.runtime,
      tasks: s.tasks,
      concurrency: s.concurrency,
      created_ms: s.created_ms,
      last_contact_ms: s.last_contact_ms,
      in_flight: s.tokens.size,
    }));
  }

  installed(
    prev: ExecutionState | null,
    next: ExecutionState,
    events: readonly HistoryEvent[] = [],
  ): void {
    const now = this.opts.now();
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
    const live = new Set<string>();
    for (const { token, info } of liveTokens(next)) {
      live.add(token);
      if (this.#tokenSession.has(token) || this.#orphans.has(token)) continue;
      if (this.sessions.has(info.worker_session)) {
        this.#tokenSession.set(token, info.worker_session);
        this.sessions.get(info.worker_session)!.tokens.add(token);
        this.#confirmed.set(token, { at: now, missed: false, doubted: false });
      } else {
        this.#orphans.set(token, now + this.opts.sessionTimeoutMs);
      }
    }
    if (prev) {
      for (const { token } of liveTokens(prev)) {
        if (live.has(token)) continue;
        this.#orphans.delete(token);
        this.#confirmed.delete(token);
        const sid = this.#tokenSession.get(token);
        this.#tokenSession.delete(token);
        const s = sid ? this.sessions.get(sid) : undefined;
        if (s) {
          s.tokens.delete(token);
          if (!reported.has(token)) s.cancel.add(token);
        }
      }
    }
    let added = false;
    for (const st of queuedSteps(next)) {
      const item = {
        execution_id: next.execution_id,
        step: st.id,
        attempt: st.attempt,
        language: st.language,
      };
      if (this.#queued.has(queuedId(item))) continue;
      this.#queued.add(queuedId(item));
      const k = key(st.task, st.contract);
      let q = this.#queue.get(k);
      if (!q) this.#queue.set(k, q = []);
      q.push(item);
      added = true;
    }
    if (added) this.#wake();
  }

  /**
   * A new execution's first task for a poll waiting here, dispatched in the start's commit
   * (the same as a result's eager dispatch): the first waiting poll whose session serves one
   * of the queued steps is set aside until the commit answers.
   */
  offerFirst(state: ExecutionState): StartOffer | null {
    if (this.#waiters.length === 0) return null;
    for (const st of queuedSteps(state)) {
      const i = this.#waiters.findIndex((w) =>
        w.session.tasks.some((reg) =>
          reg.name === st.task && reg.contract === st.contract &&
          languageFits(st.language, reg, w.session)
        )
      );
      if (i < 0) continue;
      const w = this.#waiters[i]!;
      this.#waiters.splice(i, 1);
      const token = `${state.execution_id}/${this.opts.newId()}`;
      return {
        command: {
          type: "dispatch",
          step: st.id,
          token,
          worker_id: w.session.worker_id,
          worker_session: w.session.session_id,
        },
        deliver: (next) => {
          const task = payload(next, st.id, token);
          this.metrics.tasksDispatched.inc();
          // The poll ended meanwhile (its wait ran out, its request closed): redelivered.
          if (!w.deliver([task])) this.#undelivered(w.session, [task], "closed");
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
      const picked = this.#pick(w.session, w.max);
      if (picked.length > 0) w.resolve(picked); // removes itself from #waiters
      else i++;
    }
  }

  /** Takes up to `max` queued tasks this session serves (synchronously: no double take). */
  #pick(s: Session, max: number): Queued[] {
    const out: Queued[] = [];
    for (const reg of s.tasks) {
      const q = this.#queue.get(key(reg.name, reg.contract));
      if (!q) continue;
      for (let i = 0; i < q.length && out.length < max;) {
        const item = q[i]!;
        const st = this.executions.stateOf(item.execution_id)?.steps[item.step];
        if (!st || st.status !== "scheduled" || st.attempt !== item.attempt) {
          q.splice(i, 1);
          this.#queued.delete(queuedId(item));
          continue;
        }
        if (!languageFits(item.language, reg, s)) {
          i++;
          continue;
        }
        q.splice(i, 1);
        this.#queued.delete(queuedId(item));
        out.push(item);
      }
      if (out.length >= max) break;
    }
    return out;
  }

  async #dispatch(s: Session, picked: Queued[], signal?: AbortSignal): Promise<TaskPayload[]> {
    if (picked.length === 0) return [];
    if (signal?.aborted || !this.sessions.has(s.session_id)) {
      this.#requeue(picked);
      return [];
    }
    const results = await Promise.all(picked.map(async (q): Promise<TaskPayload | null> => {
      const token = `${q.execution_id}/${this.opts.newId()}`;
      try {
        const r = await this.executions.command(q.execution_id, {
          type: "dispatch",
          step: q.step,
          token,
          worker_id: s.worker_id,
          worker_session: s.session_id,
        });
        if (!r?.accepted) return null;
        this.metrics.tasksDispatched.inc();
        return payload(r.state, q.step, token);
      } catch (e) {
        log.engine.error("dispatch failed; task stays queued", {
          execution_id: q.execution_id,
          step: q.step,
          error: (e as Error).message,
        });
        this.#requeue([q]);
        return null;
      }
    }));
    return this.#delivered(s, results.filter((t): t is TaskPayload => t !== null), signal);
  }

  /** When the worker went away before it got the answer, it never saw these attempts. */
  #delivered(s: Session, tasks: TaskPayload[], signal?: AbortSignal): TaskPayload[] {
    if (!signal?.aborted) return tasks;
    this.#undelivered(s, tasks, "closed");
    return [];
  }

  /** Attempts dispatched for a request whose answer will not carry them: redelivered. */
  #undelivered(s: Session, tasks: TaskPayload[], how: "closed" | "failed"): void {
    for (const t of tasks) {
      this.executions.uncertain(
        t.execution_id,
        t.token,
        how === "closed"
          ? `the request of worker \`${s.worker_id}\` closed before the task was delivered`
          : `the result reported by worker \`${s.worker_id}\` with the task's request failed`,
      );
    }
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
    const follow = s
      ? (state: ExecutionState): Command | null => {
        const st = queuedSteps(state).find((st) =>
          s.tasks.some((reg) =>
            reg.name === st.task && reg.contract === st.contract &&
            languageFits(st.language, reg, s)
          )
        );
        if (!st) {
          if (!fromQueue && this.sessions.has(s.session_id)) {
            fromQueue = this.#dispatch(s, this.#pick(s, want), signal);
          }
          return null;
        }
        eager = { step: st.id, token: `${state.execution_id}/${this.opts.newId()}` };
        return {
          type: "dispatch",
          step: st.id,
          token: eager.token,
          worker_id: s.worker_id,
          worker_session: s.session_id,
        };
      }
      : undefined;
    let r;
    try {
      r = await this.executions.report(token, result, follow);
    } catch (e) {
      // The result was not applied (or not known to be): the worker hears an error and retries
      // it; tasks already dispatched for its slot never reach it, so they go out again.
      if (fromQueue) this.#undelivered(s!, await (fromQueue as Promise<TaskPayload[]>), "failed");
      throw e;
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
      tasks.push(...await this.#dispatch(s, this.#pick(s, more), signal));
    }
    return { accepted: r.accepted, tasks: s ? this.#delivered(s, tasks, signal) : tasks };
  }

  #requeue(items: Queued[]): void {
    for (const q of items) {
      const st = this.executions.stateOf(q.execution_id)?.steps[q.step];
      if (!st || st.status !== "scheduled" || st.attempt !== q.attempt) continue;
      const k = key(st.task, st.contract);
      if (this.#queued.has(queuedId(q))) continue;
      this.#queued.add(queuedId(q));
      let list = this.#queue.get(k);
      if (!list) this.#queue.set(k, list = []);
      list.unshift(q);
    }
    this.#wake();
  }

  async #loseAttempts(s: Session, reason: string): Promise<void> {
    await Promise.all([...s.tokens].map((token) => {
      const id = executionOfToken(token);
      return id ? this.executions.uncertain(id, token, reason) : undefined;
    }));
  }

  #sweep(): void {
    const now = this.opts.now();
    for (const s of [...this.sessions.values()]) {
      if (s.polling > 0 || now - s.last_contact_ms <= this.opts.sessionTimeoutMs) continue;
      this.sessions.delete(s.session_id);
      log.engine.info("worker session expired", {
        worker_id: s.worker_id,
        session_id: s.session_id,
      });
      this.#loseAttempts(s, `worker \`${s.worker_id}\` stopped responding`);
      for (const t of s.tokens) this.#confirmed.delete(t);
    }
    // An attempt its live worker leaves out of its heartbeats for a session timeout was never
    // received (the answer that carried it was lost, e.g. on a connection cut after the server
    // wrote it): redelivered with the same idempotency key, as shared mode does.
    for (const s of this.sessions.values()) {
      for (const t of s.tokens) {
        const c = this.#confirmed.get(t);
        if (!c || c.doubted || !c.missed || now - c.at <= this.opts.sessionTimeoutMs) continue;
        c.doubted = true;
        const id = executionOfToken(t);
        if (!id) continue;
        this.executions.uncertain(
          id,
          t,
          `worker \`${s.worker_id}\` does not list the attempt in its heartbeats`,
        );
      }
    }
    for (const [token, expires] of [...this.#orphans]) {
      if (expires > now) continue;
      this.#orphans.delete(token);
      const id = executionOfToken(token);
      if (!id) continue;
      this.executions.uncertain(
        id,
        token,
        "no worker reported the attempt within --session-timeout after this server started",
      );
    }
  }
}

/** Whether a task pinned to `language` may go to a session serving it under `reg`. */
export function languageFits(
  language: string | null,
  reg: TaskRegistration,
  s: Pick<Session, "runtime">,
): boolean {
  return language === null || language === "any" || language === (reg.language ?? s.runtime);
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
