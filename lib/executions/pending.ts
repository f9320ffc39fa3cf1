/**
 * "Why is it waiting?": every open item of a running execution with the reason it has not
 * moved, computed from what this server already holds — the execution's state (in memory when
 * it runs here, else replayed from its history), its history (for the time each item began),
 * the live worker sessions, and the dispatches this module has watched since the server
 * started (for the last worker that served a task). Nothing here writes or changes a thing.
 *
 * Item kinds and reasons (the `reason` codes are the contract; `message` is for people):
 *   task      QUEUED_NO_WORKER   no live session serves task+contract (+language)
 *             QUEUED_SLOTS_BUSY  sessions serve it but every slot holds an attempt
 *             QUEUED_FOR_POLL    a session with a free slot serves it: the next poll takes it
 *             DISPATCHED         a worker holds the attempt and was heard from recently
 *             WORKER_SILENT      the worker holding it has not been heard from for a while
 *             WORKER_GONE        the session holding it is gone: redelivery follows
 *             RETRY_BACKOFF      the attempt failed; the next one starts when the timer fires
 *   http      HTTP_CALL          the server's HTTP adapter runs the call
 *   signal    WAITING_FOR_SIGNAL a wait_signal step
 *   sleep     SLEEPING           a sleep step
 *   child     CHILD_RUNNING      a child execution runs
 *             CHILD_HELD         its start is held back by --max-active-executions
 *             CHILD_STARTING     its start is in progress
 */
import { type ExecutionState, isOpenStatus, replay, type StepState } from "../engine/state.ts";
import type { HistoryEvent } from "../engine/events.ts";
import type { ExecutionObserver } from "./types.ts";
import type { Runtime } from "../runtime.ts";
import type { SessionView } from "../workers/dispatcher.ts";
import { notFound } from "../errors.ts";

export type PendingReason =
  | "QUEUED_NO_WORKER"
  | "QUEUED_SLOTS_BUSY"
  | "QUEUED_FOR_POLL"
  | "DISPATCHED"
  | "WORKER_SILENT"
  | "WORKER_GONE"
  | "RETRY_BACKOFF"
  | "HTTP_CALL"
  | "WAITING_FOR_SIGNAL"
  | "SLEEPING"
  | "CHILD_RUNNING"
  | "CHILD_HELD"
  | "CHILD_STARTING";

/** One open item of an execution and why it waits. Fields beyond the first six are optional. */
export interface PendingItem {
  kind: "task" | "http" | "signal" | "sleep" | "child";
  step: string;
  attempt: number;
  reason: PendingReason;
  /** One sentence for people, naming the worker, task and times involved. */
  message: string;
  /** When the item began waiting in its current form (its last event), if known. */
  since_ms: number | null;
  compensation?: boolean;
  task?: string;
  contract?: string;
  language?: string | null;
  /** Live sessions serving the task, their slots and the attempts they hold. */
  sessions?: number;
  slots?: number;
  busy_slots?: number;
  /** Attempts queued for this task and contract across every execution on this server. */
  queue_depth?: number;
  /** The last worker this server handed the task to, and when (null: none seen). */
  last_worker?: { worker_id: string; at_ms: number } | null;
  worker_id?: string;
  session_id?: string;
  last_contact_ms?: number | null;
  silent_s?: number;
  /** When the attempt is redelivered if the worker stays silent. */
  redeliver_at_ms?: number | null;
  /** The step's deadline for this attempt. */
  deadline_ms?: number | null;
  retry_at_ms?: number | null;
  last_error?: { code: string; message: string } | null;
  signal?: string;
  timeout_at_ms?: number | null;
  until_ms?: number | null;
  child_execution_id?: string;
  child_workflow?: string;
  child_status?: string | null;
  max_active_executions?: number;
  active_executions?: number;
}

export interface PendingAnswer {
  execution_id: string;
  run_id: string;
  status: string;
  phase: string;
  now_ms: number;
  /** The workflow's own deadline (`timeout_s`), if it has one. */
  timeout_at_ms: number | null;
  /** `memory`: this server runs the execution; `history`: replayed from the store. */
  source: "memory" | "history";
  pending: PendingItem[];
}

const key = (task: string, contract: string) => `${task}\u0000${contract}`;

/** A session whose last contact is older than this share of the timeout is "silent". */
const SILENT_SHARE = 0.5;

/**
 * Watches dispatches (an execution observer, read-only) to remember the last worker that
 * served each task, and answers pending queries. One per runtime: `pendingOf(rt)`.
 */
export class Pending implements ExecutionObserver {
  #lastWorker = new Map<string, { worker_id: string; at_ms: number }>();

  constructor(readonly rt: Runtime) {
    rt.executions.addObserver(this);
  }

