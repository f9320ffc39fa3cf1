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
 * A violation names its rule and execution; `formatViolation` prints the execution's events
 * and the faults around the first offending event.
 */
import { isDeepStrictEqual } from "node:util";
import type { Event, Snapshot } from "./history_db.ts";
import { historyProblems } from "../lib/store/history_check.ts";
import type { HistoryEvent } from "../lib/engine/events.ts";

export interface Attempt {
  execution_id: string;
  step: string;
  attempt: number;
  idempotency_key: string;
  redelivery: boolean;
  token: string;
  task: string;
  pid: number;
  at_ms: number;
  worker: string;
}

export interface StartRecord {
  id: string;
  kind: "order" | "flow";
  /** The start was answered 200/201 (else it may or may not have landed). */
  answered: boolean;
  /** The driver leaves it waiting for a signal on purpose. */
  declaredWait: boolean;
  /** Signals the driver sent with a distinct payload `{i}`, and what each try was answered. */
  signals?: SignalRecord[];
  /** The `GET …/wait` answer that ended the driver's wait (absent: none said it ended). */
  waited?: WaitAnswer;
}

/** What a `GET /v1/executions/{id}/wait` answered 200 with a status other than running. */
export interface WaitAnswer {
  status: string;
  /** The run the answer names (absent: the answer had none; the execution's current run). */
  run_id?: string;
  /** The answer's `output` (absent: the answer had no such field). */
  output?: unknown;
  /** The answer's `error.code`, when it had one. */
  error_code?: string;
  /** When the driver got the answer (ms). */
  at_ms: number;
}

/**
 * One signal the driver sent (`POST …/signals/<signal>` with payload `{"i": key}`) and the
 * statuses of its tries (0: no answer). A 503 says nothing was applied (a server not ready, a
 * standby, an owner that did not apply it within 10 s and had it withdrawn); no answer, or a
 * 500, may have been applied. So it is recorded at most once unless a try went unanswered or
 * answered 500, and at least once when a try answered 200.
 */
export interface SignalRecord {
  signal: string;
  key: number;
  statuses: number[];
}

export interface FaultRecord {
  kind: string;
  target: string;
  at_ms: number;
  end_ms: number;
  /** From the fault until the system served again (null: it never stopped serving). */
  recovery_ms: number | null;
}

export interface ScheduleCheck {
  schedule_id: string;
  every_s: number;
  created_ms: number;
  /** The schedule's next fire time read after the run: every occurrence before it fired. */
  next_fire_ms: number;
}

/** One `shared: appended` debug line of a shared-mode server (lib/store/postgres.ts). */
export interface AppendRecord {
  /** The deployment's node whose process logged the line. */
  node: string;
  node_id: string;
  execution_id: string;
  run_id: string;
  epoch: number;
  from_seq: number;
  to_seq: number;
  /** The line's timestamp (ms). */
  at_ms: number;
}

const APPEND_LINE =
  /^(\S+) DEBUG \S+: shared: appended node_id=(\S+) execution_id=(\S+) run_id=(\S+) epoch=(\d+) from_seq=(\d+) to_seq=(\d+)$/;

/** Parses a server's log line; null unless it is a `shared: appended` line. */
export function parseAppendLine(node: string, line: string): AppendRecord | null {
  const m = APPEND_LINE.exec(line.trimEnd());
  if (!m) return null;
  return {
    node,
    node_id: m[2]!,
    execution_id: m[3]!,
    run_id: m[4]!,
    epoch: Number(m[5]),
    from_seq: Number(m[6]),
    to_seq: Number(m[7]),
    at_ms: Date.parse(m[1]!),
  };
}

export interface CheckInput {
  mode: string;
  snapshot: Snapshot;
  attempts: Attempt[];
  starts: StartRecord[];
  faults: FaultRecord[];
  serverLogs: { node: string; line: string }[];
  schedule: ScheduleCheck | null;
  /** Shared mode: every append the servers logged (absent: not captured, not checked). */
  appends?: AppendRecord[];
}

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

