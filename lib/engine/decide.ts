/**
 * The decision half of the pure core: state + command → new events. `decide` works on a copy
 * of the state and returns both the events and the state after them; the shell commits the
 * events and only then installs the new state. The clock and id source are injected.
 *
 * A command that no longer applies (a result for a dead token, a timer already fired, a
 * deadline of an attempt that finished) yields no events and `accepted: false`: that is how
 * duplicate and late results are made harmless.
 */
import type { ErrorInfo, EventBody, HistoryEvent } from "./events.ts";
import { evaluate, ExpressionError, type Scope } from "./expr.ts";
import {
  backoffMs,
  compensationId,
  isTaskStep,
  retryPolicy,
  type TaskSpec,
  type WorkflowDoc,
} from "./ir.ts";
import { apply, emptyState, type ExecutionState, stepOfToken, type StepState } from "./state.ts";

export interface Context {
  now: number;
  /** A fresh unique id (uuid) — the only source of randomness the core sees. */
  newId: () => string;
}

export type Command =
  | {
    type: "start";
    execution_id: string;
    run_id: string;
    root_id?: string;
    parent_id?: string | null;
    input: unknown;
  }
  | { type: "dispatch"; step: string; token: string; worker_id: string; worker_session: string }
  | { type: "complete"; token: string; output: unknown }
  | { type: "fail"; token: string; error: ErrorInfo }
  | { type: "timer"; timer_id: string }
  | { type: "deadline"; step: string; attempt: number }
  | { type: "uncertain"; token: string; reason: string }
  | { type: "cancel"; reason: string };

export interface Decision {
  events: HistoryEvent[];
  state: ExecutionState;
  /** False when the command changed nothing because it no longer applies. */
  accepted: boolean;
}

class Builder {
  readonly events: HistoryEvent[] = [];
  constructor(readonly state: ExecutionState, readonly ctx: Context) {}
  emit(body: EventBody): void {
    // `seq, type, time_ms` first, so stored and served events read in that order.
    const { type, ...fields } = body;
    const e = {
      seq: this.state.last_seq + 1,
      type,
      time_ms: this.ctx.now,
      ...fields,
    } as HistoryEvent;
    apply(this.state, e);
    this.events.push(e);
  }
}

export async function decide(
  def: WorkflowDoc,
  state: ExecutionState | null,
  cmd: Command,
  ctx: Context,
): Promise<Decision> {
  const b = new Builder(state ? structuredClone(state) : emptyState(), ctx);
  const accepted = handle(def, b, cmd);
  if (accepted) await advance(def, b);
  return { events: b.events, state: b.state, accepted };
}

function isOpen(st: StepState | undefined): st is StepState {
  return !!st &&
    (st.status === "scheduled" || st.status === "dispatched" || st.status === "backoff");
}

