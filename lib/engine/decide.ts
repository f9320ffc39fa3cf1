/**
 * The decision half of the pure core: state + command → new events. `decide` works on a copy
 * of the state (`copyState`: the containers events write into, not the values they carry) and
 * returns both the events and the state after them; the shell commits the
 * events and only then installs the new state. The clock and id source are injected.
 *
 * A command that no longer applies (a result for a dead token, a timer already fired, a
 * deadline of an attempt that finished) yields no events and `accepted: false`: that is how
 * duplicate and late results are made harmless.
 *
 * Code entrypoints: `handle` below takes the command; `advance.ts` moves the run forward
 * through its step lists; `saga.ts` runs compensations and ends failed, cancelled and timed-out
 * runs; `signals.ts` records signals and opens their handler runs.
 */
import type { ErrorInfo, ExecutionStatus, HistoryEvent } from "./events.ts";
import { backoffMs, retryPolicy, type TaskSpec, type WorkflowDoc } from "./ir.ts";
import {
  copyState,
  emptyState,
  type ExecutionState,
  stepOfToken,
  type StepState,
} from "./state.ts";
import { baseId, Builder, type Context, isOpen } from "./builder.ts";
import { advance } from "./advance.ts";
import { beginCompensation, cancelOpen, compensationOf } from "./saga.ts";
import { receiveSignal } from "./signals.ts";

export type { ChildLimits, Context } from "./builder.ts";

export type Command =
  | {
    type: "start";
    execution_id: string;
    run_id: string;
    root_id?: string;
    parent_id?: string | null;
    /** A child's depth (its parent's + 1); absent for a root execution. */
    depth?: number;
    input: unknown;
    /** Continue-as-new: the run this one continues, its number, and what it carries over. */
    continued_from?: string;
    run_number?: number;
    signals?: Array<{ signal: string; payload: unknown }>;
    /** The execution's deadline (a continued run keeps its first run's). */
    timeout_at_ms?: number;
    /**
     * Continue-as-new: a cancel that reached the execution between a run's end and the next
     * run's start; the next run starts cancelled (WorkflowCancelRequested, WorkflowCancelled)
     * instead of running its steps.
     */
    cancel?: string;
  }
  | { type: "dispatch"; step: string; token: string; worker_id: string; worker_session: string }
  | { type: "complete"; token: string; output: unknown }
  | { type: "fail"; token: string; error: ErrorInfo }
  | { type: "timer"; timer_id: string }
  | { type: "deadline"; step: string; attempt: number }
  | { type: "uncertain"; token: string; reason: string }
  | { type: "cancel"; reason: string }
  | { type: "signal"; name: string; payload: unknown }
  | { type: "child_started"; step: string; execution_id: string; run_id: string }
  | {
    /** The child execution of a `child` step ended (or could not start: status `failed`). */
    type: "child_result";
    step: string;
    execution_id: string;
    /** The child's run: recorded as ChildStarted first when that was not reported yet. */
    run_id?: string;
    status: ExecutionStatus;
    output?: unknown;
    error?: ErrorInfo | null;
  };

export interface Decision {
  events: HistoryEvent[];
  state: ExecutionState;
  /** False when the command changed nothing because it no longer applies. */
  accepted: boolean;
  /** Whether the `follow` command was decided too (its events follow the first one's). */
  followed: boolean;
}

/**
 * `follow`: once `cmd` is accepted, names a second command to decide on the state after it
 * (the shell's eager dispatch of the next step to the worker that reported the previous one);
 * its events, if it applies, follow the first command's in the same decision. The same as a
 * second `decide` on the first decision's state, without a second copy of the state.
 */
