/**
 * The PostgreSQL store, on postgres.js: a pool of connections, every statement prepared (one
 * round trip per call once a connection has seen it), `bigint` read back as JS numbers and
 * JSON kept as `jsonb`. A commit is ONE autocommit statement whatever the batch size
 * (`COMMIT` in `sql/postgres/queries.ts`).
 *
 * Fencing (several servers on one database): `opts.fence` returns the term this server leads,
 * or null when it runs alone. With a term, the commit statement locks `orbit_cluster` FOR
 * SHARE and writes only while the term is unchanged; otherwise nothing is written and
 * `commit` throws FencedError. A new leader bumps the term with an UPDATE, which waits for
 * every commit holding the share lock, so once its bump commits no old leader's write can land.
 *
 * Failure handling: postgres.js reconnects on its own, with the short backoff below, so after
 * a server restart the next calls work again. A commit that fails with a connection error is
 * ambiguous (it may have committed before the connection broke); see isTransientPostgresError.
 *
 * ```ts
 * import { openPostgresStore } from "./postgres.ts";
 * const store = await openPostgresStore("postgres://postgres@127.0.0.1:5432/orbit");
 * await store.migrate();
 * await store.close();
 * ```
 *
 * Why one file of this size: the store is one interface (`Store`) over one client; its
 * statements live in `sql/postgres/` and what is shared mode's in `sql/postgres/shared/`; what
 * is left here is the driver, whose methods share the client, the fence and the commit path.
 */
import postgres from "postgres";
import type { ExecutionStatus, HistoryEvent } from "../engine/events.ts";
import * as q from "../../sql/postgres/queries.ts";
import {
  COMMIT_OWNED_LISTS,
  commitOwned,
  type CommitOwnedParts,
} from "../../sql/postgres/shared/commit.ts";
import { CREATE_MIGRATIONS_TABLE, MIGRATIONS } from "../../sql/postgres/migrations.ts";
import { log } from "../log.ts";
import { WatchedClient } from "./watched_client.ts";
import {
  type AppendItem,
  childFencedError,
  type CommitResult,
  decodeListCursor,
  type DefinitionRow,
  DuplicateExecutionError,
  encodeListCursor,
  type ExecutionPage,
  type ExecutionRow,
  FencedError,
  HistoryConflictError,
  InboxGoneError,
  type ListExecutionsQuery,
  ownerFencedError,
  type ScheduleAdvance,
  type ScheduleClaim,
  type ScheduleCount,
  type ScheduleRenewal,
  type ScheduleRow,
  type ScheduleUpdate,
  type SharedAppend,
  type Store,
  TaskTakenError,
  termFencedError,
  type WakingRow,
} from "./store.ts";

export interface PostgresStoreOptions {
  /** The term this server leads, checked by every commit; null (or no fence) for none. */
  fence?: () => number | null;
  /** Pool size (default 10). */
  max?: number;
  /** `application_name` of the connections (default "orbit"). */
  applicationName?: string;
  /** Run-time parameters set on every connection (`SET` at its start). */
  settings?: Record<string, string>;
  /**
   * Shared mode: told after an owned commit what to announce (rows queued, executions
   * closed); the caller sends the notifications outside the commit.
   */
  afterCommit?: (info: { queued: number; closed: string[] }) => void;
  /** The clock, for `applied_ms` of migrations (default Date.now). */
  now?: () => number;
  /** After how long without an answer the client is replaced (default STATEMENT_STUCK_MS, 30 s). */
  stuckMs?: number;
}

/** A row of `workflow_executions` as postgres.js returns it (jsonb parsed, bigint as number). */
interface WorkflowExecutionsRecord extends Omit<ExecutionRow, "status"> {
  status: string;
}

/** A row of `workflow_definitions` as postgres.js returns it. */
type WorkflowDefinitionsRecord = DefinitionRow;

/** One element of the commit's `$1`: an execution row and whether it is inserted. */
interface CommitRowParam extends ExecutionRow {
  is_create: boolean;
  /** AppendItem.wake_at_ms (undefined written as 0). */
  wake_at_ms: number | null;
  owner_node?: string;
  owner_epoch?: number;
  /** A create's process (its ownership row's instance). */
  owner_instance?: string;
  /** Every item of this execution in the batch is steady: its row is not written. */
  steady?: boolean;
}

