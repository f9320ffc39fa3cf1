/**
 * Execution state as a pure fold over history: `replay(events)` rebuilds it, `apply(state, e)`
 * moves it by one event. No I/O, no clock, no randomness: everything time- or id-dependent is
 * in the events themselves.
 *
 * State model of one step (a unit of work for a worker):
 *   scheduled   — waiting for a worker; a poll moves it to dispatched (StepDispatched)
 *   dispatched  — a worker holds a token; a result, a timeout or a lost session moves it on
 *   backoff     — the attempt failed and a retry timer runs (TimerStarted purpose=retry)
 *   succeeded | failed | cancelled — closed; its tokens are dead
 * StepAttemptUncertain moves a dispatched step back to scheduled with `redelivery` set; the
 * uncertain token stays live, so a late result of that attempt is still accepted once.
 */
import type { ErrorInfo, ExecutionStatus, HistoryEvent } from "./events.ts";

export interface TokenInfo {
  worker_id: string;
  worker_session: string;
  dispatched_ms: number;
  /** Set by StepAttemptUncertain: the attempt was already handed out again. */
  uncertain?: boolean;
}

export type StepStatus =
  | "scheduled"
  | "dispatched"
  | "backoff"
  | "succeeded"
  | "failed"
  | "cancelled";

export interface StepState {
  id: string;
  status: StepStatus;
  attempt: number;
  task: string;
  contract: string;
  language: string | null;
  input: unknown;
  idempotency_key: string;
  timeout_ms: number | null;
  compensation: boolean;
  /** The next dispatch of this attempt is a redelivery. */
  redelivery: boolean;
  /** Live tokens of the current attempt: a result for any of them is accepted (once). */
  tokens: Record<string, TokenInfo>;
  /** Deadline of the latest dispatch of the current attempt. */
  deadline_ms: number | null;
  output?: unknown;
  error?: ErrorInfo;
}

export interface TimerState {
  fire_at_ms: number;
  purpose: "retry" | "sleep" | "timeout";
  step?: string;
  attempt?: number;
}

export interface ExecutionState {
  execution_id: string;
  run_id: string;
  root_id: string;
  parent_id: string | null;
  workflow: string;
  version: string;
  input: unknown;
  status: ExecutionStatus;
  phase: "running" | "compensating" | "closed";
  /** Index of the main step that runs now (or next). */
  cursor: number;
  steps: Record<string, StepState>;
  /** `$steps`: outputs of the main steps that succeeded. */
  outputs: Record<string, unknown>;
  /** Main steps that succeeded, in order (the saga's compensation order is its reverse). */
  completed: string[];
  /** Compensations still to run, next first. */
  compensation_queue: string[];
  compensation_reason: "failed" | "cancelled" | null;
  compensation_failures: Array<{ step: string; error: ErrorInfo }>;
  failure: ErrorInfo | null;
  cancel_reason: string | null;
  timers: Record<string, TimerState>;
  output: unknown;
  error: ErrorInfo | null;
  created_ms: number;
  closed_ms: number | null;
  last_seq: number;
}

export function emptyState(): ExecutionState {
  return {
    execution_id: "",
    run_id: "",
    root_id: "",
    parent_id: null,
    workflow: "",
    version: "",
    input: null,
    status: "running",
    phase: "running",
    cursor: 0,
    steps: {},
    outputs: {},
    completed: [],
    compensation_queue: [],
    compensation_reason: null,
    compensation_failures: [],
    failure: null,
    cancel_reason: null,
    timers: {},
    output: null,
    error: null,
    created_ms: 0,
    closed_ms: null,
    last_seq: 0,
  };
}

export class HistoryError extends Error {
  override name = "HistoryError";
}

function step(s: ExecutionState, id: string, e: HistoryEvent): StepState {
  const st = s.steps[id];
  if (!st) throw new HistoryError(`event seq ${e.seq} (${e.type}) names unknown step "${id}"`);
  return st;
}

/** Ends the current attempt: its tokens are dead from now on. */
function closeAttempt(st: StepState): void {
  st.tokens = {};
  st.deadline_ms = null;
  st.redelivery = false;
}

