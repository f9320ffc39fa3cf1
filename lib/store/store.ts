/**
 * The store interface. Two drivers implement it (`sqlite.ts`, `postgres.ts`) and one
 * conformance suite (`store_conformance.ts`) runs against both. The engine shell is the only
 * writer; SQL text lives in `sql/<backend>/`.
 */
import type { ExecutionStatus, HistoryEvent } from "../engine/events.ts";

/** A row of `workflow_executions`, as the API shows it. */
export interface ExecutionRow {
  execution_id: string;
  run_id: string;
  root_id: string;
  parent_id: string | null;
  workflow: string;
  version: string;
  status: ExecutionStatus;
  input: unknown;
  output: unknown | null;
  error: unknown | null;
  created_ms: number;
  closed_ms: number | null;
  updated_ms: number;
  /** Seq of the last event of the current run. */
  last_seq: number;
}

/** A row of `workflow_definitions`. */
export interface DefinitionRow {
  name: string;
  version: string;
  ir: string;
  document: unknown;
  /** sha-256 of the canonical JSON of the document: equal documents have equal hashes. */
  hash: string;
  created_ms: number;
}

/** One execution's part of a commit: its new events and its row after them. */
export interface AppendItem {
  /** The execution row after the events (inserted when `create`, else updated). */
  row: ExecutionRow;
  /** Events in seq order, continuing the run's history without a gap. */
  events: HistoryEvent[];
  /** True when `row` is a new execution (the first append of a run's `WorkflowCreated`). */
  create?: boolean;
  /** Shared mode: the ownership this append needs, and the queue and inbox rows it changes. */
  shared?: SharedAppend;
  /**
   * When the engine must hold the execution in memory again (`wake_at_ms`): 0 while it has
   * work in flight, the time of its next timer, null when only an outside event (a signal, a
   * cancel) moves it or it is closed. Undefined writes 0 (loaded at every start).
   */
  wake_at_ms?: number | null;
  /**
   * True when only the history moved since the execution's previous append: the same run,
   * status, input, error and `wake_at_ms`, not closed. A store may then leave the row as it is
   * if its reads still answer `last_seq` and `updated_ms` as of these events (SQLite reads them
   * from the run's newest event, and such a commit writes no page of the row or its indexes).
   */
  steady?: boolean;
}

/** A running execution whose next timer comes due (`listWaking`). */
export interface WakingRow {
  execution_id: string;
  wake_at_ms: number;
}

/** A queued task row of shared mode (`orbit_tasks`), written with its StepScheduled. */
export interface TaskRow {
  execution_id: string;
  run_id: string;
  step: string;
  attempt: number;
  /** One queue episode of the step: `<run>/<step>/<attempt>/<dispatches so far>`. */
  unit: string;
  task_name: string;
  contract_version: string;
  language: string | null;
  enqueued_ms: number;
  /**
   * Everything of the task payload (SPEC §4) but the token; null for a row written claimed
   * whose task went out from this server's memory (sharedChanges: `claimedPayload`).
   */
  payload: Record<string, unknown> | null;
  /** Dispatched in the same append (eager dispatch): the row is written claimed. */
  claimed?: { token: string; session_id: string; node_id: string } | null;
}

/**
 * What a shared-mode append changes besides the history (sql/postgres/shared/commit.ts,
 * COMMIT_OWNED). The append is written only while `orbit_owners` names `node_id` at `epoch`
 * for the execution (a create inserts that row).
 */
export interface SharedAppend {
  node_id: string;
  epoch: number;
  /** A create's: the process creating it (its ownership row's `instance`). */
  instance?: string;
  enqueue: TaskRow[];
  /** Units no longer queued (their queued row goes; a claimed one is cancelled). */
  gone: string[];
  /** Attempts the owner no longer needs: their claimed rows are marked cancelled. */
  cancel: string[];
  /** Attempts whose result is recorded: their rows go. */
  done: string[];
  /** Inbox entries applied by this append. */
  inbox: number[];
  /**
   * Dispatches of units that were queued: the row is claimed with the token in this commit
   * unless it already carries it (a claim statement took it); when another token has it, or a
   * row of the same task waits more than `head_ms` longer, the append is refused
   * (TaskTakenError) and nothing of it is written.
   */
  take: TaskTake[];
}