function handle(def: WorkflowDoc, b: Builder, cmd: Command): boolean {
  const s = b.state;
  if (cmd.type === "start") {
    if (s.last_seq !== 0) return false;
    b.emit({
      type: "WorkflowCreated",
      workflow: def.name,
      version: def.version,
      input: cmd.input ?? null,
      execution_id: cmd.execution_id,
      run_id: cmd.run_id,
      root_id: cmd.root_id ?? cmd.execution_id,
      parent_id: cmd.parent_id ?? null,
    });
    return true;
  }
  // Nothing but a start applies to a run that has no history yet.
  if (s.last_seq === 0 || s.phase === "closed") return false;
  switch (cmd.type) {
    case "dispatch": {
      const st = s.steps[cmd.step];
      if (!st || st.status !== "scheduled") return false;
      b.emit({
        type: "StepDispatched",
        step: st.id,
        attempt: st.attempt,
        token: cmd.token,
        worker_id: cmd.worker_id,
        worker_session: cmd.worker_session,
        deadline_ms: st.timeout_ms === null ? null : b.ctx.now + st.timeout_ms,
        ...(st.redelivery ? { redelivery: true } : {}),
      });
      return true;
    }
    case "complete": {
      const st = stepOfToken(s, cmd.token);
      if (!isOpen(st)) return false;
      b.emit({
        type: "StepSucceeded",
        step: st.id,
        attempt: st.attempt,
        token: cmd.token,
        output: cmd.output ?? null,
      });
      return true;
    }
    case "fail": {
      const st = stepOfToken(s, cmd.token);
      if (!isOpen(st)) return false;
      failAttempt(def, b, st, cmd.error, cmd.token);
      return true;
    }
    case "deadline": {
      const st = s.steps[cmd.step];
      if (!st || st.status !== "dispatched" || st.attempt !== cmd.attempt) return false;
      if (st.deadline_ms === null || st.deadline_ms > b.ctx.now) return false;
      failAttempt(def, b, st, {
        code: "STEP_TIMEOUT",
        message: `attempt ${st.attempt} of step "${st.id}" did not finish within ${
          st.timeout_ms! / 1000
        } s`,
        retryable: true,
      });
      return true;
    }
    case "timer": {
      const t = s.timers[cmd.timer_id];
      if (!t || t.fire_at_ms > b.ctx.now) return false;
      b.emit({ type: "TimerFired", timer_id: cmd.timer_id, ...(t.step ? { step: t.step } : {}) });
      const st = t.step ? s.steps[t.step] : undefined;
      if (t.purpose === "retry" && st && st.status === "backoff") {
        b.emit({
          type: "StepScheduled",
          step: st.id,
          attempt: st.attempt + 1,
          task: st.task,
          contract: st.contract,
          language: st.language,
          input: st.input,
          idempotency_key: st.idempotency_key,
          timeout_ms: st.timeout_ms,
          ...(st.compensation ? { compensation: true } : {}),
        });
      }
      return true;
    }
    case "uncertain": {
      const st = stepOfToken(s, cmd.token);
      // A token already reported uncertain must not pull back the redelivery that replaced it.
      if (!st || st.status !== "dispatched" || st.tokens[cmd.token]?.uncertain) return false;
      b.emit({
        type: "StepAttemptUncertain",
        step: st.id,
        attempt: st.attempt,
        token: cmd.token,
        reason: cmd.reason,
      });
      return true;
    }
    case "cancel": {
      if (s.cancel_reason !== null || s.phase !== "running") return false;
      b.emit({ type: "WorkflowCancelRequested", reason: cmd.reason });
      for (const st of Object.values(s.steps)) {
        if (isOpen(st)) {
          b.emit({
            type: "StepCancelled",
            step: st.id,
            attempt: st.attempt,
            reason: "execution cancelled",
          });
        }
      }
      beginCompensation(def, b, "cancelled");
      return true;
    }
  }
}

function failAttempt(
  def: WorkflowDoc,
  b: Builder,
  st: StepState,
  error: ErrorInfo,
  token?: string,
) {
  const spec = specOf(def, st);
  const policy = retryPolicy(spec);
  const retryable = error.retryable !== false && !policy.non_retryable.includes(error.code);
  const willRetry = retryable && st.attempt < policy.max_attempts;
  b.emit({
    type: "StepFailed",
    step: st.id,
    attempt: st.attempt,
    ...(token ? { token } : {}),
    error: {
      code: error.code,
      message: error.message,
      retryable,
      ...(error.details !== undefined ? { details: error.details } : {}),
    },
    will_retry: willRetry,
  });
  if (willRetry) {
    b.emit({
      type: "TimerStarted",
      timer_id: `retry:${st.id}:${st.attempt}`,
      fire_at_ms: b.ctx.now + backoffMs(policy, st.attempt),
      purpose: "retry",
      step: st.id,
      attempt: st.attempt,
    });
  }
}

/** The task spec a step state was scheduled from (a main step or its compensation). */
function specOf(def: WorkflowDoc, st: StepState): TaskSpec {
  const id = st.compensation ? st.id.slice(0, -".compensate".length) : st.id;
  const d = def.steps.find((x) => x.id === id);
  if (!d || !isTaskStep(d)) return { task: st.task, contract: st.contract };
  return st.compensation ? d.compensate ?? d : d;
}

function scope(s: ExecutionState): Scope {
  return {
    input: s.input,
    steps: s.outputs,
    vars: {},
    execution: {
      id: s.execution_id,
      run_id: s.run_id,
      root_id: s.root_id,
      workflow: s.workflow,
      version: s.version,
    },
  };
}

function beginCompensation(
  def: WorkflowDoc,
  b: Builder,
  reason: "failed" | "cancelled",
  error?: ErrorInfo,
) {
  const steps = b.state.completed
    .filter((id) => {
      const d = def.steps.find((x) => x.id === id);
      return d && isTaskStep(d) && d.compensate;
    })
    .reverse()
    .map(compensationId);
  if (steps.length > 0) {
    b.emit({ type: "CompensationStarted", reason, steps, ...(error ? { error } : {}) });
  }
}

