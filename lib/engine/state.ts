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
 * `http` steps go through the same states; the server's HTTP adapter holds their tokens.
 *
 * orbit-ir/2 steps that no worker runs (StepStarted: wait_signal, sleep, if, parallel, child)
 * are `waiting` until a signal, a timer, their branches or the child execution finish them.
 *
 * Step lists ("frames", see `tree.ts`): the top-level list's position is `cursor`; every branch
 * list an `if` or `parallel` step opened has its own in `frames`. A step's StepSucceeded (or
 * VarsAssigned) moves the cursor of the frame its first event named, so the fold needs no
 * definition. Step ids are unique across a document, so every event names its step by id.
 */
import type { ChildSpec, ErrorInfo, ExecutionStatus, HistoryEvent, StartedKind } from "./events.ts";
import { ROOT_FRAME } from "./tree.ts";

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
  | "waiting"
  | "succeeded"
  | "failed"
  | "cancelled";

export interface StepState {
  id: string;
  /** `task` (a worker runs it), `http` (the server's adapter runs it) or a StepStarted kind. */
  kind: "task" | "http" | StartedKind;
  /** The step list it runs in (`$` for the top level and for compensations). */
  frame: string;
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
  /** wait_signal: the signal it waits for. */
  signal?: string;
  /** child: what it started, and the child's run once the shell reported it. */
  child?: ChildSpec;
  child_run_id?: string;
  /** if, parallel: the frames of its branches. */
  branches?: string[];
}

/** A branch list (or a handler run) in progress. */
export interface FrameState {
  /** Index of the step of this list that runs now (or next). */
  cursor: number;
  /** Output of the last step that finished in this list: the branch's output. */
  last_output: unknown;
  /** The if or parallel step the list belongs to (null for a handler run's own list). */
  owner: string | null;
}

/**
 * Steps of handler runs are named `<step id>@<signal seq>` (step ids hold no `@`): one handler
 * can run for several signals at once. They have no `$steps` output outside their run.
 */
export function isHandlerStep(id: string): boolean {
  return id.includes("@");
}