/** A dispatch of a queued unit (SharedAppend.take). */
export interface TaskTake {
  unit: string;
  token: string;
  session_id: string;
  claimed_by: string;
  claimed_ms: number;
  head_ms: number;
}

/**
 * What a commit did with items it did not write: in shared mode an execution owned elsewhere
 * (or at another epoch) is fenced while the rest of the batch commits.
 */
export interface CommitResult {
  fenced?: Map<string, FencedError>;
  /**
   * Appends refused alone, nothing of them written (shared mode): a queued task another server
   * claimed first, or an inbox entry gone.
   */
  lost?: Map<string, TaskTakenError | InboxGoneError>;
}

export interface ListExecutionsQuery {
  workflow?: string;
  status?: ExecutionStatus;
  limit: number;
  /** Opaque cursor from a previous page (`next_cursor`). */
  cursor?: string;
}

export interface ExecutionPage {
  executions: ExecutionRow[];
  next_cursor: string | null;
}

/** Raised by `commit` when the fence of a clustered store rejects the append. */
export class FencedError extends Error {
  override name = "FencedError";
  /** Shared mode: the node the execution's ownership row names (null: none), when known. */
  ownerNode?: string | null;
}

/**
 * Shared mode: an append that dispatched a queued task was not written, because the task's
 * row had been claimed by another server (or an older row of the same task waits and the
 * claim statement decides). Nothing of the append was written; memory stays as it was.
 */
export class TaskTakenError extends Error {
  override name = "TaskTakenError";
}

/**
 * Shared mode: an append that applied inbox entries was not written, because one of its
 * entries was gone: withdrawn by the server that forwarded it (it waited 10 s for the reply,
 * then answered that nothing was applied), or deleted by an earlier commit of the same entry
 * that reported an error but landed. Nothing of the append was written; memory stays as it was.
 */
export class InboxGoneError extends Error {
  override name = "InboxGoneError";
}

/** The FencedError of a child's create whose parent this node no longer owns (shared mode). */
export function childFencedError(
  executionId: string,
  parentId: string,
  owner: { node_id: string | null; epoch: number | null },
  held: number,
): FencedError {
  const by = owner.node_id === null
    ? "is owned by no node"
    : `is owned by node \`${owner.node_id}\` at epoch ${owner.epoch}`;
  return new FencedError(
    `fenced: child execution \`${executionId}\` not created: its parent \`${parentId}\` ${by}; this node held epoch ${held}`,
  );
}

/** The FencedError of an append to an execution this node no longer owns (shared mode). */
export function ownerFencedError(
  executionId: string,
  owner: { node_id: string | null; epoch: number | null },
  held: number,
): FencedError {
  const e = new FencedError(
    owner.node_id === null
      ? `fenced: execution \`${executionId}\` is owned by no node; this node held epoch ${held}`
      : `fenced: execution \`${executionId}\` is owned by node \`${owner.node_id}\` at epoch ${owner.epoch}; this node held epoch ${held}`,
  );
  e.ownerNode = owner.node_id;
  return e;
}

/** The FencedError of a write refused because the cluster moved past the caller's term. */
export function termFencedError(held: number, current: number | null): FencedError {
  return new FencedError(
    `fenced: this server led term ${held}, but the cluster is at term ${current}; ` +
      "another server is the leader",
  );
}

/**
 * A row of `orbit_schedules`. `spec` is the schedule's definition as `lib/schedules/schedules.ts` writes
 * it (everything of the SPEC §6 object but `schedule_id` and `paused`, which are columns).
 * Who moves what: the schedule service writes spec, workflow and paused (and next_fire_ms when
 * the timing changes); the scheduler writes claims, counts, buffered_ms, last_fired_ms and
 * advances next_fire_ms.
 */