/** One element of the commit's `$2`. */
interface CommitEventParam {
  run_id: string;
  execution_id: string;
  data: HistoryEvent;
}

const FIRST_PAGE = { created_ms: Number.MAX_SAFE_INTEGER, execution_id: "" };

/** Connection-level errors after which a new attempt may work (postgres.js and server codes). */
const TRANSIENT_CODES = new Set([
  "CONNECTION_CLOSED",
  "CONNECTION_ENDED",
  "CONNECTION_DESTROYED",
  "CONNECT_TIMEOUT",
  "ECONNREFUSED",
  "ECONNRESET",
  "EPIPE",
  "57P01", // admin_shutdown
  "57P02", // crash_shutdown
  "57P03", // cannot_connect_now (starting up, shutting down)
  "53300", // too_many_connections
  "40001", // serialization_failure
  "40P01", // deadlock_detected
]);

/**
 * The one place that decides which database errors are worth retrying. A commit that failed
 * this way may still have committed: a retry then fails on the events' primary key, which
 * the caller must treat as "already written" after re-reading the execution.
 */
export function isTransientPostgresError(error: unknown): boolean {
  const code = (error as { code?: unknown })?.code;
  return typeof code === "string" && (TRANSIENT_CODES.has(code) || code.startsWith("08"));
}

/**
 * Builds the commit parameters. Several items of one execution become one row (the last
 * one's, inserted if the first was a create): two CTEs of one statement must not write the
 * same row. A create after another item of the same id in the batch is a duplicate, as it
 * would be one statement later.
 */
function commitParams(items: AppendItem[]): { rows: CommitRowParam[]; events: CommitEventParam[] } {
  const rows = new Map<string, CommitRowParam>();
  const events: CommitEventParam[] = [];
  for (const item of items) {
    const id = item.row.execution_id;
    const prev = rows.get(id);
    if (prev && item.create) throw new DuplicateExecutionError(id);
    const row: CommitRowParam = {
      ...item.row,
      is_create: prev ? prev.is_create : item.create === true,
      wake_at_ms: item.wake_at_ms === undefined ? 0 : item.wake_at_ms,
    };
    if (item.steady && !item.create && (!prev || prev.steady)) {
      // Not written (single server: left out; owned commit: read for its owner check only), so
      // its JSON columns stay out of the parameter: less to encode here and to parse there.
      row.steady = true;
      row.input = null;
      row.output = null;
      row.error = null;
    }
    if (item.shared) {
      row.owner_node = item.shared.node_id;
      row.owner_epoch = item.shared.epoch;
      if (row.is_create && item.shared.instance !== undefined) {
        row.owner_instance = item.shared.instance;
      }
    }
    rows.set(id, row);
    for (const data of item.events) {
      events.push({ run_id: item.row.run_id, execution_id: id, data });
    }
  }
  return { rows: [...rows.values()], events };
}

/** A status after which the execution moves no more (`continued` hands over to a next run). */
const isClosed = (status: string) => status !== "running" && status !== "continued";

/**
 * The owned commit of a batch: the statement for the parts it uses (commitOwned) and its
 * parameters, the rows, the events and then the queue and inbox lists that are not empty, each
 * entry tagged with its execution.
 */