const TERMINAL_STATUS = new Set(["completed", "failed", "cancelled", "timed_out"]);
/** The terminal event each terminal status of an execution is closed by. */
const TERMINAL_EVENT_OF: Record<string, string> = {
  completed: "WorkflowCompleted",
  failed: "WorkflowFailed",
  cancelled: "WorkflowCancelled",
  timed_out: "WorkflowTimedOut",
  continued: "WorkflowContinuedAsNew",
};
const TERMINAL_EVENT = new Set([
  "WorkflowCompleted",
  "WorkflowFailed",
  "WorkflowCancelled",
  "WorkflowTimedOut",
  "WorkflowContinuedAsNew",
]);

interface StepTrack {
  kind: "task" | "http" | "started";
  attempt: number;
  key: string | null;
  status: "scheduled" | "dispatched" | "open" | "succeeded" | "failed" | "backoff" | "cancelled";
  /** An attempt was reported uncertain in this attempt: later dispatches are redeliveries. */
  uncertain: boolean;
  tokens: Map<string, { uncertain: boolean; redelivery: boolean; attempt: number }>;
  succeeded: number;
  succeededSeq: number | null;
}

export function check(input: CheckInput): CheckResult {
  const v: Violation[] = [];
  const add = (rule: string, execution: string | null, message: string, at: number | null = null) =>
    v.push({ rule, execution, message, at_ms: at });
  const { snapshot } = input;
  const execById = new Map(snapshot.executions.map((e) => [e.execution_id, e]));
  const byStatus: Record<string, number> = {};
  for (const e of snapshot.executions) byStatus[e.status] = (byStatus[e.status] ?? 0) + 1;
  const startById = new Map(input.starts.map((s) => [s.id, s]));

  // 1. Terminal, or waiting on purpose.
  for (const s of input.starts) {
    if (s.answered && !execById.has(s.id)) {
      add("started-exists", s.id, "the start was answered but there is no such execution");
    }
  }
  // Every dispatched token, by execution: token → its dispatch and the step's key.
  const dispatched = new Map<
    string,
    {
      step: string;
      attempt: number;
      redelivery: boolean;
      key: string | null;
      uncertainBefore: boolean;
    }
  >();
  let eventCount = 0;
  let timersFired = 0;

  for (const ex of snapshot.executions) {
    const events = snapshot.events.get(ex.execution_id) ?? [];
    eventCount += events.length;
    const current = events.filter((e) => e.run_id === ex.run_id) as unknown as HistoryEvent[];
    for (const p of historyProblems(ex, current)) add("history", ex.execution_id, p);
    if (!TERMINAL_STATUS.has(ex.status)) {
      const declared = startById.get(ex.execution_id)?.declaredWait === true;
      const waiting = openSignalWait(events.filter((e) => e.run_id === ex.run_id));
      if (!(ex.status === "running" && declared && waiting)) {
        add(
          "terminal",
          ex.execution_id,
          `status ${ex.status}${waiting ? " on a wait the driver did not declare" : ""}`,
        );
      }
    }
    // 2–6, per run.
    const runs = new Map<string, Event[]>();
    for (const e of events) {
      let l = runs.get(e.run_id);
      if (!l) runs.set(e.run_id, l = []);
      l.push(e);
    }
    for (const [runId, run] of runs) {
      checkRun(ex.execution_id, runId, run, add, dispatched);
      // 13. Timers fire once, and not before they are due.
      timersFired += checkTimers(ex.execution_id, runId, run, add);
    }
  }

  // 7. Every StepSucceeded of a worker task matches a logged attempt.
  const attemptByToken = new Map<string, Attempt[]>();
  for (const a of input.attempts) {
    let l = attemptByToken.get(a.token);
    if (!l) attemptByToken.set(a.token, l = []);
    l.push(a);
  }
  for (const ex of snapshot.executions) {
    const events = snapshot.events.get(ex.execution_id) ?? [];
    const keys = new Map<string, string>();
    const kinds = new Map<string, string>();
    for (const e of events) {
      if (e.type === "StepScheduled") {
        keys.set(`${e.run_id}/${e.step}`, e.idempotency_key);
        kinds.set(`${e.run_id}/${e.step}`, e.kind ?? "task");
      }
      if (e.type !== "StepSucceeded" || !e.token) continue;
      if (kinds.get(`${e.run_id}/${e.step}`) !== "task") continue;
      const logged = attemptByToken.get(e.token) ?? [];
      const match = logged.find((a) =>
        a.execution_id === ex.execution_id && a.step === e.step && a.attempt === e.attempt &&
        a.idempotency_key === keys.get(`${e.run_id}/${e.step}`)
      );
      if (!match) {
        add(
          "result-matches-attempt",
          ex.execution_id,
          `StepSucceeded seq ${e.seq} (step ${e.step}, attempt ${e.attempt}, token ${e.token}) ` +
            `matches no attempt a worker logged (${logged.length} with that token)`,
          e.time_ms,
        );
      }
    }
  }
  // 8. Every logged attempt was dispatched, with the step's key and the right redelivery flag.
  let redeliveries = 0;
  let unrecordedClaims = 0;
  const scheduledKeys = new Map<string, string>();
  for (const [id, events] of snapshot.events) {
    for (const e of events) {
      if (e.type === "StepScheduled") {
        scheduledKeys.set(`${id}/${e.step}/${e.attempt}`, e.idempotency_key);
      }
    }
  }
  for (const a of input.attempts) {
    if (a.redelivery) redeliveries++;
    const d = dispatched.get(a.token);
    if (!d) {
      // An execution outside this run (another tag) is not ours to judge.
      if (!execById.has(a.execution_id)) continue;
      const key = scheduledKeys.get(`${a.execution_id}/${a.step}/${a.attempt}`);
      if (input.mode === "shared" && key !== undefined) {
        // Shared mode hands a task claimed for another node's execution to the worker at
        // once; the owner records the dispatch only if the step still waits for that offer
        // (reference page, "Task queue"). An offer the owner refused is never in the history
        // and its result is never applied (a result by an unknown token is an event-order
        // violation above); its key must still be the step's.
        unrecordedClaims++;
        if (key !== a.idempotency_key) {
          add(
            "idempotency-key",
            a.execution_id,
            `token ${a.token}: worker saw key ${a.idempotency_key}, the step's key is ${key}`,
            a.at_ms,
          );
        }
        continue;
      }
      add(
        "attempt-dispatched",
        a.execution_id,
        `attempt token ${a.token} (step ${a.step}) was executed by ${a.worker} but no StepDispatched records it`,
        a.at_ms,
      );
      continue;
    }
    if (d.step !== a.step || d.attempt !== a.attempt) {
      add(
        "attempt-dispatched",
        a.execution_id,
        `token ${a.token}: worker ran step ${a.step} attempt ${a.attempt}, history dispatched step ${d.step} attempt ${d.attempt}`,
        a.at_ms,
      );
    }
    if (d.key !== a.idempotency_key) {
      add(
        "idempotency-key",
        a.execution_id,
        `token ${a.token}: worker saw key ${a.idempotency_key}, the step's key is ${d.key}`,
        a.at_ms,
      );
    }
    if (a.redelivery !== d.redelivery || a.redelivery !== d.uncertainBefore) {
      add(
        "redelivery-flag",
        a.execution_id,
        `token ${a.token}: worker saw redelivery ${a.redelivery}, history dispatched it with ${d.redelivery} (an uncertain attempt before: ${d.uncertainBefore})`,
        a.at_ms,
      );
    }
  }

  // 9. Schedule occurrences.
  let occurrences = 0;
  if (input.schedule) {
    const s = input.schedule;
    const every = s.every_s * 1000;
    const ids = snapshot.executions.map((e) => e.execution_id).filter((id) =>
      id.startsWith(`${s.schedule_id}@`)
    );
    occurrences = ids.length;
    const at = ids.map((id) => Date.parse(id.slice(id.indexOf("@") + 1))).sort((a, b) => a - b);
    const row = snapshot.schedules.find((r) => r.schedule_id === s.schedule_id);
    const skipped = row?.skipped ?? 0;
    if (skipped > 0) {
      add("schedule", null, `${skipped} occurrences skipped (catch_up all, allow_all)`);
    }
    for (let i = 0; i < at.length; i++) {
      if (at[i]! % every !== 0) {
        add(
          "schedule",
          null,
          `occurrence ${new Date(at[i]!).toISOString()} is off the ${s.every_s} s grid`,
        );
      }
      if (i > 0 && at[i] === at[i - 1]) {
        add("schedule", null, `occurrence ${new Date(at[i]!).toISOString()} started twice`);
      }
    }
    // Every grid point after the creation and before the next fire time was started.
    const first = Math.ceil((s.created_ms + 1) / every) * every + every;
    const last = s.next_fire_ms - every;
    const have = new Set(at);
    const missing: string[] = [];
    for (let t = first; t <= last; t += every) {
      if (!have.has(t)) missing.push(new Date(t).toISOString());
    }
    if (missing.length > 0) {
      add(
        "schedule",
        null,
        `${missing.length} occurrences never started: ${missing.slice(0, 10).join(", ")}${
          missing.length > 10 ? ", …" : ""
        }`,
      );
    }
  }

  // 10. Standby: one leader per term.
  if (input.mode === "standby") {
    const leaders = new Map<number, Set<string>>();
    for (const { node, line } of input.serverLogs) {
      const m = line.match(/leader is serving node_id=(\S+) term=(\d+)/);
      if (!m) continue;
      const term = Number(m[2]);
      let set = leaders.get(term);
      if (!set) leaders.set(term, set = new Set());
      set.add(`${m[1]} (process of ${node})`);
      if (m[1] !== node) {
        add("leader-term", null, `${node} logged leadership as ${m[1]} in term ${term}`);
      }
    }
    for (const [term, set] of leaders) {
      const ids = new Set([...set].map((s) => s.split(" ")[0]));
      if (ids.size > 1) {
        add("leader-term", null, `term ${term} had ${ids.size} leaders: ${[...set].join(", ")}`);
      }
    }
    const c = snapshot.cluster;
    if (c && c.term > 0 && !leaders.has(c.term)) {
      add(
        "leader-term",
        null,
        `orbit_cluster is at term ${c.term} (leader ${c.leader_node}) but no server logged serving in it`,
      );
    }
  }

  // 11. Shared: one writer per (execution, epoch), epochs never back along a run.
  if (input.mode === "shared" && input.appends) {
    checkAppends(input.appends, snapshot, eventCount, add);
  }

  // 12. A signal is recorded once when it was answered, never twice unless a try's outcome
  // was unknown (no answer, or 500).
  for (const s of input.starts) {
    if (!s.signals || s.signals.length === 0 || !execById.has(s.id)) continue;
    const received = new Map<string, number>();
    for (const e of snapshot.events.get(s.id) ?? []) {
      if (e.type !== "SignalReceived" || e.carried_over === true) continue;
      const i = (e.payload as { i?: unknown } | null)?.i;
      if (typeof i !== "number") continue;
      const k = `${e.signal} ${i}`;
      received.set(k, (received.get(k) ?? 0) + 1);
    }
    for (const sig of s.signals) {
      const n = received.get(`${sig.signal} ${sig.key}`) ?? 0;
      const unknown = sig.statuses.some((st) => st === 0 || (st >= 500 && st !== 503));
      const tries = `tries answered ${sig.statuses.join(", ")}`;
      if (n > 1 && !unknown) {
        add(
          "signal-once",
          s.id,
          `signal ${sig.signal} {"i": ${sig.key}} recorded ${n} times; ${tries}`,
        );
      }
      if (n === 0 && sig.statuses.some((st) => st === 200 || st === 201)) {
        add(
          "signal-once",
          s.id,
          `signal ${sig.signal} {"i": ${sig.key}} answered but not recorded; ${tries}`,
        );
      }
    }
  }

  // 14. A wait answered with a terminal status agrees with the history's end of that run.
  let waitsChecked = 0;
  for (const s of input.starts) {
    const w = s.waited;
    if (!w || !(w.status in TERMINAL_EVENT_OF)) continue;
    waitsChecked++;
    const ex = execById.get(s.id);
    const answered = `the wait answered ${w.status}${w.run_id ? ` for run ${w.run_id}` : ""} at ${
      new Date(w.at_ms).toISOString()
    }`;
    if (!ex) {
      add("wait-answer", s.id, `${answered}, but there is no such execution`, w.at_ms);
      continue;
    }
    const runId = w.run_id ?? ex.run_id;
    const run = (snapshot.events.get(s.id) ?? []).filter((e) => e.run_id === runId);
    const end = run.findLast((e) => TERMINAL_EVENT.has(e.type));
    const want = TERMINAL_EVENT_OF[w.status]!;
    if (!end) {
      add(
        "wait-answer",
        s.id,
        `${answered}, but run ${runId} has no terminal event (${run.length} events, last ${
          run.at(-1)?.type ?? "none"
        }; the execution reads ${ex.status})`,
        w.at_ms,
      );
      continue;
    }
    if (end.type !== want) {
      add(
        "wait-answer",
        s.id,
        `${answered}, but run ${runId} ended with ${end.type} seq ${end.seq}`,
        end.time_ms,
      );
      continue;
    }
    if (w.status === "completed" && "output" in w && !isDeepStrictEqual(w.output, end.output)) {
      add(
        "wait-answer",
        s.id,
        `${answered} with output ${JSON.stringify(w.output)}, but ${end.type} seq ${end.seq} ` +
          `recorded ${JSON.stringify(end.output)}`,
        end.time_ms,
      );
    }
    const code = end.error?.code;
    if (w.error_code !== undefined && typeof code === "string" && w.error_code !== code) {
      add(
        "wait-answer",
        s.id,
        `${answered} with error ${w.error_code}, but ${end.type} seq ${end.seq} recorded ${code}`,
        end.time_ms,
      );
    }
  }

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

function checkAppends(
  appends: AppendRecord[],
  snapshot: Snapshot,
  eventCount: number,
  add: (rule: string, execution: string | null, message: string, at?: number | null) => void,
): void {
  if (appends.length === 0 && eventCount > 0) {
    add("append-epoch", null, `${eventCount} events in the history but no server logged an append`);
    return;
  }
  const what = (a: AppendRecord) =>
    `${a.node_id} (process of ${a.node}) at epoch ${a.epoch}, seqs ${a.from_seq}..${a.to_seq}`;
  const runLength = new Map<string, number>();
  for (const events of snapshot.events.values()) {
    for (const e of events) runLength.set(e.run_id, Math.max(runLength.get(e.run_id) ?? 0, e.seq));
  }
  const ours = new Set(snapshot.executions.map((e) => e.execution_id));
  const writers = new Map<string, AppendRecord>();
  const runs = new Map<string, AppendRecord[]>();
  for (const a of appends) {
    // An execution outside this run (another tag) is not ours to judge.
    if (!ours.has(a.execution_id)) continue;
    if (a.node_id !== a.node) {
      add("append-epoch", a.execution_id, `${a.node} logged an append as ${what(a)}`, a.at_ms);
    }
    const key = `${a.execution_id} ${a.epoch}`;
    const first = writers.get(key);
    if (!first) writers.set(key, a);
    else if (first.node_id !== a.node_id) {
      add(
        "append-epoch",
        a.execution_id,
        `two nodes appended at epoch ${a.epoch}: ${what(first)} and ${what(a)}`,
        a.at_ms,
      );
    }
    let l = runs.get(a.run_id);
    if (!l) runs.set(a.run_id, l = []);
    l.push(a);
  }
  for (const [runId, list] of runs) {
    list.sort((a, b) => a.from_seq - b.from_seq);
    const id = list[0]!.execution_id;
    for (let i = 1; i < list.length; i++) {
      const a = list[i - 1]!;
      const b = list[i]!;
      if (b.from_seq <= a.to_seq) {
        add(
          "append-epoch",
          id,
          `run ${runId}: seqs appended twice: ${what(a)} and ${what(b)}`,
          b.at_ms,
        );
      }
      if (b.epoch < a.epoch) {
        add(
          "append-epoch",
          id,
          `run ${runId}: a lower epoch after a higher one: ${what(a)}, then ${what(b)}`,
          b.at_ms,
        );
      }
    }
    const last = list.reduce((m, a) => a.to_seq > m.to_seq ? a : m);
    const have = runLength.get(runId) ?? 0;
    if (last.to_seq > have) {
      add(
        "append-epoch",
        id,
        `run ${runId}: ${what(last)} was logged as appended, the history has ${have} events`,
        last.at_ms,
      );
    }
  }
}

/**
 * 13. `timer-fire`: the engine emits `TimerFired` only for a timer its state holds (started,
 * not fired, not dropped by its step's `StepCancelled`) and only when `fire_at_ms <= now`, and
 * stamps the event's `time_ms` with that same `now` (lib/engine/decide.ts `timer`,
 * lib/engine/builder.ts). So `time_ms >= fire_at_ms` holds exactly, with no tolerance: even when
 * the timer was started on another server (a takeover, a restart) whose clock differs, the
 * comparison and the stamp both use the firing server's clock. Returns the TimerFired count.
 */
function checkTimers(
  id: string,
  runId: string,
  run: Event[],
  add: (rule: string, execution: string | null, message: string, at?: number | null) => void,
): number {
  /** Started and not yet fired or dropped: timer id → its TimerStarted. */
  const pending = new Map<string, Event>();
  /** Fired or dropped: timer id → the event that closed it. */
  const closed = new Map<string, Event>();
  let fired = 0;
  for (const e of run) {
    if (e.type === "TimerStarted") {
      pending.set(e.timer_id, e);
      closed.delete(e.timer_id);
    } else if (e.type === "StepCancelled") {
      for (const [tid, t] of pending) {
        if (t.step === e.step) {
          pending.delete(tid);
          closed.set(tid, e);
        }
      }
    } else if (e.type === "TimerFired") {
      fired++;
      const where = `run ${runId} seq ${e.seq} TimerFired ${e.timer_id}`;
      const t = pending.get(e.timer_id);
      if (!t) {
        const c = closed.get(e.timer_id);
        add(
          "timer-fire",
          id,
          c
            ? `${where}: the timer was already ${
              c.type === "TimerFired" ? "fired" : "dropped"
            } at seq ${c.seq} (${c.type})`
            : `${where}: no TimerStarted of that id before it in the run`,
          e.time_ms,
        );
        continue;
      }
      if (e.time_ms < t.fire_at_ms) {
        add(
          "timer-fire",
          id,
          `${where} at ${new Date(e.time_ms).toISOString()}, ${
            t.fire_at_ms - e.time_ms
          } ms before the fire_at_ms ${
            new Date(t.fire_at_ms).toISOString()
          } its TimerStarted seq ${t.seq} recorded`,
          e.time_ms,
        );
      }
      if (e.step !== undefined && t.step !== undefined && e.step !== t.step) {
        add(
          "timer-fire",
          id,
          `${where}: names step ${e.step}, its TimerStarted seq ${t.seq} step ${t.step}`,
          e.time_ms,
        );
      }
      pending.delete(e.timer_id);
      closed.set(e.timer_id, e);
    }
  }
  return fired;
}

/** True when the run's last event leaves a `wait_signal` step open. */
function openSignalWait(run: Event[]): boolean {
  const open = new Set<string>();
  for (const e of run) {
    if (e.type === "StepStarted" && e.kind === "wait_signal") open.add(e.step);
    if ((e.type === "StepSucceeded" || e.type === "StepFailed" || e.type === "StepCancelled")) {
      open.delete(e.step);
    }
  }
  return open.size > 0;
}

function checkRun(
  id: string,
  runId: string,
  run: Event[],
  add: (rule: string, execution: string | null, message: string, at?: number | null) => void,
  dispatched: Map<
    string,
    {
      step: string;
      attempt: number;
      redelivery: boolean;
      key: string | null;
      uncertainBefore: boolean;
    }
  >,
): void {
  const where = (e: Event) =>
    `run ${runId} seq ${e.seq} ${e.type}${e.step ? ` step ${e.step} attempt ${e.attempt}` : ""}`;
  run.forEach((e, i) => {
    if (e.seq !== i + 1) {
      add("seq-contiguous", id, `run ${runId}: seq ${e.seq} at position ${i + 1}`, e.time_ms);
    }
  });
  const steps = new Map<string, StepTrack>();
  let terminalAt: number | null = null;
  const compensations: Event[] = [];
  for (const e of run) {
    if (terminalAt !== null) {
      add(
        "after-terminal",
        id,
        `${where(e)} after the terminal event seq ${terminalAt}`,
        e.time_ms,
      );
    }
    if (TERMINAL_EVENT.has(e.type)) terminalAt = e.seq;
    if (e.type === "CompensationStarted") compensations.push(e);
    if (typeof e.step !== "string" || e.type === "TimerFired" || e.type === "TimerStarted") {
      continue;
    }
    const st = steps.get(e.step);
    const bad = (msg: string) => add("event-order", id, `${where(e)}: ${msg}`, e.time_ms);
    switch (e.type) {
      case "StepScheduled": {
        if (st && !(st.status === "backoff" && e.attempt === st.attempt + 1)) {
          bad(`scheduled again while the step is ${st.status} at attempt ${st.attempt}`);
        } else if (!st && e.attempt !== 1) {
          bad("first schedule of the step is not attempt 1");
        }
        if (st && st.key !== e.idempotency_key) {
          bad(`idempotency key changed from ${st.key} to ${e.idempotency_key}`);
        }
        steps.set(e.step, {
          kind: e.kind === "http" ? "http" : "task",
          attempt: e.attempt,
          key: e.idempotency_key,
          status: "scheduled",
          uncertain: false,
          tokens: st?.tokens ?? new Map(),
          succeeded: st?.succeeded ?? 0,
          succeededSeq: st?.succeededSeq ?? null,
        });
        break;
      }
      case "StepStarted":
        if (st) bad(`started while the step is ${st.status}`);
        steps.set(e.step, {
          kind: "started",
          attempt: e.attempt,
          key: null,
          status: "open",
          uncertain: false,
          tokens: new Map(),
          succeeded: 0,
          succeededSeq: null,
        });
        break;
      case "StepDispatched": {
        if (!st || st.kind === "started") {
          bad("dispatched without a schedule");
          break;
        }
        if (st.status !== "scheduled") bad(`dispatched while ${st.status}`);
        if (st.attempt !== e.attempt) {
          bad(`dispatched attempt ${e.attempt}, scheduled ${st.attempt}`);
        }
        if (st.tokens.has(e.token) || dispatched.has(e.token)) {
          bad(`token ${e.token} dispatched twice`);
        }
        if ((e.redelivery === true) !== st.uncertain) {
          bad(
            `redelivery ${e.redelivery === true} but an uncertain attempt before: ${st.uncertain}`,
          );
        }
        st.tokens.set(e.token, {
          uncertain: false,
          redelivery: e.redelivery === true,
          attempt: e.attempt,
        });
        dispatched.set(e.token, {
          step: e.step,
          attempt: e.attempt,
          redelivery: e.redelivery === true,
          key: st.key,
          uncertainBefore: st.uncertain,
        });
        st.status = "dispatched";
        break;
      }
      case "StepAttemptUncertain": {
        const t = st?.tokens.get(e.token);
        if (!st || !t) {
          bad(`uncertain for a token never dispatched (${e.token})`);
          break;
        }
        if (st.status !== "dispatched") bad(`uncertain while ${st.status}`);
        if (t.uncertain) bad(`token ${e.token} reported uncertain twice`);
        if (t.attempt !== e.attempt || st.attempt !== e.attempt) {
          bad("uncertain for another attempt");
        }
        t.uncertain = true;
        st.uncertain = true;
        st.status = "scheduled";
        break;
      }
      case "StepSucceeded":
      case "StepFailed": {
        if (!st) {
          // A step that runs in the engine alone (assign, return) may finish without a start.
          if (e.type === "StepSucceeded") {
            steps.set(e.step, {
              kind: "started",
              attempt: e.attempt,
              key: null,
              status: "succeeded",
              uncertain: false,
              tokens: new Map(),
              succeeded: 1,
              succeededSeq: e.seq,
            });
          }
          break;
        }
        const open = st.status === "scheduled" || st.status === "dispatched" ||
          st.status === "open";
        if (!open) bad(`a result while the step is ${st.status} (a result applied twice?)`);
        if (st.attempt !== e.attempt) bad(`result for attempt ${e.attempt}, current ${st.attempt}`);
        if (e.token) {
          const t = st.tokens.get(e.token);
          if (!t) bad(`result by token ${e.token}, never dispatched for this step`);
          else if (t.attempt !== e.attempt) bad(`result by a token of attempt ${t.attempt}`);
        }
        if (e.type === "StepSucceeded") {
          st.succeeded++;
          st.succeededSeq = e.seq;
          if (st.succeeded > 1) {
            add(
              "one-success",
              id,
              `${where(e)}: StepSucceeded number ${st.succeeded} for step ${e.step}`,
              e.time_ms,
            );
          }
          st.status = "succeeded";
        } else {
          st.status = e.will_retry ? "backoff" : "failed";
        }
        st.uncertain = false;
        break;
      }
      case "StepCancelled":
        if (st) st.status = "cancelled";
        break;
    }
  }
  // Compensations: only completed steps, in reverse order of completion.
  for (const c of compensations) {
    // The event names the compensation steps (`<step>.compensate`).
    const listed: string[] = (c.steps ?? []).map((s: string) =>
      s.endsWith(".compensate") ? s.slice(0, -".compensate".length) : s
    );
    for (const s of listed) {
      const st = steps.get(s);
      if (!st || st.succeededSeq === null || st.succeededSeq > c.seq) {
        add(
          "compensation",
          id,
          `run ${runId}: CompensationStarted seq ${c.seq} lists ${s}, which had not completed`,
          c.time_ms,
        );
      }
    }
    const expected = listed.filter((s) => steps.get(s)?.succeededSeq != null)
      .sort((a, b) => steps.get(b)!.succeededSeq! - steps.get(a)!.succeededSeq!);
    const scheduled = run.filter((e) =>
      e.type === "StepScheduled" && e.seq > c.seq && e.attempt === 1 &&
      e.step.endsWith(".compensate")
    ).map((e) => e.step.slice(0, -".compensate".length));
    const compensable = expected.filter((s) => scheduled.includes(s));
    if (scheduled.join(",") !== compensable.join(",")) {
      add(
        "compensation",
        id,
        `run ${runId}: compensations scheduled for [${
          scheduled.join(", ")
        }], expected the reverse completion order [${expected.join(", ")}]`,
        c.time_ms,
      );
    }
  }
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