export interface ScheduleRow {
  schedule_id: string;
  spec: Record<string, unknown>;
  workflow: string;
  paused: boolean;
  /** The next occurrence to handle; null when the schedule has none (a cron without future). */
  next_fire_ms: number | null;
  /** buffer_one: the occurrence waiting for the running one to end. */
  buffered_ms: number | null;
  /** The occurrence of the latest start. */
  last_fired_ms: number | null;
  fired: number;
  skipped: number;
  claimed_by: string | null;
  claimed_until_ms: number | null;
  created_ms: number;
  updated_ms: number;
}

/**
 * The fence of a scheduler write, for the cluster modes: the term this server leads. The write
 * happens only while the cluster is at that term, checked in the same statement; otherwise the
 * store throws FencedError. Undefined: the store's own fence (PostgreSQL's `fence` option), or
 * none; null: no fence (a single server).
 */
export interface ScheduleFence {
  term?: number | null;
}

/** A changed schedule definition (PATCH, pause, resume). */
export interface ScheduleUpdate {
  spec: Record<string, unknown>;
  workflow: string;
  paused: boolean;
  /** The new next occurrence; undefined keeps the stored one (the scheduler may be moving it). */
  next_fire_ms?: number | null;
  now: number;
}

/** The claim of a schedule's due work: a compare-and-set on the next_fire_ms read. */
export interface ScheduleClaim extends ScheduleFence {
  schedule_id: string;
  next_fire_ms: number | null;
  owner: string;
  until_ms: number;
  now: number;
}

/**
 * The renewal of a claim by its owner during its pass (before each start): a compare-and-set on
 * (schedule_id, claimed_by, the next_fire_ms the claim was taken at) that extends the lease.
 */
export interface ScheduleRenewal extends ScheduleFence {
  schedule_id: string;
  owner: string;
  /** The next_fire_ms the claim was taken at. */
  claimed_next_fire_ms: number | null;
  until_ms: number;
}

/** What the claim's owner did with it; releases the claim. */
export interface ScheduleAdvance extends ScheduleFence {
  schedule_id: string;
  owner: string;
  /** The next_fire_ms the claim was taken at; a PATCH that moved it since wins. */
  claimed_next_fire_ms: number | null;
  next_fire_ms: number | null;
  buffered_ms: number | null;
  /** Null keeps the stored value. */
  last_fired_ms: number | null;
  fired: number;
  skipped: number;
}

/** Counts added outside a claim (a trigger). */
export interface ScheduleCount extends ScheduleFence {
  fired: number;
  skipped: number;
  /** Null keeps the stored value. */
  last_fired_ms: number | null;
}

/** Raised by `commit` when a `create` item's execution id already exists. */
export class DuplicateExecutionError extends Error {
  override name = "DuplicateExecutionError";
  constructor(readonly executionId: string) {
    super(`execution ${executionId} already exists`);
  }
}

export interface Store {
  /** "sqlite" or "postgres". */
  readonly kind: "sqlite" | "postgres";
  /** Applies the versioned migrations under `sql/<backend>/` (idempotent, concurrent-safe). */
  migrate(): Promise<void>;
  close(): Promise<void>;

  /** Inserts a definition unless one with this name and version exists; returns the stored one. */
  putDefinition(def: DefinitionRow): Promise<{ created: boolean; stored: DefinitionRow }>;
  getDefinition(name: string, version: string): Promise<DefinitionRow | null>;
  /** All versions of one workflow (or of every workflow), ordered by name, then created_ms. */
  listDefinitions(name?: string): Promise<DefinitionRow[]>;

  /**
   * Commits the items of several executions in one transaction: all or nothing. Events are
   * inserted into `execution_events`, rows upserted into `workflow_executions`.
   * Throws DuplicateExecutionError if a `create` item's id exists (nothing is written then).
   */
  commit(items: AppendItem[]): Promise<CommitResult | void>;