function ownedCommit(
  items: AppendItem[],
  rows: CommitRowParam[],
  events: CommitEventParam[],
): { text: string; params: unknown[] } {
  const enqueue: unknown[] = [];
  const gone: unknown[] = [];
  const cancel: unknown[] = [];
  const done: unknown[] = [];
  const inbox: unknown[] = [];
  const take: unknown[] = [];
  const taking = new Set<string>();
  for (const item of items) {
    const sh: SharedAppend | undefined = item.shared;
    if (!sh) continue;
    const execution_id = item.row.execution_id;
    enqueue.push(...sh.enqueue);
    for (const unit of sh.gone) gone.push({ execution_id, unit });
    for (const token of sh.cancel) cancel.push({ execution_id, token });
    for (const token of sh.done) done.push({ execution_id, token });
    for (const seq of sh.inbox) inbox.push({ execution_id, seq });
    for (const t of sh.take) {
      // A lost take drops its execution's whole part of the statement, so one execution's takes
      // must win or lose together: two in one statement could split (one row claimed, its
      // dispatch not written). Appends of one execution are serialized, so this does not
      // happen; should it, the committer commits the items one by one.
      if (taking.has(execution_id)) {
        throw new Error(`two task takes of execution ${execution_id} in one commit`);
      }
      taking.add(execution_id);
      take.push({ execution_id, ...t });
    }
  }
  const lists = { enqueue, gone, cancel, done, inbox, take };
  const parts = {
    create: rows.some((r) => r.is_create),
    child: rows.some((r) => r.is_create && r.parent_id !== null),
    update: rows.some((r) => !r.is_create),
    close: rows.some((r) => !r.is_create && isClosed(r.status)),
  } as CommitOwnedParts;
  const params: unknown[] = [rows, events];
  for (const l of COMMIT_OWNED_LISTS) {
    parts[l] = lists[l].length > 0;
    if (parts[l]) params.push(lists[l]);
  }
  return { text: commitOwned(parts), params };
}

/**
 * Shared mode, debug level: one line per run an owned commit wrote (after the statement answered,
 * never for a fenced item), naming the node, the epoch it held and the seqs it appended. The
 * chaos checker reads them: one (execution, epoch) has one writer, and epochs only grow along a
 * run's seqs.
 */
function logAppends(rows: CommitRowParam[], events: CommitEventParam[], fenced: Set<string>) {
  const runs = new Map<string, { row: CommitRowParam; run_id: string; from: number; to: number }>();
  for (const { execution_id, run_id, data: { seq } } of events) {
    if (fenced.has(execution_id)) continue;
    const r = runs.get(run_id);
    if (r) {
      r.from = Math.min(r.from, seq);
      r.to = Math.max(r.to, seq);
      continue;
    }
    const row = rows.find((x) => x.execution_id === execution_id);
    if (row?.owner_node !== undefined) runs.set(run_id, { row, run_id, from: seq, to: seq });
  }
  for (const { row, run_id, from, to } of runs.values()) {
    log.shared.debug("shared: appended", {
      node_id: row.owner_node,
      execution_id: row.execution_id,
      run_id,
      epoch: row.owner_epoch,
      from_seq: from,
      to_seq: to,
    });
  }
}

/** Turns the commit statement's constraint errors into the store's errors. */
function commitError(e: unknown, rows: CommitRowParam[]): unknown {
  const pg = e as { code?: string; constraint_name?: string; detail?: string };
  if (pg.code === "22P05") {
    // jsonb has no representation for U+0000 in a string (SQLite's TEXT has).
    return new Error(
      "Cannot commit: a value contains the character U+0000 (\\u0000), which PostgreSQL jsonb " +
        "cannot store; remove it from the input or output",
      { cause: e },
    );
  }
  if (pg.code !== "23505") return e;
  if (
    pg.constraint_name === "workflow_executions_pkey" || pg.constraint_name === "orbit_owners_pkey"
  ) {
    const id = /\(execution_id\)=\((.*)\) already exists/.exec(pg.detail ?? "")?.[1] ??
      rows.find((r) => r.is_create)?.execution_id ?? "?";
    return new DuplicateExecutionError(id);
  }
  if (pg.constraint_name === "execution_events_pkey") {
    return new HistoryConflictError(
      `Cannot commit: an event with this run and seq exists already (${pg.detail}); ` +
        "another writer appended to the run",
      { cause: e },
    );
  }
  return e;
}

function toExecutionRow(r: WorkflowExecutionsRecord): ExecutionRow {
  return {
    execution_id: r.execution_id,
    run_id: r.run_id,
    root_id: r.root_id,
    parent_id: r.parent_id,
    workflow: r.workflow,
    version: r.version,
    status: r.status as ExecutionStatus,
    input: r.input,
    output: r.output,
    error: r.error,
    created_ms: r.created_ms,
    closed_ms: r.closed_ms,
    updated_ms: r.updated_ms,
    last_seq: r.last_seq,
  };
}

function toDefinitionRow(r: WorkflowDefinitionsRecord): DefinitionRow {
  return {
    name: r.name,
    version: r.version,
    ir: r.ir,
    document: r.document,
    hash: r.hash,
    created_ms: r.created_ms,
  };
}

