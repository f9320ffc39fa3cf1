/**
 * The history checker: after a chaos run it reads the database (chaos/history_db.ts) and the
 * workers' attempt logs and proves ORBIT's invariants over everything the run did:
 *
 * - every started execution is terminal, or running only on a declared wait (a `wait_signal`
 *   the driver chose never to answer);
 * - seqs are 1..n without a gap in every run;
 * - the row equals a replay of its current run's history: status, output and error of a
 *   closed run, and a last_seq never past the history's end (`history`,
 *   lib/store/history_check.ts);
 * - event order is legal per step: scheduled → dispatched (→ uncertain → dispatched again) →
 *   one result per attempt; a retry only after a failure that said it would retry; nothing
 *   after the run's terminal event;
 * - at most one StepSucceeded per step, and no attempt's result applied twice;
 * - compensations only for completed steps, scheduled in reverse order of completion;
 * - every StepSucceeded of a worker task matches an attempt some worker logged, with the same
 *   token, step, attempt and idempotency key; every logged attempt was dispatched in the
 *   history with the same key, and a redelivery says `redelivery: true` (and only then);
 * - every schedule occurrence between the first and the pause started once, none skipped;
 * - a `note` signal answered 200 is in the history, and none is recorded twice unless one of
 *   its tries went unanswered or answered 500 (`signal-once`);
 * - a timer fires only once it is due and at most once: every `TimerFired` follows a
 *   `TimerStarted` of its id in the same run that neither fired nor was dropped with its
 *   step's cancel, and its `time_ms` is not before that start's `fire_at_ms` (`timer-fire`);
 * - a `GET …/wait` answered with a terminal status agrees with the history: the run it names
 *   ends with that status's terminal event, with the same output (completed) or error code
 *   (`wait-answer`);
 * - standby: no two servers announced leadership in the same term;
 * - shared: no two nodes appended for one execution at the same epoch, and along a run's seqs
 *   the epoch never goes back (read from the servers' `shared: appended` debug lines, written
 *   only after a commit answered).
 *
 * The rules are in chaos/rules/*.ts; `check` runs them in order. A violation names its rule and
 * execution; `formatViolation` prints the execution's events and the faults around the first
 * offending event.
 */
import type { CheckInput, FaultRecord } from "./check_input.ts";
import type { Snapshot } from "./history_db.ts";
import { checkAttempts } from "./rules/attempts.ts";
import { checkAppends, checkLeaders } from "./rules/cluster.ts";
import { checkExecutions } from "./rules/runs.ts";
import { checkSchedule } from "./rules/schedule.ts";
import { checkSignals } from "./rules/signals.ts";
import { checkWaits } from "./rules/waits.ts";

export type {
  AppendRecord,
  Attempt,
  CheckInput,
  FaultRecord,
  ScheduleCheck,
  SignalRecord,
  StartRecord,
  WaitAnswer,
} from "./check_input.ts";
export { parseAppendLine } from "./check_input.ts";

export interface Violation {
  rule: string;
  execution: string | null;
  message: string;
  /** time_ms of the offending event, when there is one. */
  at_ms: number | null;
}

export interface CheckResult {
  violations: Violation[];
  executions: number;
  events: number;
  byStatus: Record<string, number>;
  attempts: number;
  redeliveries: number;
  /** Shared mode: attempts a server handed out that the owner refused to record. */
  unrecordedClaims: number;
  occurrences: number;
  /** Shared mode: appends the servers logged and the checker read (null: none captured). */
  appends: number | null;
  /** `TimerFired` events checked against their `TimerStarted` (`timer-fire`). */
  timersFired: number;
  /** Wait answers with a terminal status checked against the history (`wait-answer`). */
  waitsChecked: number;
}

export function check(input: CheckInput): CheckResult {
  const v: Violation[] = [];
  const add = (rule: string, execution: string | null, message: string, at: number | null = null) =>
    v.push({ rule, execution, message, at_ms: at });
  const { snapshot } = input;
  const execById = new Map(snapshot.executions.map((e) => [e.execution_id, e]));
  const byStatus: Record<string, number> = {};
  for (const e of snapshot.executions) byStatus[e.status] = (byStatus[e.status] ?? 0) + 1;

  // 1–6 per execution and run, and 13 per run.
  const { dispatched, eventCount, timersFired } = checkExecutions(input, add, execById);
  // 7–8. The history against the attempts the workers logged.
  const { redeliveries, unrecordedClaims } = checkAttempts(input, add, execById, dispatched);
  // 9. Schedule occurrences.
  const occurrences = checkSchedule(input, add);
  // 10. Standby: one leader per term.
  checkLeaders(input, add);
  // 11. Shared: one writer per (execution, epoch), epochs never back along a run.
  if (input.mode === "shared" && input.appends) {
    checkAppends(input.appends, snapshot, eventCount, add);
  }
  // 12. A signal is recorded once when it was answered.
  checkSignals(input, add, execById);
  // 14. A wait answered with a terminal status agrees with the history's end of that run.
  const waitsChecked = checkWaits(input, add, execById);

  return {
    violations: v,
    executions: snapshot.executions.length,
    events: eventCount,
    byStatus,
    attempts: input.attempts.length,
    redeliveries,
    unrecordedClaims,
    occurrences,
    appends: input.mode === "shared" && input.appends ? input.appends.length : null,
    timersFired,
    waitsChecked,
  };
}

/** A violation with the execution's events and the faults within 15 s of it. */
export function formatViolation(
  viol: Violation,
  snapshot: Snapshot,
  faults: FaultRecord[],
): string {
  const out = [`VIOLATION [${viol.rule}] ${viol.execution ?? "(run)"}: ${viol.message}`];
  if (viol.execution) {
    const events = snapshot.events.get(viol.execution) ?? [];
    out.push(`  events (${events.length}):`);
    for (const e of events) {
      const extra = [
        e.step ? `step=${e.step}` : "",
        e.attempt !== undefined ? `attempt=${e.attempt}` : "",
        e.token ? `token=${String(e.token).split("/").pop()?.slice(0, 8)}` : "",
        e.redelivery ? "redelivery" : "",
        e.will_retry !== undefined ? `will_retry=${e.will_retry}` : "",
        e.error?.code ? `error=${e.error.code}` : "",
      ].filter(Boolean).join(" ");
      out.push(
        `    ${e.run_id.slice(0, 8)} ${String(e.seq).padStart(3)} ${
          new Date(e.time_ms).toISOString()
        } ${e.type} ${extra}`,
      );
    }
  }
  const at = viol.at_ms ?? snapshot.events.get(viol.execution ?? "")?.[0]?.time_ms ?? null;
  const near = at === null
    ? faults
    : faults.filter((f) => f.end_ms >= at - 15_000 && f.at_ms <= at + 15_000);
  out.push(`  faults ${at === null ? "(all)" : "within 15 s"}:`);
  for (const f of near) {
    out.push(
      `    ${new Date(f.at_ms).toISOString()} ${f.kind} ${f.target} (${f.end_ms - f.at_ms} ms)`,
    );
  }
  return out.join("\n");
}