export async function decide(
  def: WorkflowDoc,
  state: ExecutionState | null,
  cmd: Command,
  ctx: Context,
  follow?: (s: ExecutionState) => Command | null,
): Promise<Decision> {
  const b = new Builder(def, state ? copyState(state) : emptyState(), ctx);
  const accepted = handle(b, cmd);
  if (!accepted) return { events: b.events, state: b.state, accepted, followed: false };
  await advance(b);
  const next = follow ? follow(b.state) : null;
  // A command that does not apply emits nothing (`handle` checks before it emits).
  const followed = next !== null && handle(b, next);
  if (followed) await advance(b);
  return { events: b.events, state: b.state, accepted, followed };
}

function start(b: Builder, cmd: Extract<Command, { type: "start" }>): void {
  const def = b.def;
  const runNumber = cmd.run_number ?? 1;
  b.emit({
    type: "WorkflowCreated",
    workflow: def.name,
    version: def.version,
    input: cmd.input ?? null,
    execution_id: cmd.execution_id,
    run_id: cmd.run_id,
    root_id: cmd.root_id ?? cmd.execution_id,
    parent_id: cmd.parent_id ?? null,
    ...(cmd.depth ? { depth: cmd.depth } : {}),
    ...(cmd.continued_from ? { continued_from: cmd.continued_from } : {}),
    ...(runNumber > 1 ? { run: runNumber } : {}),
  });
  for (const sig of cmd.signals ?? []) {
    b.emit({
      type: "SignalReceived",
      signal: sig.signal,
      payload: sig.payload,
      buffered: true,
      carried_over: true,
    });
  }
  if (def.timeout_s) {
    b.emit({
      type: "TimerStarted",
      timer_id: "workflow-timeout",
      fire_at_ms: cmd.timeout_at_ms ?? b.ctx.now + Math.round(def.timeout_s * 1000),
      purpose: "timeout",
    });
  }
}

function handle(b: Builder, cmd: Command): boolean {
  const s = b.state;
  if (cmd.type === "start") {
    if (s.last_seq !== 0) return false;
    start(b, cmd);
    if (cmd.cancel !== undefined) b.emit({ type: "WorkflowCancelRequested", reason: cmd.cancel });
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
      failAttempt(b, st, cmd.error, cmd.token);
      return true;
    }
    case "deadline": {
      const st = s.steps[cmd.step];
      if (!st || st.status !== "dispatched" || st.attempt !== cmd.attempt) return false;
      if (st.deadline_ms === null || st.deadline_ms > b.ctx.now) return false;
      failAttempt(b, st, {
        code: "STEP_TIMEOUT",
        message: `attempt ${st.attempt} of step "${st.id}" did not finish within ${
          st.timeout_ms! / 1000
        } s`,
        retryable: true,
      });
      return true;
    }
    case "timer":
      return timer(b, cmd.timer_id);
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
      // A cancel during the saga changes nothing: the compensations already run.
      if (s.cancel_reason !== null || s.phase !== "running") return false;
      b.emit({ type: "WorkflowCancelRequested", reason: cmd.reason });
      cancelOpen(b, "execution cancelled");
      beginCompensation(b, "cancelled");
      return true;
    }
    case "signal":
      receiveSignal(b, cmd.name, cmd.payload);
      return true;
    case "child_started": {
      const st = childStep(s, cmd.step, cmd.execution_id);
      if (!st || st.child_run_id !== undefined) return false;
      b.emit({
        type: "ChildStarted",
        step: st.id,
        attempt: st.attempt,
        execution_id: cmd.execution_id,
        run_id: cmd.run_id,
      });
      return true;
    }
    case "child_result": {
      const st = childStep(s, cmd.step, cmd.execution_id);
      if (!st || cmd.status === "running" || cmd.status === "continued") return false;
      if (st.child_run_id === undefined && cmd.run_id !== undefined) {
        b.emit({
          type: "ChildStarted",
          step: st.id,
          attempt: st.attempt,
          execution_id: cmd.execution_id,
          run_id: cmd.run_id,
        });
      }
      if (cmd.status === "completed") {
        b.emit({
          type: "StepSucceeded",
          step: st.id,
          attempt: st.attempt,
          output: cmd.output ?? null,
        });
        return true;
      }
      const cause = cmd.error ?? null;
      // The shell's own refusals (the child never ran: no run of it is known) keep their code;
      // a child that ran and failed with the same code is a CHILD_FAILED like any other.
      const own = (cause?.code === "CHILD_START_FAILED" || cause?.code === "CHILD_LIMIT") &&
        cmd.run_id === undefined && st.child_run_id === undefined;
      b.emit({
        type: "StepFailed",
        step: st.id,
        attempt: st.attempt,
        error: {
          code: own ? cause.code : `CHILD_${cmd.status.toUpperCase()}`,
          message: own
            ? cause.message
            : `child execution ${cmd.execution_id} ${cmd.status}${
              cause ? `: ${cause.message}` : ""
            }`,
          retryable: false,
          details: { child: cmd.execution_id, status: cmd.status, error: cause },
        },
        will_retry: false,
      });
      return true;
    }
  }
}