  getExecution(executionId: string): Promise<ExecutionRow | null>;
  listExecutions(q: ListExecutionsQuery): Promise<ExecutionPage>;
  /** Events of one run with seq > afterSeq, at most `limit`, in seq order. */
  readHistory(runId: string, afterSeq: number, limit: number): Promise<HistoryEvent[]>;
  /** Every execution whose status is `running`, with its whole current-run history (recovery). */
  loadRunning(): Promise<Array<{ row: ExecutionRow; events: HistoryEvent[] }>>;
  /**
   * Running executions to load at start-up, with their current-run histories: those with
   * work in flight (`wake_at_ms` 0) or a timer due at or before `beforeMs`. Those with a null
   * `wake_at_ms` (waiting for an outside event) or a later timer are left to load on demand.
   */
  loadRunningDue(beforeMs: number): Promise<Array<{ row: ExecutionRow; events: HistoryEvent[] }>>;
  /**
   * Running executions with a timer (`wake_at_ms` > 0) due at or before `beforeMs`, in
   * (wake_at_ms, execution_id) order after the keyset `after`, at most `limit`.
   */
  listWaking(beforeMs: number, after: WakingRow | null, limit: number): Promise<WakingRow[]>;
  /** Number of executions with status `running`. */
  countRunning(): Promise<number>;

  /** Inserts a schedule; false (nothing written) when its id exists. */
  createSchedule(row: ScheduleRow): Promise<boolean>;
  getSchedule(scheduleId: string): Promise<ScheduleRow | null>;
  /** Every schedule, by id. */
  listSchedules(): Promise<ScheduleRow[]>;
  /** Writes a changed definition; answers the row after it, or null for an unknown id. */
  updateSchedule(scheduleId: string, update: ScheduleUpdate): Promise<ScheduleRow | null>;
  deleteSchedule(scheduleId: string): Promise<boolean>;
  /**
   * Schedules with work at `now` (an occurrence due, or a buffered one), not paused, not
   * claimed by another owner while the claim lives; earliest first, at most `limit`.
   */
  dueSchedules(now: number, owner: string, limit: number): Promise<ScheduleRow[]>;
  /** The earliest next_fire_ms of the schedules that are not paused. */
  nextScheduleFireMs(): Promise<number | null>;
  /** The first compare-and-set: true when this owner now holds the claim. */
  claimSchedule(claim: ScheduleClaim): Promise<boolean>;
  /**
   * Before each start of a pass: true when this owner still holds the claim taken at
   * `claimed_next_fire_ms` (nobody took it, no advance or PATCH moved the row, no new leader
   * dropped it); its lease then ends at `until_ms`. False writes nothing.
   */
  renewScheduleClaim(renewal: ScheduleRenewal): Promise<boolean>;
  /** The second compare-and-set: true when the owner still held the claim and wrote. */
  advanceSchedule(advance: ScheduleAdvance): Promise<boolean>;
  /** Adds to a schedule's counts; false for an unknown id. */
  countSchedule(scheduleId: string, count: ScheduleCount): Promise<boolean>;
  /** Drops every claim (a new leader's first act); answers how many there were. */
  dropScheduleClaims(): Promise<number>;
  /** Ids of the running executions of a schedule (`<schedule id>@…`), in id order. */
  runningScheduleExecutions(scheduleId: string): Promise<string[]>;
  /**
   * Ids of the executions of any status whose id lies in [`lo`, `hi`] (byte order), in id
   * order, at most `limit`: the occurrences of a schedule that exist between two times.
   */
  executionIdsBetween(lo: string, hi: string, limit: number): Promise<string[]>;
}

/**
 * Raised by `commit` when an event's (run, seq) is in the history already: another append of
 * that run landed first. Nothing of the commit was written. For an append whose first attempt
 * failed with an unknown outcome and is committed again to find out, this is the answer
 * "the first attempt landed": the primary key lets exactly one of the two commit, and this
 * error comes only once the other has committed.
 */
export class HistoryConflictError extends Error {
  override name = "HistoryConflictError";
}