/** Applies one event to the state, in place. Throws HistoryError on an impossible history. */
export function apply(s: ExecutionState, e: HistoryEvent): ExecutionState {
  if (e.seq !== s.last_seq + 1) {
    throw new HistoryError(`history gap: expected seq ${s.last_seq + 1}, got ${e.seq}`);
  }
  s.last_seq = e.seq;
  switch (e.type) {
    case "WorkflowCreated":
      Object.assign(s, {
        execution_id: e.execution_id,
        run_id: e.run_id,
        root_id: e.root_id,
        parent_id: e.parent_id ?? null,
        workflow: e.workflow,
        version: e.version,
        input: e.input,
        created_ms: e.time_ms,
      });
      break;
    case "StepScheduled": {
      const prev = s.steps[e.step];
      s.steps[e.step] = {
        id: e.step,
        status: "scheduled",
        attempt: e.attempt,
        task: e.task,
        contract: e.contract,
        language: e.language ?? null,
        input: e.input,
        idempotency_key: e.idempotency_key,
        timeout_ms: e.timeout_ms ?? null,
        compensation: e.compensation ?? false,
        redelivery: e.redelivery ?? false,
        tokens: prev && prev.attempt === e.attempt ? prev.tokens : {},
        deadline_ms: null,
      };
      break;
    }
    case "StepDispatched": {
      const st = step(s, e.step, e);
      st.status = "dispatched";
      st.tokens[e.token] = {
        worker_id: e.worker_id,
        worker_session: e.worker_session,
        dispatched_ms: e.time_ms,
      };
      st.deadline_ms = e.deadline_ms ?? null;
      break;
    }
    case "StepAttemptUncertain": {
      const st = step(s, e.step, e);
      st.status = "scheduled";
      st.redelivery = true;
      st.deadline_ms = null;
      const t = st.tokens[e.token];
      if (t) t.uncertain = true;
      break;
    }
    case "StepSucceeded": {
      const st = step(s, e.step, e);
      st.status = "succeeded";
      st.output = e.output;
      closeAttempt(st);
      if (st.compensation) {
        s.compensation_queue = s.compensation_queue.filter((x) => x !== st.id);
      } else {
        s.outputs[st.id] = e.output;
        s.completed.push(st.id);
        s.cursor++;
      }
      break;
    }
    case "StepFailed": {
      const st = step(s, e.step, e);
      closeAttempt(st);
      st.error = e.error;
      if (e.will_retry) {
        st.status = "backoff";
      } else {
        st.status = "failed";
        if (st.compensation) {
          s.compensation_queue = s.compensation_queue.filter((x) => x !== st.id);
          s.compensation_failures.push({ step: st.id, error: e.error });
        } else if (!s.failure) {
          s.failure = { ...e.error, details: { ...asObject(e.error.details), step: st.id } };
        }
      }
      break;
    }
    case "StepCancelled": {
      const st = step(s, e.step, e);
      st.status = "cancelled";
      closeAttempt(st);
      for (const [id, t] of Object.entries(s.timers)) if (t.step === st.id) delete s.timers[id];
      break;
    }
    case "TimerStarted":
      s.timers[e.timer_id] = {
        fire_at_ms: e.fire_at_ms,
        purpose: e.purpose,
        ...(e.step !== undefined ? { step: e.step } : {}),
        ...(e.attempt !== undefined ? { attempt: e.attempt } : {}),
      };
      break;
    case "TimerFired":
      delete s.timers[e.timer_id];
      break;
    case "CompensationStarted":
      s.phase = "compensating";
      s.compensation_reason = e.reason;
      s.compensation_queue = e.steps.slice();
      if (e.error && !s.failure) s.failure = e.error;
      break;
    case "WorkflowCancelRequested":
      s.cancel_reason = e.reason;
      break;
    case "WorkflowCompleted":
      close(s, "completed", e.time_ms);
      s.output = e.output;
      break;
    case "WorkflowFailed":
      close(s, "failed", e.time_ms);
      s.error = e.error;
      break;
    case "WorkflowCancelled":
      close(s, "cancelled", e.time_ms);
      s.error = e.error ?? null;
      break;
    default: {
      const never: never = e;
      throw new HistoryError(`unknown event type ${(never as { type: string }).type}`);
    }
  }
  return s;
}

function asObject(v: unknown): Record<string, unknown> {
  return v !== null && typeof v === "object" && !Array.isArray(v)
    ? v as Record<string, unknown>
    : {};
}

function close(s: ExecutionState, status: ExecutionStatus, at: number): void {
  s.status = status;
  s.phase = "closed";
  s.closed_ms = at;
  s.timers = {};
  for (const st of Object.values(s.steps)) {
    if (st.status === "scheduled" || st.status === "dispatched" || st.status === "backoff") {
      st.status = "cancelled";
      closeAttempt(st);
    }
  }
}

/** Rebuilds the state of a run from its whole history. */
export function replay(events: readonly HistoryEvent[]): ExecutionState {
  const s = emptyState();
  for (const e of events) apply(s, e);
  return s;
}

/** The step holding a live token, if any. */
export function stepOfToken(s: ExecutionState, token: string): StepState | undefined {
  for (const st of Object.values(s.steps)) if (token in st.tokens) return st;
  return undefined;
}

/** Live tokens of the run with the session that holds each. */
export function liveTokens(
  s: ExecutionState,
): Array<{ token: string; step: StepState; info: TokenInfo }> {
  const out = [];
  for (const st of Object.values(s.steps)) {
    for (const [token, info] of Object.entries(st.tokens)) out.push({ token, step: st, info });
  }
  return out;
}

/** Steps waiting for a worker. */
export function queuedSteps(s: ExecutionState): StepState[] {
  if (s.phase === "closed") return [];
  return Object.values(s.steps).filter((st) => st.status === "scheduled");
}

/** Attempts a worker holds right now (dispatched and unanswered). */
export function inFlightCount(s: ExecutionState): number {
  return Object.values(s.steps).filter((st) => st.status === "dispatched").length;
}