  installed(_prev: ExecutionState | null, next: ExecutionState, events: readonly HistoryEvent[]) {
    for (const e of events) {
      if (e.type !== "StepDispatched") continue;
      const st = next.steps[e.step];
      if (st) {
        this.#lastWorker.set(key(st.task, st.contract), {
          worker_id: e.worker_id,
          at_ms: e.time_ms,
        });
      }
    }
  }

  /** The pending items of execution `id` (404 UNKNOWN_EXECUTION for an unknown one). */
  async of(id: string): Promise<PendingAnswer> {
    const rt = this.rt;
    const now = rt.clock.now();
    const live = rt.executions.currentStateOf(id);
    let state: ExecutionState;
    let events: HistoryEvent[];
    if (live) {
      state = live;
      events = await rt.store.readHistory(live.run_id, 0, 1_000_000);
    } else {
      const row = await rt.store.getExecution(id);
      if (!row) throw notFound("UNKNOWN_EXECUTION", `execution ${id} does not exist`);
      if (row.status !== "running") {
        return {
          execution_id: row.execution_id,
          run_id: row.run_id,
          status: row.status,
          phase: "closed",
          now_ms: now,
          timeout_at_ms: null,
          source: "history",
          pending: [],
        };
      }
      events = await rt.store.readHistory(row.run_id, 0, 1_000_000);
      state = replay(events);
    }
    const items: PendingItem[] = [];
    if (state.phase !== "closed") {
      const since = sinceByStep(events);
      const lastDispatch = lastDispatchByTask(events, state);
      const sessions = await this.#sessions(state);
      for (const st of Object.values(state.steps)) {
        if (!isOpenStatus(st.status)) continue;
        const item = await this.#item(
          state,
          st,
          since.get(st.id) ?? null,
          now,
          lastDispatch,
          sessions,
        );
        if (item) items.push(item);
      }
      items.sort((a, b) => (a.since_ms ?? 0) - (b.since_ms ?? 0) || a.step.localeCompare(b.step));
      if (!live) {
        // Worker sessions and dispatches live on the server that runs the execution.
        for (const item of items) {
          if (item.kind === "task") {
            item.message += " (as this server sees it; another server runs the execution)";
          }
        }
      }
    }
    return {
      execution_id: state.execution_id,
      run_id: state.run_id,
      status: state.status,
      phase: state.phase,
      now_ms: now,
      timeout_at_ms: state.phase === "closed" ? null : state.timeout_at_ms,
      source: live ? "memory" : "history",
      pending: items,
    };
  }

  /**
   * The live sessions, by id: this server's, or in shared mode the whole cluster's (read only
   * when a task of the execution is open).
   */
  async #sessions(s: ExecutionState): Promise<Map<string, SessionView>> {
    const w = this.rt.workers;
    const tasks = Object.values(s.steps).some((st) =>
      st.kind === "task" && isOpenStatus(st.status)
    );
    const views: SessionView[] = w.sessionViews && tasks
      ? await w.sessionViews()
      : [...w.sessions.values()].map((x) => ({ ...x, busy: x.tokens.size }));
    return new Map(views.map((v) => [v.session_id, v]));
  }

  async #item(
    s: ExecutionState,
    st: StepState,
    since: number | null,
    now: number,
    lastDispatch: Map<string, { worker_id: string; at_ms: number }>,
    sessions: Map<string, SessionView>,
  ): Promise<PendingItem | null> {
    const base = { step: st.id, attempt: st.attempt, since_ms: since };
    const comp = st.compensation ? { compensation: true } : {};
    if (st.kind === "task" || st.kind === "http") {
      const task = { task: st.task, contract: st.contract, language: st.language, ...comp };
      if (st.status === "backoff") {
        const retryAt = timerOf(s, st.id, "retry");
        return {
          kind: st.kind,
          ...base,
          ...task,
          reason: "RETRY_BACKOFF",
          retry_at_ms: retryAt,
          last_error: st.error ? { code: st.error.code, message: st.error.message } : null,
          message: `attempt ${st.attempt} failed${st.error ? ` with ${st.error.code}` : ""}; ` +
            `attempt ${st.attempt + 1} starts ${retryAt !== null ? `at ${iso(retryAt)}` : "soon"}`,
        };
      }
      if (st.kind === "http") {
        return {
          kind: "http",
          ...base,
          ...task,
          reason: "HTTP_CALL",
          deadline_ms: st.deadline_ms,
          message: "the server's HTTP adapter is making the call",
        };
      }
      if (st.status === "dispatched") return this.#dispatched(st, base, task, now, sessions);
      return this.#queued(st, base, task, lastDispatch, sessions);
    }
    if (st.kind === "wait_signal") {
      const timeout = timerOf(s, st.id, "timeout");
      return {
        kind: "signal",
        ...base,
        ...comp,
        reason: "WAITING_FOR_SIGNAL",
        signal: st.signal ?? "",
        timeout_at_ms: timeout,
        message: `waiting for signal ${st.signal ?? "?"}` +
          (since !== null ? ` since ${iso(since)}` : "") +
          (timeout !== null
            ? `; times out at ${iso(timeout)}`
            : s.timeout_at_ms !== null
            ? `; no timeout of its own (the workflow times out at ${iso(s.timeout_at_ms)})`
            : "; no timeout"),
      };
    }
    if (st.kind === "sleep") {
      const until = timerOf(s, st.id, "sleep");
      return {
        kind: "sleep",
        ...base,
        ...comp,
        reason: "SLEEPING",
        until_ms: until,
        message: until !== null ? `sleeping until ${iso(until)}` : "sleeping",
      };
    }
    if (st.kind === "child" && st.child) {
      return await this.#child(s, st, base, now);
    }
    // if, parallel, assign, continue_as_new: containers or instant steps; their inner steps
    // carry the reasons.
    return null;
  }

  #dispatched(
    st: StepState,
    base: { step: string; attempt: number; since_ms: number | null },
    task: Record<string, unknown>,
    now: number,
    sessions: Map<string, SessionView>,
  ): PendingItem {
    const timeoutMs = this.rt.opts.sessionTimeoutMs;
    const entry = Object.entries(st.tokens).filter(([, t]) => !t.uncertain)
      .sort((a, b) => b[1].dispatched_ms - a[1].dispatched_ms)[0];
    const info = entry?.[1];
    const session = info ? sessions.get(info.worker_session) : undefined;
    const worker = info?.worker_id ?? "?";
    const deadline = st.deadline_ms;
    const deadlineText = deadline !== null ? `; the attempt times out at ${iso(deadline)}` : "";
    if (!session) {
      return {
        kind: "task",
        ...base,
        ...task,
        reason: "WORKER_GONE",
        worker_id: worker,
        session_id: info?.worker_session ?? "",
        last_contact_ms: null,
        redeliver_at_ms: null,
        deadline_ms: deadline,
        message: `dispatched to worker ${worker}, whose session is gone; the attempt is ` +
          `redelivered within --session-timeout (${timeoutMs / 1000} s) unless a worker ` +
          `reports it${deadlineText}`,
      };
    }
    const silentMs = session.polling > 0 ? 0 : Math.max(0, now - session.last_contact_ms);
    const redeliverAt = session.polling > 0 ? null : session.last_contact_ms + timeoutMs;
    const silent = silentMs > timeoutMs * SILENT_SHARE;
    return {
      kind: "task",
      ...base,
      ...task,
      reason: silent ? "WORKER_SILENT" : "DISPATCHED",
      worker_id: session.worker_id,
      session_id: session.session_id,
      last_contact_ms: session.last_contact_ms,
      silent_s: Math.round(silentMs / 100) / 10,
      redeliver_at_ms: redeliverAt,
      deadline_ms: deadline,
      message: `dispatched to worker ${session.worker_id}` +
        (info ? ` at ${iso(info.dispatched_ms)}` : "") +
        (session.polling > 0
          ? "; its poll is open"
          : `; last contact ${fmtS(silentMs)} ago, redelivered at ${
            iso(redeliverAt!)
          } if it stays silent`) +
        deadlineText,
    };
  }

  #queued(
    st: StepState,
    base: { step: string; attempt: number; since_ms: number | null },
    task: Record<string, unknown>,
    lastDispatch: Map<string, { worker_id: string; at_ms: number }>,
    sessions: Map<string, SessionView>,
  ): PendingItem {
    const serving = [...sessions.values()].filter((s) => serves(s, st));
    const slots = serving.reduce((n, s) => n + s.concurrency, 0);
    const busy = serving.reduce((n, s) => n + Math.min(s.concurrency, s.busy), 0);
    const depth = this.#queueDepth(st.task, st.contract);
    const k = key(st.task, st.contract);
    const seen = this.#lastWorker.get(k);
    const fromHistory = lastDispatch.get(k);
    const last = seen && (!fromHistory || seen.at_ms >= fromHistory.at_ms)
      ? seen
      : fromHistory ?? null;
    const what = `task ${st.task} contract ${st.contract}` +
      (st.language && st.language !== "any" ? ` (language ${st.language})` : "");
    const common = {
      kind: "task" as const,
      ...base,
      ...task,
      sessions: serving.length,
      slots,
      busy_slots: busy,
      queue_depth: depth,
      last_worker: last,
    };
    const redelivery = st.redelivery ? " (a redelivery)" : "";
    if (serving.length === 0) {
      return {
        ...common,
        reason: "QUEUED_NO_WORKER",
        message: `queued${redelivery}: no worker serves ${what}` +
          (last
            ? `; last served by worker ${last.worker_id} at ${iso(last.at_ms)}`
            : "; no worker has served it since this server started"),
      };
    }
    if (busy >= slots) {
      return {
        ...common,
        reason: "QUEUED_SLOTS_BUSY",
        message: `queued${redelivery}: ${serving.length} worker session(s) serve ${what} but ` +
          `all ${slots} slot(s) are busy; ${depth} attempt(s) queued for it`,
      };
    }
    return {
      ...common,
      reason: "QUEUED_FOR_POLL",
      message: `queued${redelivery}: ${slots - busy} free slot(s) serve ${what}; the next poll ` +
        `takes it (${depth} queued)`,
    };
  }

  /** Attempts queued for a task across the executions this server runs. */
  #queueDepth(task: string, contract: string): number {
    let n = 0;
    for (const s of this.rt.executions.heldStates()) {
      if (s.phase === "closed") continue;
      for (const st of Object.values(s.steps)) {
        if (
          st.kind === "task" && st.status === "scheduled" && st.task === task &&
          st.contract === contract
        ) n++;
      }
    }
    return n;
  }

  async #child(
    s: ExecutionState,
    st: StepState,
    base: { step: string; attempt: number; since_ms: number | null },
    _now: number,
  ): Promise<PendingItem> {
    const spec = st.child!;
    const child = {
      child_execution_id: spec.execution_id,
      child_workflow: spec.workflow,
      timeout_at_ms: timerOf(s, st.id, "timeout"),
    };
    if (st.child_run_id !== undefined) {
      const held = this.rt.executions.currentStateOf(spec.execution_id);
      const status = held ? held.status : (await this.rt.store.getExecution(spec.execution_id))
        ?.status ?? null;
      return {
        kind: "child",
        ...base,
        ...child,
        child_status: status,
        reason: "CHILD_RUNNING",
        message: `waiting for child execution ${spec.execution_id} (${spec.workflow}), ` +
          `${status ?? "unknown"}`,
      };
    }
    const max = this.rt.opts.maxActiveExecutions;
    const active = this.rt.executions.heldCount;
    if (max !== null && active >= max) {
      return {
        kind: "child",
        ...base,
        ...child,
        child_status: null,
        reason: "CHILD_HELD",
        max_active_executions: max,
        active_executions: active,
        message: `the start of child ${spec.execution_id} (${spec.workflow}) is held back by ` +
          `--max-active-executions ${max}: ${active} executions run; it is retried every second`,
      };
    }
    return {
      kind: "child",
      ...base,
      ...child,
      child_status: null,
      reason: "CHILD_STARTING",
      message: `starting child execution ${spec.execution_id} (${spec.workflow})`,
    };
  }
}