/**
 * Whether a commit that failed with `e` may have been written all the same. A database's own
 * refusal (an SQLSTATE error of PostgreSQL, SQLITE_BUSY or a constraint of SQLite) rolled the
 * transaction back: nothing was written. A lost connection (postgres.js's CONNECTION_*, a socket
 * error, PostgreSQL's connection and shutdown classes 08 and 57P), a statement abandoned
 * without an answer, SQLite's I/O, full-disk and corruption errors, and anything unknown may
 * have committed, or may still commit: the caller resolves it (Executions.#recommit).
 */
export function mayHaveCommitted(e: unknown): boolean {
  // The store's own refusals: nothing of the commit was written.
  if (
    e instanceof HistoryConflictError || e instanceof DuplicateExecutionError ||
    e instanceof FencedError || e instanceof TaskTakenError || e instanceof InboxGoneError
  ) {
    return false;
  }
  const cause = (e as { cause?: unknown })?.cause;
  const err = ((e as { code?: unknown })?.code === undefined && cause ? cause : e) as {
    code?: unknown;
    errcode?: unknown;
  };
  const code = typeof err?.code === "string" ? err.code : undefined;
  if (code === "ERR_SQLITE_ERROR" && typeof err.errcode === "number") {
    // The primary result code (the low byte): BUSY 5, LOCKED 6, CONSTRAINT 19, … roll back;
    // IOERR 10, CORRUPT 11, FULL 13, and the rest, are not known to.
    return ![5, 6, 19, 20, 1, 18, 25].includes(err.errcode & 0xff);
  }
  // SQLSTATE: five digits or capitals (a socket's errno name, such as EPIPE, is not one).
  if (code !== undefined && /^[0-9A-Z]{5}$/.test(code) && !/^E[A-Z]+$/.test(code)) {
    return code.startsWith("08") || code.startsWith("57P");
  }
  return true;
}

/** Raised by `listExecutions` for a cursor it did not issue (a client error: answer 400). */
export class InvalidCursorError extends Error {
  override name = "InvalidCursorError";
  constructor(readonly cursor: string) {
    super(`Cannot read cursor "${cursor.slice(0, 64)}": pass a next_cursor from a previous page`);
  }
}

/**
 * The listing cursor both drivers issue: the last row's position in (created_ms DESC,
 * execution_id DESC) order, as base64url JSON. Clients treat it as opaque.
 */
export function encodeListCursor(row: Pick<ExecutionRow, "created_ms" | "execution_id">): string {
  const bytes = new TextEncoder().encode(JSON.stringify([row.created_ms, row.execution_id]));
  let bin = "";
  for (const b of bytes) bin += String.fromCharCode(b);
  return btoa(bin).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
}

/** Reads a cursor from `encodeListCursor`; throws InvalidCursorError for anything else. */
export function decodeListCursor(cursor: string): { created_ms: number; execution_id: string } {
  try {
    if (!/^[A-Za-z0-9_-]*$/.test(cursor)) throw new Error("not base64url");
    const bin = atob(cursor.replaceAll("-", "+").replaceAll("_", "/"));
    const bytes = Uint8Array.from(bin, (c) => c.charCodeAt(0));
    const value: unknown = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes));
    if (
      Array.isArray(value) && value.length === 2 && Number.isSafeInteger(value[0]) &&
      // No execution id holds a NUL (PostgreSQL could not even compare it).
      typeof value[1] === "string" && !value[1].includes("\u0000")
    ) {
      return { created_ms: value[0], execution_id: value[1] };
    }
  } catch { /* reported below */ }
  throw new InvalidCursorError(cursor);
}

/** Every event of one run (paged reads). */
export async function readRun(store: Store, runId: string): Promise<HistoryEvent[]> {
  const out: HistoryEvent[] = [];
  for (;;) {
    const page = await store.readHistory(runId, out.at(-1)?.seq ?? 0, 10_000);
    out.push(...page);
    if (page.length < 10_000) return out;
  }
}