/** A signal kept for the next `wait_signal` that waits for its name. */
export interface BufferedSignal {
  seq: number;
  signal: string;
  payload: unknown;
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
  /** 0 for a root execution, its parent's depth + 1 for a child. */
  depth: number;
  workflow: string;
  version: string;
  input: unknown;
  status: ExecutionStatus;
  phase: "running" | "compensating" | "closed";
  /** Index of the top-level step that runs now (or next); branch lists are in `frames`. */
  cursor: number;
  frames: Record<string, FrameState>;
  steps: Record<string, StepState>;
  /** `$steps`: outputs of the main steps that succeeded. */
  outputs: Record<string, unknown>;
  /** Main steps that succeeded, in order (the saga's compensation order is its reverse). */
  completed: string[];
  /** Compensations still to run, next first. */
  compensation_queue: string[];
  compensation_reason: "failed" | "cancelled" | "timed_out" | null;
  compensation_failures: Array<{ step: string; error: ErrorInfo }>;
  failure: ErrorInfo | null;
  cancel_reason: string | null;
  /** The workflow's `timeout_s` timer fired while it ran. */
  timed_out: boolean;
  /** When that timer fires (kept after the run closes: continue-as-new carries it over). */
  timeout_at_ms: number | null;
  timers: Record<string, TimerState>;
  /** `$vars`: workflow variables set by `assign` steps and handlers. */
  vars: Record<string, unknown>;
  /** Signals received and not yet consumed by a `wait_signal`, oldest first. */
  signals: BufferedSignal[];
  /** Handler runs in progress, by the seq of their SignalReceived (their frame is `@<seq>`). */
  handlers: Record<string, { signal: string; payload: unknown }>;
  /** 1 for the first run of an execution, n for its n-th (continue-as-new). */
  run_number: number;
  continued_from: string | null;
  /** Set when the run ended with continue-as-new: the next run and its input. */
  continued: { run_id: string; input: unknown } | null;
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
    depth: 0,
    workflow: "",
    version: "",
    input: null,
    status: "running",
    phase: "running",
    cursor: 0,
    frames: {},
    steps: {},
    outputs: {},
    completed: [],
    compensation_queue: [],
    compensation_reason: null,
    compensation_failures: [],
    failure: null,
    cancel_reason: null,
    timed_out: false,
    timeout_at_ms: null,
    timers: {},
    vars: {},
    signals: [],
    handlers: {},
    run_number: 1,
    continued_from: null,
    continued: null,
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

/** Moves the cursor of `frame` past a step that finished with `output`. */
function advanceFrame(s: ExecutionState, frame: string, output: unknown, e: HistoryEvent): void {
  if (frame === ROOT_FRAME) {
    s.cursor++;
    return;
  }
  const f = s.frames[frame];
  if (!f) throw new HistoryError(`event seq ${e.seq} (${e.type}) names unknown frame "${frame}"`);
  f.cursor++;
  f.last_output = output;
}

/** Drops a closed step's own timers (sleep, signal or child timeout); retry timers stay. */
function dropStepTimers(s: ExecutionState, id: string): void {
  for (const [tid, t] of Object.entries(s.timers)) {
    if (t.step === id && t.purpose !== "retry") delete s.timers[tid];
  }
}

function newStep(id: string, kind: StepState["kind"], frame: string | undefined): StepState {
  return {
    id,
    kind,
    frame: frame ?? ROOT_FRAME,
    status: "waiting",
    attempt: 1,
    task: "",
    contract: "",
    language: null,
    input: null,
    idempotency_key: "",
    timeout_ms: null,
    compensation: false,
    redelivery: false,
    tokens: {},
    deadline_ms: null,
  };
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
        depth: e.depth ?? 0,
        workflow: e.workflow,
        version: e.version,
        input: e.input,
        created_ms: e.time_ms,
        run_number: e.run ?? 1,
        continued_from: e.continued_from ?? null,
      });
      break;
    case "StepScheduled": {
      const prev = s.steps[e.step];
      s.steps[e.step] = {
        id: e.step,
        kind: e.kind ?? "task",
        frame: e.frame ?? ROOT_FRAME,
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
    case "StepStarted": {
      const st = newStep(e.step, e.kind, e.frame);
      st.attempt = e.attempt;
      st.timeout_ms = e.timeout_ms ?? null;
      if (e.signal !== undefined) st.signal = e.signal;
      if (e.child !== undefined) {
        st.child = e.child;
        st.input = e.child.input;
      }
      const frames = e.branch !== undefined
        ? [`${e.step}.${e.branch}`]
        : e.branches !== undefined
        ? Array.from({ length: e.branches }, (_, i) => `${e.step}[${i}]`)
        : [];
      if (e.kind === "if" || e.kind === "parallel") st.branches = frames;
      for (const f of frames) s.frames[f] = { cursor: 0, last_output: null, owner: e.step };
      s.steps[e.step] = st;
      break;
    }
    case "ChildStarted":
      step(s, e.step, e).child_run_id = e.run_id;
      break;
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
      dropStepTimers(s, st.id);
      if (e.signal_seq !== undefined) s.signals = s.signals.filter((x) => x.seq !== e.signal_seq);
      if (st.compensation) {
        s.compensation_queue = s.compensation_queue.filter((x) => x !== st.id);
      } else {
        if (!isHandlerStep(st.id)) s.outputs[st.id] = e.output;
        s.completed.push(st.id);
        advanceFrame(s, st.frame, e.output, e);
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
        dropStepTimers(s, st.id);
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
      if (e.purpose === "timeout" && e.step === undefined) s.timeout_at_ms = e.fire_at_ms;
      break;
    case "TimerFired": {
      const t = s.timers[e.timer_id];
      // The workflow's own deadline (a timeout timer of no step) ends a run that still runs.
      if (t && t.purpose === "timeout" && t.step === undefined && s.phase === "running") {
        s.timed_out = true;
      }
      delete s.timers[e.timer_id];
      break;
    }
    case "SignalReceived":
      if (e.buffered) s.signals.push({ seq: e.seq, signal: e.signal, payload: e.payload });
      if (e.handler) {
        s.handlers[String(e.seq)] = { signal: e.signal, payload: e.payload };
        s.frames[`@${e.seq}`] = { cursor: 0, last_output: null, owner: null };
      }
      break;
    case "HandlerCompleted":
      delete s.handlers[String(e.signal_seq)];
      delete s.frames[`@${e.signal_seq}`];
      break;
    case "VarsAssigned": {
      Object.assign(s.vars, e.vars);
      const st = newStep(e.step, "assign", e.frame);
      st.status = "succeeded";
      st.output = e.vars;
      s.steps[e.step] = st;
      if (!isHandlerStep(e.step)) s.outputs[e.step] = e.vars;
      s.completed.push(e.step);
      advanceFrame(s, st.frame, e.vars, e);
      break;
    }
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
    case "WorkflowTimedOut":
      close(s, "timed_out", e.time_ms);
      s.error = e.error;
      break;
    case "WorkflowContinuedAsNew":
      close(s, "continued", e.time_ms);
      s.continued = { run_id: e.new_run_id, input: e.input };
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
    if (isOpenStatus(st.status)) {
      st.status = "cancelled";
      closeAttempt(st);
    }
  }
}

export function isOpenStatus(status: StepStatus): boolean {
  return status === "scheduled" || status === "dispatched" || status === "backoff" ||
    status === "waiting";
}

/**
 * A copy of `s` that `apply` can change without touching `s`: every container `apply` writes
 * into is copied (the state itself, `steps` and each step with its `tokens` and each token,
 * `frames` and each frame, `outputs`, `completed`, `compensation_failures`, `timers`, `vars`,
 * `signals`, `handlers`); everything `apply` only stores or replaces is shared — inputs,
 * outputs, payloads, errors, variable values, child specs, timer entries, handler entries.
 * Those values are never changed in place by anyone (they are what events carry), so sharing
 * them is safe, and it keeps `st.output` and `outputs[id]` the same object as in the event.
 * It is what `decide` pays per command instead of a deep copy of the whole state.
 *
 * Keep this in step with `apply`: a container it starts writing into must be copied here.
 */
export function copyState(s: ExecutionState): ExecutionState {
  const steps: Record<string, StepState> = {};
  for (const id in s.steps) {
    const st = s.steps[id]!;
    const tokens: Record<string, TokenInfo> = {};
    for (const t in st.tokens) tokens[t] = { ...st.tokens[t]! };
    steps[id] = { ...st, tokens };
  }
  const frames: Record<string, FrameState> = {};
  for (const f in s.frames) frames[f] = { ...s.frames[f]! };
  return {
    ...s,
    frames,
    steps,
    outputs: { ...s.outputs },
    completed: s.completed.slice(),
    compensation_queue: s.compensation_queue.slice(),
    compensation_failures: s.compensation_failures.slice(),
    timers: { ...s.timers },
    vars: { ...s.vars },
    signals: s.signals.slice(),
    handlers: { ...s.handlers },
  };
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

/** Live tokens of worker tasks with the session that holds each (http tokens are the server's). */
export function liveTokens(
  s: ExecutionState,
): Array<{ token: string; step: StepState; info: TokenInfo }> {
  const out = [];
  for (const st of Object.values(s.steps)) {
    if (st.kind !== "task") continue;
    for (const [token, info] of Object.entries(st.tokens)) out.push({ token, step: st, info });
  }
  return out;
}

/** Steps waiting for a worker. */
export function queuedSteps(s: ExecutionState): StepState[] {
  if (s.phase === "closed") return [];
  return Object.values(s.steps).filter((st) => st.status === "scheduled" && st.kind === "task");
}

/**
 * Steps queued in `next` that were not in `prev` (held before the append that leads to `next`):
 * queued by that append, so no other server can be claiming their rows yet.
 */
export function newlyQueued(prev: ExecutionState | undefined, next: ExecutionState): StepState[] {
  const was = new Set(prev ? queuedSteps(prev).map((st) => st.id) : []);
  return queuedSteps(next).filter((st) => !was.has(st.id));
}

/** Attempts a worker holds right now (dispatched and unanswered). */
export function inFlightCount(s: ExecutionState): number {
  return Object.values(s.steps).filter((st) => st.status === "dispatched" && st.kind === "task")
    .length;
}

/** Open steps of one kind (the HTTP adapter's and the child coordinator's work). */
export function openSteps(s: ExecutionState, kind: StepState["kind"]): StepState[] {
  if (s.phase === "closed") return [];
  return Object.values(s.steps).filter((st) => st.kind === kind && isOpenStatus(st.status));
}
