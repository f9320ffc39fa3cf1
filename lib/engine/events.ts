/**
 * History events: the only durable record of an execution. The engine state is a pure fold
 * over them (see `state.ts`). Every event carries `seq` (1, 2, 3… per run), `type` and
 * `time_ms`; step events name their `step` id and `attempt`.
 */

export interface ErrorInfo {
  code: string;
  message: string;
  retryable?: boolean;
  details?: unknown;
}

interface Base {
  seq: number;
  time_ms: number;
}

export type EventBody =
  | {
    type: "WorkflowCreated";
    workflow: string;
    version: string;
    input: unknown;
    execution_id: string;
    run_id: string;
    root_id: string;
    parent_id?: string | null;
    /** orbit-ir/2 continue-as-new: the run this one continues (absent on a first run). */
    continued_from?: string;
    /** Run number of the execution (absent means 1). */
    run?: number;
    /** Child depth: 1 for a child of a root execution, 2 for its child … (absent means 0). */
    depth?: number;
  }
  | {
    /** A unit of work for a worker is ready to be handed out. */
    type: "StepScheduled";
    step: string;
    attempt: number;
    task: string;
    contract: string;
    language?: string | null;
    input: unknown;
    idempotency_key: string;
    timeout_ms?: number | null;
    /** True for the compensation of a completed step (its id is `<step>.compensate`). */
    compensation?: boolean;
    redelivery?: boolean;
    /** `http`: the built-in HTTP adapter (task `orbit.http`) runs it; absent: a worker task. */
    kind?: "http";
    /** The step list the step belongs to when it is not the top level (see `state.ts`). */
    frame?: string;
  }
  | {
    /**
     * orbit-ir/2: a step that no worker runs began (a signal wait, a sleep, a branch, a child
     * workflow). The kind-specific fields record what replay must not compute again.
     */
    type: "StepStarted";
    step: string;
    attempt: number;
    kind: StartedKind;
    frame?: string;
    /** wait_signal: the signal it waits for. */
    signal?: string;
    /** if: the branch the condition chose (absent when the condition failed). */
    branch?: "then" | "else";
    /** parallel: number of branches. */
    branches?: number;
    /** child: the execution to start. */
    child?: ChildSpec;
    /** wait_signal and child: the step's own deadline (a `timeout` timer follows). */
    timeout_ms?: number;
  }
  | {
    /** The shell started (or found) the child execution of a `child` step. */
    type: "ChildStarted";
    step: string;
    attempt: number;
    execution_id: string;
    run_id: string;
  }
  | {
    type: "SignalReceived";
    signal: string;
    payload: unknown;
    /** Kept for a `wait_signal` step (the workflow waits for this signal somewhere). */
    buffered?: boolean;
    /** Carried over from the previous run by continue-as-new (its handler already ran). */
    carried_over?: boolean;
    /**
     * The signal's handler runs, in the frame `@<seq>` (its steps are named `<id>@<seq>`,
     * so one handler can run for several signals at once).
     */
    handler?: boolean;
  }
  | {
    /** An `assign` step set workflow variables. */
    type: "VarsAssigned";
    step: string;
    attempt: number;
    vars: Record<string, unknown>;
    frame?: string;
  }
  | {
    /** Every step of the handler run for the signal of seq `signal_seq` finished. */
    type: "HandlerCompleted";
    signal: string;
    signal_seq: number;
  }
  | {
    type: "StepDispatched";
    step: string;
    attempt: number;
    token: string;
    worker_id: string;
    worker_session: string;
    deadline_ms?: number | null;
    redelivery?: boolean;
  }
  | {
    type: "StepSucceeded";
    step: string;
    attempt: number;
    token?: string;
    output: unknown;
    /** wait_signal: seq of the SignalReceived it consumed. */
    signal_seq?: number;
  }
  | {
    type: "StepFailed";
    step: string;
    attempt: number;
    token?: string;
    error: ErrorInfo;
    /** Whether another attempt follows (after a `TimerStarted` of purpose `retry`). */
    will_retry: boolean;
  }
  | {
    type: "StepAttemptUncertain";
    step: string;
    attempt: number;
    token: string;
    reason: string;
  }
  | { type: "StepCancelled"; step: string; attempt: number; reason: string }
  | {
    type: "TimerStarted";
    timer_id: string;
    fire_at_ms: number;
    purpose: "retry" | "sleep" | "timeout";
    step?: string;
    attempt?: number;
  }
  | { type: "TimerFired"; timer_id: string; step?: string }
  | {
    type: "CompensationStarted";
    reason: "failed" | "cancelled" | "timed_out";
    steps: string[];
    /** The failure that starts the saga when no StepFailed records it (a `return` that failed). */
    error?: ErrorInfo;
  }
  | { type: "WorkflowCancelRequested"; reason: string }
  | { type: "WorkflowCompleted"; output: unknown }
  | { type: "WorkflowFailed"; error: ErrorInfo }
  | { type: "WorkflowCancelled"; reason: string; error?: ErrorInfo }
  | { type: "WorkflowTimedOut"; error: ErrorInfo }
  | {
    /** The run ends here; the same execution goes on in run `new_run_id` with `input`. */
    type: "WorkflowContinuedAsNew";
    step: string;
    attempt: number;
    new_run_id: string;
    input: unknown;
  };

/** Step kinds recorded by StepStarted. */
export type StartedKind =
  | "wait_signal"
  | "sleep"
  | "if"
  | "parallel"
  | "child"
  | "assign"
  | "continue_as_new";

/** What a `child` step starts (templates already evaluated). */
export interface ChildSpec {
  workflow: string;
  version: string | null;
  execution_id: string;
  input: unknown;
}

export type EventType = EventBody["type"];
export type HistoryEvent = Base & EventBody;

export const TERMINAL_EVENTS: ReadonlySet<EventType> = new Set([
  "WorkflowCompleted",
  "WorkflowFailed",
  "WorkflowCancelled",
  "WorkflowTimedOut",
  "WorkflowContinuedAsNew",
]);

export type ExecutionStatus =
  | "running"
  | "completed"
  | "failed"
  | "cancelled"
  | "timed_out"
  | "continued";

export const EXECUTION_STATUSES: readonly ExecutionStatus[] = [
  "running",
  "completed",
  "failed",
  "cancelled",
  "timed_out",
  "continued",
];
