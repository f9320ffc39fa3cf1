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
  | { type: "StepSucceeded"; step: string; attempt: number; token?: string; output: unknown }
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
    reason: "failed" | "cancelled";
    steps: string[];
    /** The failure that starts the saga when no StepFailed records it (a `return` that failed). */
    error?: ErrorInfo;
  }
  | { type: "WorkflowCancelRequested"; reason: string }
  | { type: "WorkflowCompleted"; output: unknown }
  | { type: "WorkflowFailed"; error: ErrorInfo }
  | { type: "WorkflowCancelled"; reason: string; error?: ErrorInfo };

export type EventType = EventBody["type"];
export type HistoryEvent = Base & EventBody;

export const TERMINAL_EVENTS: ReadonlySet<EventType> = new Set([
  "WorkflowCompleted",
  "WorkflowFailed",
  "WorkflowCancelled",
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