function childStep(s: ExecutionState, step: string, childId: string): StepState | undefined {
  const st = s.steps[step];
  return isOpen(st) && st.kind === "child" && st.child?.execution_id === childId ? st : undefined;
}

function timer(b: Builder, timerId: string): boolean {
  const s = b.state;
  const t = s.timers[timerId];
  if (!t || t.fire_at_ms > b.ctx.now) return false;
  b.emit({ type: "TimerFired", timer_id: timerId, ...(t.step ? { step: t.step } : {}) });
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
      ...(st.kind === "http" ? { kind: "http" as const } : {}),
      ...(st.frame !== "$" ? { frame: st.frame } : {}),
    });
  } else if (t.purpose === "sleep" && st && st.status === "waiting") {
    b.emit({ type: "StepSucceeded", step: st.id, attempt: st.attempt, output: null });
  } else if (t.purpose === "timeout" && st && isOpen(st)) {
    const what = st.kind === "wait_signal"
      ? `signal "${st.signal}"`
      : `child ${st.child?.execution_id}`;
    b.emit({
      type: "StepFailed",
      step: st.id,
      attempt: st.attempt,
      error: {
        code: st.kind === "wait_signal" ? "SIGNAL_TIMEOUT" : "CHILD_TIMEOUT",
        message: `step "${st.id}" waited for ${what} longer than ${st.timeout_ms! / 1000} s`,
        retryable: false,
      },
      will_retry: false,
    });
  }
  return true;
}

function failAttempt(b: Builder, st: StepState, error: ErrorInfo, token?: string) {
  const policy = retryPolicy(specOf(b, st));
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

/** The retry policy source a step state was scheduled from (a task, an http step, a compensation). */
function specOf(b: Builder, st: StepState): TaskSpec {
  if (st.compensation) {
    return compensationOf(b, st.id.slice(0, -".compensate".length)) ??
      { task: st.task, contract: st.contract };
  }
  const d = b.tree.byId.get(baseId(st.id))?.step;
  if (d && ("task" in d || "http" in d)) return { task: st.task, contract: st.contract, ...d };
  return { task: st.task, contract: st.contract };
}

/**
 * The start of the next run of a run that ended with continue-as-new: same execution, the
 * new run id and input, the buffered signals (their handlers already ran) and the deadline.
 */
export function continuation(s: ExecutionState): Extract<Command, { type: "start" }> | null {
  if (!s.continued) return null;
  return {
    type: "start",
    execution_id: s.execution_id,
    run_id: s.continued.run_id,
    root_id: s.root_id,
    parent_id: s.parent_id,
    ...(s.depth > 0 ? { depth: s.depth } : {}),
    input: s.continued.input,
    continued_from: s.run_id,
    run_number: s.run_number + 1,
    signals: s.signals.map((x) => ({ signal: x.signal, payload: x.payload })),
    ...(s.timeout_at_ms !== null ? { timeout_at_ms: s.timeout_at_ms } : {}),
  };
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
