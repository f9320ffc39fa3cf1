/**
 * What the chaos checker (chaos/checker.ts) reads: the run's starts, the workers' attempts, the
 * faults, the schedule, the shared servers' appends, all as `CheckInput`.
 */
import type { Snapshot } from "./history_db.ts";

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