/** A row of `orbit_schedules` as a plain object (postgres.js types jsonb, boolean and bigint). */
const toScheduleRow = (r: ScheduleRow): ScheduleRow => ({ ...r });

class PostgresStore implements Store {
  readonly kind = "postgres" as const;
  readonly #db: WatchedClient;
  readonly #fence: () => number | null;
  readonly #now: () => number;
  readonly #afterCommit: PostgresStoreOptions["afterCommit"];

  constructor(sql: postgres.Sql, make: () => postgres.Sql, opts: PostgresStoreOptions) {
    // A statement that never gets an answer fails after opts.stuckMs and the client is replaced.
    this.#db = new WatchedClient(make, { what: "the store's", stuckMs: opts.stuckMs }, sql);
    this.#afterCommit = opts.afterCommit;
    this.#fence = opts.fence ?? (() => null);
    this.#now = opts.now ?? Date.now;
  }

  /** Runs a named statement from `sql/postgres/queries.ts` as a prepared statement. */
  #query<T>(text: string, params: unknown[] = []): Promise<T[]> {
    return this.#db.unsafe<T>(text, params, { prepare: true });
  }

  async migrate(): Promise<void> {
    await this.#db.client.begin(async (tx) => {
      // First, before even the migrations table exists: concurrent CREATE TABLE IF NOT
      // EXISTS can fail on the catalog's unique index, and the lock orders everything.
      await tx.unsafe(q.LOCK_MIGRATIONS);
      await tx.unsafe(CREATE_MIGRATIONS_TABLE);
      const applied = new Set(
        (await tx.unsafe(q.SELECT_APPLIED_MIGRATIONS)).map((r) => Number(r.version)),
      );
      for (const m of MIGRATIONS) {
        if (applied.has(m.version)) continue;
        await tx.unsafe(m.sql); // no parameters: the simple protocol, several statements
        await tx.unsafe(q.INSERT_MIGRATION, [m.version, this.#now()]);
      }
    });
  }

  async close(): Promise<void> {
    await this.#db.end({ timeout: 5 });
  }

  async putDefinition(def: DefinitionRow): Promise<{ created: boolean; stored: DefinitionRow }> {
    const [row] = await this.#query<WorkflowDefinitionsRecord & { created: boolean }>(
      q.PUT_DEFINITION,
      [def.name, def.version, def.ir, def.document, def.hash, def.created_ms],
    );
    if (row) return { created: row.created, stored: toDefinitionRow(row) };
    // A concurrent insert of the same key won after this statement's snapshot was taken.
    const stored = await this.getDefinition(def.name, def.version);
    if (!stored) throw new Error(`Cannot read definition ${def.name}@${def.version} back`);
    return { created: false, stored };
  }

  async getDefinition(name: string, version: string): Promise<DefinitionRow | null> {
    const [r] = await this.#query<WorkflowDefinitionsRecord>(q.GET_DEFINITION, [name, version]);
    return r ? toDefinitionRow(r) : null;
  }

  async listDefinitions(name?: string): Promise<DefinitionRow[]> {
    const rows = name === undefined
      ? await this.#query<WorkflowDefinitionsRecord>(q.LIST_DEFINITIONS)
      : await this.#query<WorkflowDefinitionsRecord>(q.LIST_DEFINITIONS_BY_NAME, [name]);
    return rows.map(toDefinitionRow);
  }

  async commit(items: AppendItem[]): Promise<CommitResult | void> {
    if (items.length === 0) return;
    const { rows, events } = commitParams(items);
    if (items.some((i) => i.shared)) return await this.#commitOwned(items, rows, events);
    const term = this.#fence();
    // Rows of executions whose appends only moved the history stay as they are (the reads
    // answer last_seq and updated_ms from the newest event): no new row version, no WAL for it.
    // (The owned commit gets them for its ownership check and skips them in its update.)
    const written = rows.filter((r) => !r.steady);
    let result: { term?: number | null }[];
    try {
      result = term === null
        ? await this.#query(q.COMMIT, [written, events])
        : await this.#query(q.COMMIT_FENCED, [written, events, term]);
    } catch (e) {
      throw commitError(e, rows);
    }
    if (term !== null) {
      const current = result[0]?.term ?? null;
      if (current !== term) {
        throw new FencedError(
          `fenced: this server led term ${term}, but the cluster is at term ${current}; ` +
            "another server is the leader",
        );
      }
    }
  }

  /** Shared mode: one statement that checks every execution's owner (commitOwned). */
  async #commitOwned(
    items: AppendItem[],
    rows: CommitRowParam[],
    events: CommitEventParam[],
  ): Promise<CommitResult> {
    let result: {
      fenced: Array<{
        execution_id: string;
        node_id: string | null;
        epoch: number | null;
        parent_id: string | null;
      }>;
      queued: number;
      lost: string[];
      withdrawn: string[];
    }[];
    try {
      const { text, params } = ownedCommit(items, rows, events);
      result = await this.#query(text, params);
    } catch (e) {
      throw commitError(e, rows);
    }
    const r = result[0];
    const fenced = new Map<string, FencedError>();
    for (const f of result[0]?.fenced ?? []) {
      const held = rows.find((r) => r.execution_id === f.execution_id)?.owner_epoch ?? 0;
      fenced.set(
        f.execution_id,
        f.parent_id === null
          ? ownerFencedError(f.execution_id, f, held)
          : childFencedError(f.execution_id, f.parent_id, f, held),
      );
    }
    const lost = new Map<string, TaskTakenError | InboxGoneError>();
    for (const id of result[0]?.withdrawn ?? []) {
      lost.set(
        id,
        new InboxGoneError(
          `execution \`${id}\`: an inbox entry it applied is gone (withdrawn, or applied already)`,
        ),
      );
    }
    for (const id of result[0]?.lost ?? []) {
      if (lost.has(id)) continue;
      lost.set(
        id,
        new TaskTakenError(
          `execution \`${id}\`: its queued task was claimed by another server, or an older one waits`,
        ),
      );
    }
    const closed = rows
      .filter((x) => isClosed(x.status) && !fenced.has(x.execution_id) && !lost.has(x.execution_id))
      .map((x) => x.execution_id);
    if (r && (Number(r.queued) > 0 || closed.length > 0)) {
      this.#afterCommit?.({ queued: Number(r.queued), closed });
    }
    if (log.shared.isEnabledFor("debug")) {
      logAppends(rows, events, new Set([...fenced.keys(), ...lost.keys()]));
    }
    return { fenced, lost };
  }

  async getExecution(executionId: string): Promise<ExecutionRow | null> {
    const [r] = await this.#query<WorkflowExecutionsRecord>(q.GET_EXECUTION, [executionId]);
    return r ? toExecutionRow(r) : null;
  }

  async listExecutions(query: ListExecutionsQuery): Promise<ExecutionPage> {
    const after = query.cursor ? decodeListCursor(query.cursor) : FIRST_PAGE;
    const limit = Math.max(1, Math.floor(query.limit));
    // One more row than asked tells whether another page exists.
    const params: unknown[] = [after.created_ms, after.execution_id, limit + 1];
    let text = q.LIST_EXECUTIONS;
    if (query.workflow !== undefined && query.status !== undefined) {
      text = q.LIST_EXECUTIONS_BY_WORKFLOW_AND_STATUS;
      params.push(query.workflow, query.status);
    } else if (query.workflow !== undefined) {
      text = q.LIST_EXECUTIONS_BY_WORKFLOW;
      params.push(query.workflow);
    } else if (query.status !== undefined) {
      text = q.LIST_EXECUTIONS_BY_STATUS;
      params.push(query.status);
    }
    const rows = (await this.#query<WorkflowExecutionsRecord>(text, params)).map(toExecutionRow);
    const executions = rows.slice(0, limit);
    const last = executions[executions.length - 1];
    return {
      executions,
      next_cursor: rows.length > limit && last ? encodeListCursor(last) : null,
    };
  }

  async readHistory(runId: string, afterSeq: number, limit: number): Promise<HistoryEvent[]> {
    const rows = await this.#query<{ data: HistoryEvent }>(q.READ_HISTORY, [
      runId,
      afterSeq,
      Math.max(0, Math.floor(limit)),
    ]);
    return rows.map((r) => r.data);
  }

  async loadRunning(): Promise<Array<{ row: ExecutionRow; events: HistoryEvent[] }>> {
    const rows = await this.#query<WorkflowExecutionsRecord & { events: HistoryEvent[] }>(
      q.LOAD_RUNNING,
    );
    return rows.map((r) => ({ row: toExecutionRow(r), events: r.events }));
  }

  async loadRunningDue(
    beforeMs: number,
  ): Promise<Array<{ row: ExecutionRow; events: HistoryEvent[] }>> {
    const rows = await this.#query<WorkflowExecutionsRecord & { events: HistoryEvent[] }>(
      q.LOAD_RUNNING_DUE,
      [beforeMs],
    );
    return rows.map((r) => ({ row: toExecutionRow(r), events: r.events }));
  }

  async listWaking(beforeMs: number, after: WakingRow | null, limit: number): Promise<WakingRow[]> {
    const rows = await this.#query<{ execution_id: string; wake_at_ms: string | number }>(
      q.LIST_WAKING,
      [beforeMs, after?.wake_at_ms ?? 0, after?.execution_id ?? "", Math.max(1, Math.floor(limit))],
    );
    return rows.map((r) => ({ execution_id: r.execution_id, wake_at_ms: Number(r.wake_at_ms) }));
  }

  async countRunning(): Promise<number> {
    const [r] = await this.#query<{ n: number }>(q.COUNT_RUNNING);
    return r?.n ?? 0;
  }

  async createSchedule(row: ScheduleRow): Promise<boolean> {
    const rows = await this.#query(q.INSERT_SCHEDULE, [
      row.schedule_id,
      row.spec,
      row.workflow,
      row.next_fire_ms,
      row.paused,
      row.fired,
      row.skipped,
      row.claimed_by,
      row.claimed_until_ms,
      row.created_ms,
      row.updated_ms,
      row.buffered_ms,
      row.last_fired_ms,
    ]);
    return rows.length === 1;
  }

  async getSchedule(scheduleId: string): Promise<ScheduleRow | null> {
    const [r] = await this.#query<ScheduleRow>(q.GET_SCHEDULE, [scheduleId]);
    return r ? toScheduleRow(r) : null;
  }

  async listSchedules(): Promise<ScheduleRow[]> {
    return (await this.#query<ScheduleRow>(q.LIST_SCHEDULES)).map(toScheduleRow);
  }

  async updateSchedule(scheduleId: string, u: ScheduleUpdate): Promise<ScheduleRow | null> {
    const [r] = await this.#query<ScheduleRow>(q.UPDATE_SCHEDULE, [
      scheduleId,
      u.spec,
      u.workflow,
      u.paused,
      u.next_fire_ms !== undefined,
      u.next_fire_ms ?? null,
      u.now,
    ]);
    return r ? toScheduleRow(r) : null;
  }

  async deleteSchedule(scheduleId: string): Promise<boolean> {
    return (await this.#query(q.DELETE_SCHEDULE, [scheduleId])).length === 1;
  }

  async dueSchedules(now: number, owner: string, limit: number): Promise<ScheduleRow[]> {
    return (await this.#query<ScheduleRow>(q.DUE_SCHEDULES, [now, owner, limit])).map(
      toScheduleRow,
    );
  }

  async nextScheduleFireMs(): Promise<number | null> {
    const [r] = await this.#query<{ next: number | null }>(q.NEXT_SCHEDULE_FIRE);
    return r?.next ?? null;
  }

  /**
   * Runs a schedule write, fenced when the term (the caller's, else this store's fence) is a
   * number: a write the guard refused because the cluster moved on is a FencedError, not a
   * lost compare-and-set.
   */
  async #scheduleWrite(
    plain: string,
    fenced: string,
    fence: number | null | undefined,
    params: unknown[],
  ): Promise<boolean> {
    const term = fence === undefined ? this.#fence() : fence;
    const [r] = await this.#query<{ n: number; term: number | null }>(
      term === null ? plain : fenced,
      term === null ? params : [...params, term],
    );
    if (term !== null && r?.term !== term) throw termFencedError(term, r?.term ?? null);
    return r?.n === 1;
  }

  claimSchedule(c: ScheduleClaim): Promise<boolean> {
    return this.#scheduleWrite(q.CLAIM_SCHEDULE, q.CLAIM_SCHEDULE_FENCED, c.term, [
      c.schedule_id,
      c.next_fire_ms,
      c.owner,
      c.until_ms,
      c.now,
    ]);
  }

  renewScheduleClaim(r: ScheduleRenewal): Promise<boolean> {
    return this.#scheduleWrite(q.RENEW_SCHEDULE_CLAIM, q.RENEW_SCHEDULE_CLAIM_FENCED, r.term, [
      r.schedule_id,
      r.owner,
      r.claimed_next_fire_ms,
      r.until_ms,
    ]);
  }

  advanceSchedule(a: ScheduleAdvance): Promise<boolean> {
    return this.#scheduleWrite(q.ADVANCE_SCHEDULE, q.ADVANCE_SCHEDULE_FENCED, a.term, [
      a.schedule_id,
      a.owner,
      a.claimed_next_fire_ms,
      a.next_fire_ms,
      a.buffered_ms,
      a.last_fired_ms,
      a.fired,
      a.skipped,
    ]);
  }

  countSchedule(scheduleId: string, c: ScheduleCount): Promise<boolean> {
    return this.#scheduleWrite(q.COUNT_SCHEDULE, q.COUNT_SCHEDULE_FENCED, c.term, [
      scheduleId,
      c.fired,
      c.skipped,
      c.last_fired_ms,
    ]);
  }

  async dropScheduleClaims(): Promise<number> {
    return (await this.#query(q.DROP_SCHEDULE_CLAIMS)).length;
  }

  async runningScheduleExecutions(scheduleId: string): Promise<string[]> {
    const rows = await this.#query<{ execution_id: string }>(q.RUNNING_SCHEDULE_EXECUTIONS, [
      `${scheduleId}@`,
      `${scheduleId}A`,
    ]);
    return rows.map((r) => r.execution_id);
  }

  async executionIdsBetween(lo: string, hi: string, limit: number): Promise<string[]> {
    const rows = await this.#query<{ execution_id: string }>(q.EXECUTION_IDS_BETWEEN, [
      lo,
      hi,
      limit,
    ]);
    return rows.map((r) => r.execution_id);
  }
}

