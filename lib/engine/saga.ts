/**
 * The saga: when a run fails, is cancelled or times out, the compensations of the task steps
 * that completed run one at a time in reverse completion order (nested steps included), then
 * the run ends with WorkflowFailed, WorkflowCancelled or WorkflowTimedOut. A compensation that
 * fails after its retries is recorded and the others still run.
 */
import type { ErrorInfo } from "./events.ts";
import { evaluate } from "./expr.ts";
import { compensationId, isTaskStep, type TaskSpec } from "./ir.ts";
import { baseId, type Builder, expressionFailure, isOpen, scopeAt } from "./builder.ts";

/**
 * Closes every open step (a cancel, a failure elsewhere, a timeout, an early end). An early
 * end (`return`, `continue_as_new`) in a branch passes its frame: the if and parallel steps
 * around it end with the run rather than being cancelled.
 */
export function cancelOpen(b: Builder, reason: string, endingFrame?: string): void {
  const around = new Set<string>();
  for (let f = endingFrame; f !== undefined && f !== "$";) {
    const owner = b.state.frames[f]?.owner;
    if (owner === undefined || owner === null) break;
    around.add(owner);
    f = b.state.steps[owner]?.frame;
  }
  for (const st of Object.values(b.state.steps)) {
    if (isOpen(st) && !around.has(st.id)) {
      b.emit({ type: "StepCancelled", step: st.id, attempt: st.attempt, reason });
    }
  }
}

/** The `compensate` spec of a main step, if it has one. */
export function compensationOf(b: Builder, stepId: string): TaskSpec | undefined {
  const d = b.tree.byId.get(baseId(stepId))?.step;
  return d && isTaskStep(d) ? d.compensate : undefined;
}

/** Starts the saga (CompensationStarted) when a completed step has a compensation. */
export function beginCompensation(
  b: Builder,
  reason: "failed" | "cancelled" | "timed_out",
  error?: ErrorInfo,
): void {
  const steps = b.state.completed
    .filter((id) => compensationOf(b, id) !== undefined)
    .reverse()
    .map(compensationId);
  if (steps.length > 0) {
    b.emit({ type: "CompensationStarted", reason, steps, ...(error ? { error } : {}) });
  }
}

export function timeoutError(b: Builder): ErrorInfo {
  return {
    code: "WORKFLOW_TIMEOUT",
    message: `workflow ${b.def.name} did not finish within its timeout_s of ${b.def.timeout_s} s`,
    retryable: false,
  };
}

/** The compensating phase: schedules the next compensation, or ends the run. */
export async function compensate(b: Builder): Promise<"progress" | "blocked"> {
  const s = b.state;
  const next = s.compensation_queue[0];
  if (next === undefined) {
    const failures = s.compensation_failures;
    const extra = failures.length > 0
      ? { compensation_failures: failures.map((f) => ({ step: f.step, code: f.error.code })) }
      : {};
    if (s.compensation_reason === "cancelled") {
      b.emit({
        type: "WorkflowCancelled",
        reason: s.cancel_reason ?? "cancelled",
        ...(failures.length > 0
          ? {
            error: {
              code: "COMPENSATION_FAILED",
              message: `${failures.length} compensation(s) failed`,
              details: extra,
            },
          }
          : {}),
      });
    } else {
      const f = s.compensation_reason === "timed_out" ? timeoutError(b) : s.failure!;
      b.emit({
        type: s.compensation_reason === "timed_out" ? "WorkflowTimedOut" : "WorkflowFailed",
        error: { ...f, details: { ...(f.details as object ?? {}), ...extra } },
      });
    }
    return "progress";
  }
  if (s.steps[next]) return "blocked"; // compensation in progress
  const mainId = next.slice(0, -".compensate".length);
  const comp = compensationOf(b, mainId);
  if (!comp) {
    s.compensation_queue.shift();
    return "progress";
  }
  let input: unknown = null;
  let inputError: ErrorInfo | null = null;
  try {
    // A handler run's step reads its run's steps (its own output included).
    input = await evaluate(comp.input ?? null, scopeAt(s, s.steps[mainId]?.frame ?? "$"));
  } catch (e) {
    inputError = expressionFailure(e, `compensation of "${mainId}" input`);
  }
  b.emit({
    type: "StepScheduled",
    step: next,
    attempt: 1,
    task: comp.task,
    contract: comp.contract,
    language: comp.language ?? null,
    input,
    idempotency_key: `${s.run_id}:${next}`,
    timeout_ms: comp.timeout_s ? Math.round(comp.timeout_s * 1000) : null,
    compensation: true,
  });
  if (inputError) {
    b.emit({ type: "StepFailed", step: next, attempt: 1, error: inputError, will_retry: false });
    return "progress";
  }
  return "blocked";
}