const services = new WeakMap<Runtime, Pending>();

/** The one Pending of a runtime (created, and its observer added, on first use). */
export function pendingOf(rt: Runtime): Pending {
  let p = services.get(rt);
  if (!p) services.set(rt, p = new Pending(rt));
  return p;
}

function serves(s: SessionView, st: StepState): boolean {
  return s.tasks.some((reg) =>
    reg.name === st.task && reg.contract === st.contract &&
    (st.language === null || st.language === "any" ||
      st.language === (reg.language ?? s.runtime))
  );
}

function timerOf(s: ExecutionState, step: string, purpose: string): number | null {
  let at: number | null = null;
  for (const t of Object.values(s.timers)) {
    if (t.step === step && t.purpose === purpose && (at === null || t.fire_at_ms > at)) {
      at = t.fire_at_ms;
    }
  }
  return at;
}

/** The time of each step's latest event: when its current wait began. */
function sinceByStep(events: readonly HistoryEvent[]): Map<string, number> {
  const out = new Map<string, number>();
  for (const e of events) {
    if ("step" in e && typeof e.step === "string" && e.type !== "TimerFired") {
      out.set(e.step, e.time_ms);
    }
  }
  return out;
}

/** The last StepDispatched of each task+contract in this run (a fallback after a restart). */
function lastDispatchByTask(
  events: readonly HistoryEvent[],
  s: ExecutionState,
): Map<string, { worker_id: string; at_ms: number }> {
  const out = new Map<string, { worker_id: string; at_ms: number }>();
  for (const e of events) {
    if (e.type !== "StepDispatched") continue;
    const st = s.steps[e.step];
    if (st) out.set(key(st.task, st.contract), { worker_id: e.worker_id, at_ms: e.time_ms });
  }
  return out;
}

/** A time as ISO 8601; one past what a Date holds (a timer of a history written before sleep_s
 * was capped when computed, `fire_at_ms` 1e303) reads as the text of its number. */
function iso(ms: number): string {
  const d = new Date(ms);
  return Number.isNaN(d.getTime()) ? String(ms) : d.toISOString();
}

function fmtS(ms: number): string {
  return `${(Math.round(ms / 100) / 10).toFixed(1)} s`;
}