/** `host:port/database` of a URL, without credentials, for error messages. */
function describeUrl(url: string): string {
  try {
    const u = new URL(url);
    return `${u.hostname}:${u.port || 5432}${u.pathname}`;
  } catch {
    return "(unparsable URL)";
  }
}

/**
 * Connects to PostgreSQL at `url` (checked with one query, so a wrong URL fails here). Call
 * `migrate()` before anything else on a new database.
 */
export async function openPostgresStore(
  url: string,
  opts: PostgresStoreOptions = {},
): Promise<Store> {
  const make = () =>
    postgresClient(url, {
      max: opts.max ?? 10,
      applicationName: opts.applicationName ?? "orbit",
      settings: opts.settings,
    });
  const sql = make();
  try {
    await sql`SELECT 1`;
  } catch (e) {
    await sql.end({ timeout: 1 }).catch(() => {});
    throw new Error(
      `Cannot connect to PostgreSQL at ${describeUrl(url)}: ${(e as Error).message}`,
      { cause: e },
    );
  }
  return new PostgresStore(sql, make, opts);
}

/**
 * A postgres.js client with the store's settings (prepared statements, bigint as numbers, a
 * short reconnect backoff), for the cluster modes' own connections.
 */
export function postgresClient(
  url: string,
  opts: { max: number; applicationName: string; settings?: Record<string, string> },
): postgres.Sql {
  return postgres(url, {
    max: opts.max,
    prepare: true,
    // Reconnect fast after a restart or a failover: 50 ms, 100 ms, … at most 1 s (seconds).
    backoff: (attempt: number) => Math.min(0.05 * 2 ** attempt, 1),
    connect_timeout: 10,
    // No array parameters of custom types: skip the pg_type query on every new connection.
    fetch_types: false,
    onnotice: () => {},
    connection: { ...opts.settings, application_name: opts.applicationName },
    types: {
      // Every bigint column (times, seq, counts) is far below 2^53: read it as a JS number.
      bigint: {
        to: 20,
        from: [20],
        serialize: (x: number | bigint | string) => String(x),
        parse: (x: string) => Number(x),
      },
    },
  });
}
