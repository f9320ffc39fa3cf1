/**
 * Shared mode: what an append changes in the shared task queue (`orbit_tasks`), derived from
 * the state before and after it, so that the rows are written in the same transaction as the
 * events (sql/postgres/shared/commit.ts, COMMIT_OWNED). Pure: no I/O, no clock but the one passed.
 *
 * A queued step is one row, identified by its unit: run, step, attempt and how many
 * dispatches that attempt had (a redelivery of the same attempt is a new unit). A unit that
 * is no longer queued either was dispatched (its row was claimed: nothing to do) or is no
 * longer wanted (its row goes, or is cancelled when a server claimed it meanwhile). A live
 * attempt that disappears was either reported (its row goes) or abandoned (its row is
 * cancelled, and the worker hears it on its next heartbeat).
 */
import type { HistoryEvent } from "../engine/events.ts";
import { type ExecutionState, queuedSteps, type StepState } from "../engine/state.ts";
import type { SharedAppend, TaskRow, TaskTake } from "../store/store.ts";

/**
 * The head start of tasks of executions a node owns when it claims (sql/postgres/shared/tasks.ts,
 * claimTasks $7, and COMMIT_OWNED's take): a row owned elsewhere goes before an own row only
 * when it was queued more than this earlier, so it is never more than this behind strict age
 * order, whoever polls.
 *
 * 500 ms: far above what the owner's own polls need to take a fresh row (the owner wakes them
 * at its commit, before the NOTIFY reaches anyone else; a claim is a few milliseconds), so a
 * queue with rows of several owners sorts itself by owner, and a result reaches its owner with
 * no forward (several statements and a NOTIFY per step). It is also what a dispatch from the
 * owner's own queue (COMMIT_OWNED's take) may run ahead of an older row of the task elsewhere:
 * under a backlog on every server (each server's queue some hundreds of milliseconds long), 200
 * ms refused most such takes, and each refusal cost a claim statement (0.8 ms of PostgreSQL
 * each, about one per order; issue 39: three capped servers, 575 claims per server for 600
 * orders at 200 ms, 150 at 500 ms, 95 at 1,000 ms; PostgreSQL 5.05 → 3.35 ms per order). Below
 * the polls' one-second re-check, so a server without idle workers of its own, or a backlog of
 * one server, costs the other rows at most half a second.
 */
export const OWN_TASK_HEAD_START_MS = 500;

export function unitOf(s: ExecutionState, st: StepState): string {
  return `${s.run_id}/${st.id}/${st.attempt}/${Object.keys(st.tokens).length}`;
}

/** The task payload of SPEC §4 without the token (the claiming server adds it). */
export function taskPayload(s: ExecutionState, st: StepState): Record<string, unknown> {
  return {
    execution_id: s.execution_id,
    step: st.id,
    attempt: st.attempt,
    task: st.task,
    contract: st.contract,
    input: st.input,
    idempotency_key: st.idempotency_key,
    redelivery: st.redelivery,
    deadline_ms: st.timeout_ms,
  };
}

function taskRow(
  s: ExecutionState,
  st: StepState,
  unit: string,
  now: number,
  withPayload = true,
): TaskRow {
  return {
    execution_id: s.execution_id,
    run_id: s.run_id,
    step: st.id,
    attempt: st.attempt,
    unit,
    task_name: st.task,
    contract_version: st.contract,
    language: st.language,
    enqueued_ms: now,
    payload: withPayload ? taskPayload(s, st) : null,
  };
}

function queuedUnits(s: ExecutionState | null): Map<string, StepState> {
  const out = new Map<string, StepState>();
  if (!s) return out;
  for (const st of queuedSteps(s)) out.set(unitOf(s, st), st);
  return out;
}

function taskTokens(s: ExecutionState | null): Set<string> {
  const out = new Set<string>();
  if (!s || s.phase === "closed") return out;
  for (const st of Object.values(s.steps)) {
    if (st.kind !== "task") continue;
    for (const t in st.tokens) out.add(t);
  }
  return out;
}

/**
 * The queue changes of one append (without owner, epoch and inbox).
 *
 * `claimedPayload` false: a row written claimed (an eager dispatch) carries no payload. Its task
 * goes out from the owner's memory, in the answer to the result or the poll that took it, and
 * nothing else reads a claimed row's payload: a claim takes only queued rows; a redelivery, a
 * retry or a new run queues a new unit (an uncertain attempt keeps its dead token, so the unit's
 * count of dispatches moves on), and a takeover finds the attempt dispatched in the history.
 * The one reader is a forwarded result's reply that is too large for a notification: the
 * forwarding server reads the inputs of the reply's tasks from their rows (TASK_INPUTS), so an
 * append that applies inbox entries keeps them. Leaving them out spares every step of an order
 * its input once more in the commit statement, the row and the WAL (issue 39: 21.8 → 20.2 KB of
 * WAL per order).
 */
export function sharedChanges(
  prev: ExecutionState | null,
  next: ExecutionState,
  events: readonly HistoryEvent[],
  now: number,
  claimedPayload = true,
): Pick<SharedAppend, "enqueue" | "gone" | "cancel" | "done" | "take"> {
  const before = queuedUnits(prev);
  const after = queuedUnits(next);
  const enqueue: TaskRow[] = [];
  const take: TaskTake[] = [];
  for (const [unit, st] of after) {
    if (before.has(unit)) continue;
    enqueue.push(taskRow(next, st, unit, now));
  }
  // Eager dispatch: a step scheduled and dispatched within this append never was a queued row;
  // it is written claimed, with its token, so that every server knows the attempt.
  for (const e of events) {
    if (e.type !== "StepDispatched") continue;
    const st = next.steps[e.step];
    if (!st || st.kind !== "task" || st.status !== "dispatched") continue;
    const unit = `${next.run_id}/${st.id}/${st.attempt}/${Object.keys(st.tokens).length - 1}`;
    if (before.has(unit)) {
      // A queued row: claimed by a claim statement with this token already, or taken now.
      take.push({
        unit,
        token: e.token,
        session_id: e.worker_session,
        claimed_by: "",
        claimed_ms: now,
        head_ms: OWN_TASK_HEAD_START_MS,
      });
      continue;
    }
    enqueue.push({
      ...taskRow(next, st, unit, now, claimedPayload),
      claimed: { token: e.token, session_id: e.worker_session, node_id: "" },
    });
  }
  const gone: string[] = [];
  for (const [unit, st] of before) {
    if (after.has(unit)) continue;
    const now = next.run_id === prev!.run_id ? next.steps[st.id] : undefined;
    // Dispatched: the row was claimed for exactly this dispatch and stays with its token.
    if (now && now.status === "dispatched" && now.attempt === st.attempt) continue;
    gone.push(unit);
  }
  const reported = new Set<string>();
  for (const e of events) {
    if ((e.type === "StepSucceeded" || e.type === "StepFailed") && e.token) reported.add(e.token);
  }
  const live = taskTokens(next);
  const cancel: string[] = [];
  const done: string[] = [];
  for (const t of taskTokens(prev)) {
    if (live.has(t)) continue;
    if (reported.has(t)) done.push(t);
    else cancel.push(t);
  }
  // A result can arrive for a token that died earlier (the step had moved on): its row goes.
  for (const t of reported) if (!done.includes(t) && !live.has(t)) done.push(t);
  return { enqueue, gone, cancel, done, take };
}