function expressionFailure(e: unknown, where: string): ErrorInfo {
  const message = e instanceof ExpressionError ? e.message : String(e);
  return { code: "EXPRESSION_ERROR", message: `${where}: ${message}`, retryable: false };
}

/** Moves the run forward until it waits for something outside (a worker, a timer) or ends. */
async function advance(def: WorkflowDoc, b: Builder): Promise<void> {
  const s = b.state;
  for (let guard = 0; guard < 10_000; guard++) {
    if (s.phase === "closed") return;
    if (s.phase === "running") {
      if (s.failure) {
        beginCompensation(def, b, "failed");
        if (s.phase === "running") {
          b.emit({ type: "WorkflowFailed", error: s.failure });
        }
        continue;
      }
      if (s.cancel_reason !== null) {
        // Cancelled with nothing to compensate.
        b.emit({ type: "WorkflowCancelled", reason: s.cancel_reason });
        continue;
      }
      const d = def.steps[s.cursor];
      if (!d) {
        b.emit({ type: "WorkflowCompleted", output: s.outputs });
        continue;
      }
      if (!isTaskStep(d)) {
        let output: unknown;
        try {
          output = await evaluate(d.return, scope(s));
        } catch (e) {
          // A failed return is a step failure like any other: the saga runs first.
          const error = {
            ...expressionFailure(e, `step "${d.id}" return`),
            details: { step: d.id },
          };
          beginCompensation(def, b, "failed", error);
          if (s.phase === "running") b.emit({ type: "WorkflowFailed", error });
          continue;
        }
        b.emit({ type: "WorkflowCompleted", output });
        continue;
      }
      if (s.steps[d.id]) return; // the current step is in progress
      let input: unknown;
      try {
        input = await evaluate(d.input ?? null, scope(s));
      } catch (e) {
        // Recorded as a failed first attempt, so replay reaches the same state.
        b.emit({
          type: "StepScheduled",
          step: d.id,
          attempt: 1,
          task: d.task,
          contract: d.contract,
          language: d.language ?? null,
          input: null,
          idempotency_key: `${s.run_id}:${d.id}`,
          timeout_ms: d.timeout_s ? Math.round(d.timeout_s * 1000) : null,
        });
        b.emit({
          type: "StepFailed",
          step: d.id,
          attempt: 1,
          error: expressionFailure(e, `step "${d.id}" input`),
          will_retry: false,
        });
        continue;
      }
      b.emit({
        type: "StepScheduled",
        step: d.id,
        attempt: 1,
        task: d.task,
        contract: d.contract,
        language: d.language ?? null,
        input,
        idempotency_key: `${s.run_id}:${d.id}`,
        timeout_ms: d.timeout_s ? Math.round(d.timeout_s * 1000) : null,
      });
      return;
    }
    // compensating
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
        const f = s.failure!;
        b.emit({
          type: "WorkflowFailed",
          error: { ...f, details: { ...(f.details as object ?? {}), ...extra } },
        });
      }
      continue;
    }
    if (s.steps[next]) return; // compensation in progress
    const mainId = next.slice(0, -".compensate".length);
    const d = def.steps.find((x) => x.id === mainId);
    const comp = d && isTaskStep(d) ? d.compensate : undefined;
    if (!comp) {
      s.compensation_queue.shift();
      continue;
    }
    let input: unknown = null;
    let inputError: ErrorInfo | null = null;
    try {
      input = await evaluate(comp.input ?? null, scope(s));
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
      continue;
    }
    return;
  }
  throw new Error("advance did not settle");
}

/** When the shell must wake this run up, and with which command. */
export function wakeups(s: ExecutionState): Array<{ at: number; cmd: Command }> {
  if (s.phase === "closed") return [];
  const out: Array<{ at: number; cmd: Command }> = [];
  for (const [timer_id, t] of Object.entries(s.timers)) {
    out.push({ at: t.fire_at_ms, cmd: { type: "timer", timer_id } });
  }
  for (const st of Object.values(s.steps)) {
    if (st.status === "dispatched" && st.deadline_ms !== null) {
      out.push({ at: st.deadline_ms, cmd: { type: "deadline", step: st.id, attempt: st.attempt } });
    }
  }
  return out;
}
