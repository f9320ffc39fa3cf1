/**
 * What the checker's rules (chaos/rules/*.ts, run in order by `check` in chaos/checker.ts)
 * share: how a rule reports a violation, the dispatches the run rules collect, and the
 * terminal statuses and events.
 */
import type { ExecRow } from "../history_db.ts";

/** Reports a violation of `rule`, for an execution (null: the run as a whole). */
export type Add = (
  rule: string,
  execution: string | null,
  message: string,
  at?: number | null,
) => void;

/** Executions by id. */
export type ExecById = Map<string, ExecRow>;

/** A dispatched token: its dispatch and the step's key. */
export interface Dispatch {
  step: string;
  attempt: number;
  redelivery: boolean;
  key: string | null;
  uncertainBefore: boolean;
}

export const TERMINAL_STATUS = new Set(["completed", "failed", "cancelled", "timed_out"]);
/** The terminal event each terminal status of an execution is closed by. */
export const TERMINAL_EVENT_OF: Record<string, string> = {
  completed: "WorkflowCompleted",
  failed: "WorkflowFailed",
  cancelled: "WorkflowCancelled",
  timed_out: "WorkflowTimedOut",
  continued: "WorkflowContinuedAsNew",
};
export const TERMINAL_EVENT = new Set([
  "WorkflowCompleted",
  "WorkflowFailed",
  "WorkflowCancelled",
  "WorkflowTimedOut",
  "WorkflowContinuedAsNew",
]);
