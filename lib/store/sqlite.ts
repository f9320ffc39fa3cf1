/**
 * The SQLite store: one `node:sqlite` connection to a file in WAL mode with
 * `synchronous = FULL`. Every statement is prepared once (on first use) and reused. A commit
 * is one `BEGIN IMMEDIATE … COMMIT` for all of its items, so the caller's commit batching
 * costs one WAL sync for many executions.
 *
 * The connection is synchronous: a method runs to its end before any other JS runs, so the
 * statements of one call never interleave with another call's.
 *
 * ```ts
 * import { openSqliteStore } from "./sqlite.ts";
 * const store = await openSqliteStore("orbit.db");
 * await store.migrate();
 * console.log(await store.countRunning());
 * await store.close();
 * ```
 */
import { DatabaseSync, type StatementSync } from "node:sqlite";
import type { ExecutionStatus, HistoryEvent } from "../engine/events.ts";
import * as q from "../../sql/sqlite/queries.ts";
import { CREATE_MIGRATIONS_TABLE, MIGRATIONS } from "../../sql/sqlite/migrations.ts";
import {
  type AppendItem,
  decodeListCursor,
  type DefinitionRow,
  DuplicateExecutionError,
  encodeListCursor,
  type ExecutionPage,
  type ExecutionRow,
  HistoryConflictError,
  type ListExecutionsQuery,
  type ScheduleAdvance,
  type ScheduleClaim,
  type ScheduleCount,
  type ScheduleRenewal,
  type ScheduleRow,
  type ScheduleUpdate,
  type Store,
  termFencedError,
  type WakingRow,
} from "./store.ts";

type SqlValue = null | number | bigint | string | Uint8Array;
type Params = Record<string, SqlValue>;

/** A row of `workflow_executions` as SQLite returns it (JSON columns as TEXT). */
interface WorkflowExecutionsRecord {
  execution_id: string;
  run_id: string;
  root_id: string;
  parent_id: string | null;
  workflow: string;
  version: string;
  status: string;
  input: string | null;
  output: string | null;
  error: string | null;
  created_ms: number;
  closed_ms: number | null;
  updated_ms: number;
  last_seq: number;
}

/** A row of `workflow_definitions` as SQLite returns it. */
interface WorkflowDefinitionsRecord {
  name: string;
  version: string;
  ir: string;
  document: string;
  hash: string;
  created_ms: number;
}

/** A row of `orbit_schedules` as SQLite returns it. */
interface OrbitSchedulesRecord extends Omit<ScheduleRow, "spec" | "paused"> {
  spec: string;
  paused: number;
}

function toScheduleRow(r: OrbitSchedulesRecord): ScheduleRow {
  return { ...r, spec: JSON.parse(r.spec), paused: r.paused === 1 };
}

/** A `first page` cursor: above every real row in (created_ms DESC, execution_id DESC). */
const FIRST_PAGE = { created_ms: Number.MAX_SAFE_INTEGER, execution_id: "" };

function toJson(value: unknown): string | null {
  return value === undefined || value === null ? null : JSON.stringify(value);
}

function fromJson(text: string | null): unknown {
  return text === null ? null : JSON.parse(text);
}

/**
 * The numbered parameters of INSERT_EXECUTION and UPSERT_EXECUTION (EXECUTION_WRITE_COLUMNS
 * order: the row's columns, then wake_at_ms).
 */
function executionParams(row: ExecutionRow, wakeAtMs: number | null | undefined): SqlValue[] {
  return [
    row.execution_id,
    row.run_id,
    row.root_id,
    row.parent_id ?? null,
    row.workflow,
    row.version,
    row.status,
    toJson(row.input),
    toJson(row.output),
    toJson(row.error),
    row.created_ms,
    row.closed_ms ?? null,
    row.updated_ms,
    row.last_seq,
    wakeAtMs === undefined ? 0 : wakeAtMs,
  ];
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
    input: fromJson(r.input),
    output: fromJson(r.output),
    error: fromJson(r.error),
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
    document: JSON.parse(r.document),
    hash: r.hash,
    created_ms: r.created_ms,
  };
}

class SqliteStore implements Store {
  readonly kind = "sqlite" as const;
  readonly #db: DatabaseSync;
  readonly #statements = new Map<string, StatementSync>();
  readonly #now: () => number;

  constructor(db: DatabaseSync, now: () => number) {
    this.#db = db;
    this.#now = now;
  }

  /** The prepared statement for `sql`, prepared on first use (tables exist after migrate). */
  #stmt(sql: string): StatementSync {
    let s = this.#statements.get(sql);
    if (!s) {
      s = this.#db.prepare(sql);
      this.#statements.set(sql, s);
    }
    return s;
  }

  #all<T>(sql: string, params: Params = {}): T[] {
    return this.#stmt(sql).all(params) as unknown as T[];
  }

  #get<T>(sql: string, params: Params = {}): T | undefined {
    return this.#stmt(sql).get(params) as unknown as T | undefined;
  }

  /** Runs the synchronous `fn` so that a throw becomes a rejected promise, as callers expect. */
  #run<T>(fn: () => T): Promise<T> {
    try {
      return Promise.resolve(fn());
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /** Runs `fn` inside BEGIN (IMMEDIATE for writes); rolls back if it throws. */
  #transaction<T>(begin: string, fn: () => T): T {
    this.#db.exec(begin);
    try {
      const result = fn();
      this.#db.exec(q.COMMIT);
      return result;
    } catch (e) {
      if (this.#db.isTransaction) this.#db.exec(q.ROLLBACK);
      throw e;
    }
  }

  migrate(): Promise<void> {
    // IMMEDIATE: a second process migrating the same file waits (busy_timeout), then sees
    // every version recorded and applies nothing.
    return this.#run(() =>
      this.#transaction(q.BEGIN_IMMEDIATE, () => {
        this.#db.exec(CREATE_MIGRATIONS_TABLE);
        const applied = new Set(
          this.#all<{ version: number }>(q.SELECT_APPLIED_MIGRATIONS).map((r) => r.version),
        );
        for (const m of MIGRATIONS) {
          if (applied.has(m.version)) continue;
          this.#db.exec(m.sql);
          this.#stmt(q.INSERT_MIGRATION).run({ version: m.version, now: this.#now() });
        }
      })
    );
  }

  close(): Promise<void> {
    return this.#run(() => {
      this.#statements.clear();
      if (this.#db.isOpen) this.#db.close();
    });
  }

  putDefinition(def: DefinitionRow): Promise<{ created: boolean; stored: DefinitionRow }> {
    return this.#run(() => {
      const { changes } = this.#stmt(q.INSERT_DEFINITION).run({
        name: def.name,
        version: def.version,
        ir: def.ir,
        document: JSON.stringify(def.document),
        hash: def.hash,
        created_ms: def.created_ms,
      });
      const stored = this.#get<WorkflowDefinitionsRecord>(q.GET_DEFINITION, {
        name: def.name,
        version: def.version,
      });
      if (!stored) throw new Error(`Cannot read definition ${def.name}@${def.version} back`);
      return { created: Number(changes) === 1, stored: toDefinitionRow(stored) };
    });
  }

  getDefinition(name: string, version: string): Promise<DefinitionRow | null> {
    return this.#run(() => {
      const r = this.#get<WorkflowDefinitionsRecord>(q.GET_DEFINITION, { name, version });
      return r ? toDefinitionRow(r) : null;
    });
  }

  listDefinitions(name?: string): Promise<DefinitionRow[]> {
    return this.#run(() => {
      const rows = name === undefined
        ? this.#all<WorkflowDefinitionsRecord>(q.LIST_DEFINITIONS)
        : this.#all<WorkflowDefinitionsRecord>(q.LIST_DEFINITIONS_BY_NAME, { name });
      return rows.map(toDefinitionRow);
    });
  }

  commit(items: AppendItem[]): Promise<void> {
    if (items.length === 0) return Promise.resolve();
    return this.#run(() =>
      this.#transaction(q.BEGIN_IMMEDIATE, () => {
        const insertEvent = this.#stmt(q.INSERT_EVENT);
        for (const item of items) {
          const { row } = item;
          // A steady item only moves the history: the row stays as it is (reads take last_seq
          // and updated_ms from the run's newest event), no page of it or its indexes written.
          if (item.create) {
            const params = executionParams(row, item.wake_at_ms);
            const { changes } = this.#stmt(q.INSERT_EXECUTION).run(...params);
            if (Number(changes) !== 1) throw new DuplicateExecutionError(row.execution_id);
          } else if (!item.steady) {
            this.#stmt(q.UPSERT_EXECUTION).run(...executionParams(row, item.wake_at_ms));
          }
          const { run_id, execution_id } = row;
          for (const ev of item.events) {
            try {
              insertEvent.run(
                run_id,
                ev.seq,
                execution_id,
                ev.type,
                ev.time_ms,
                JSON.stringify(ev),
              );
            } catch (e) {
              if (!/UNIQUE constraint failed: execution_events/.test((e as Error).message)) throw e;
              throw new HistoryConflictError(
                `Cannot commit: an event with this run and seq exists already (run ${run_id}, ` +
                  `seq ${ev.seq}); another writer appended to the run`,
                { cause: e },
              );
            }
          }
        }
      })
    );
  }

  getExecution(executionId: string): Promise<ExecutionRow | null> {
    return this.#run(() => {
      const r = this.#get<WorkflowExecutionsRecord>(q.GET_EXECUTION, {
        execution_id: executionId,
      });
      return r ? toExecutionRow(r) : null;
    });
  }

  listExecutions(query: ListExecutionsQuery): Promise<ExecutionPage> {
    return this.#run(() => {
      const after = query.cursor ? decodeListCursor(query.cursor) : FIRST_PAGE;
      const limit = Math.max(1, Math.floor(query.limit));
      // One more row than asked tells whether another page exists.
      const params: Params = { ...after, limit: limit + 1 };
      let sql = q.LIST_EXECUTIONS;
      if (query.workflow !== undefined && query.status !== undefined) {
        sql = q.LIST_EXECUTIONS_BY_WORKFLOW_AND_STATUS;
        Object.assign(params, { workflow: query.workflow, status: query.status });
      } else if (query.workflow !== undefined) {
        sql = q.LIST_EXECUTIONS_BY_WORKFLOW;
        params.workflow = query.workflow;
      } else if (query.status !== undefined) {
        sql = q.LIST_EXECUTIONS_BY_STATUS;
        params.status = query.status;
      }
      const rows = this.#all<WorkflowExecutionsRecord>(sql, params).map(toExecutionRow);
      const executions = rows.slice(0, limit);
      const last = executions[executions.length - 1];
      return {
        executions,
        next_cursor: rows.length > limit && last ? encodeListCursor(last) : null,
      };
    });
  }

  readHistory(runId: string, afterSeq: number, limit: number): Promise<HistoryEvent[]> {
    return this.#run(() =>
      this.#all<{ data: string }>(q.READ_HISTORY, {
        run_id: runId,
        after_seq: afterSeq,
        limit: Math.max(0, Math.floor(limit)),
      }).map((r) => JSON.parse(r.data) as HistoryEvent)
    );
  }

  loadRunning(): Promise<Array<{ row: ExecutionRow; events: HistoryEvent[] }>> {
    // One read transaction: every history is from the same snapshot as its row.
    return this.#run(() =>
      this.#transaction(
        q.BEGIN_DEFERRED,
        () =>
          this.#all<WorkflowExecutionsRecord>(q.LIST_RUNNING).map((r) => ({
            row: toExecutionRow(r),
            events: this.#all<{ data: string }>(q.READ_FULL_HISTORY, { run_id: r.run_id })
              .map((e) => JSON.parse(e.data) as HistoryEvent),
          })),
      )
    );
  }

  loadRunningDue(beforeMs: number): Promise<Array<{ row: ExecutionRow; events: HistoryEvent[] }>> {
    return this.#run(() =>
      this.#transaction(
        q.BEGIN_DEFERRED,
        () =>
          this.#all<WorkflowExecutionsRecord>(q.LIST_RUNNING_DUE, { before_ms: beforeMs }).map((
            r,
          ) => ({
            row: toExecutionRow(r),
            events: this.#all<{ data: string }>(q.READ_FULL_HISTORY, { run_id: r.run_id })
              .map((e) => JSON.parse(e.data) as HistoryEvent),
          })),
      )
    );
  }

  listWaking(beforeMs: number, after: WakingRow | null, limit: number): Promise<WakingRow[]> {
    return this.#run(() =>
      this.#all<WakingRow>(q.LIST_WAKING, {
        before_ms: beforeMs,
        after_ms: after?.wake_at_ms ?? 0,
        after_id: after?.execution_id ?? "",
        limit: Math.max(1, Math.floor(limit)),
      }).map((r) => ({ execution_id: r.execution_id, wake_at_ms: Number(r.wake_at_ms) }))
    );
  }

  countRunning(): Promise<number> {
    return this.#run(() => this.#get<{ n: number }>(q.COUNT_RUNNING)?.n ?? 0);
  }

  createSchedule(row: ScheduleRow): Promise<boolean> {
    return this.#run(() => {
      const { changes } = this.#stmt(q.INSERT_SCHEDULE).run({
        ...row,
        spec: JSON.stringify(row.spec),
        paused: row.paused ? 1 : 0,
      });
      return Number(changes) === 1;
    });
  }

  getSchedule(scheduleId: string): Promise<ScheduleRow | null> {
    return this.#run(() => {
      const r = this.#get<OrbitSchedulesRecord>(q.GET_SCHEDULE, { schedule_id: scheduleId });
      return r ? toScheduleRow(r) : null;
    });
  }

  listSchedules(): Promise<ScheduleRow[]> {
    return this.#run(() => this.#all<OrbitSchedulesRecord>(q.LIST_SCHEDULES).map(toScheduleRow));
  }

  updateSchedule(scheduleId: string, u: ScheduleUpdate): Promise<ScheduleRow | null> {
    return this.#run(() => {
      const r = this.#get<OrbitSchedulesRecord>(q.UPDATE_SCHEDULE, {
        schedule_id: scheduleId,
        spec: JSON.stringify(u.spec),
        workflow: u.workflow,
        paused: u.paused ? 1 : 0,
        reset_next: u.next_fire_ms === undefined ? 0 : 1,
        next_fire_ms: u.next_fire_ms ?? null,
        now: u.now,
      });
      return r ? toScheduleRow(r) : null;
    });
  }

  deleteSchedule(scheduleId: string): Promise<boolean> {
    return this.#run(() =>
      Number(this.#stmt(q.DELETE_SCHEDULE).run({ schedule_id: scheduleId }).changes) === 1
    );
  }

  dueSchedules(now: number, owner: string, limit: number): Promise<ScheduleRow[]> {
    return this.#run(() =>
      this.#all<OrbitSchedulesRecord>(q.DUE_SCHEDULES, { now, owner, limit }).map(toScheduleRow)
    );
  }

  nextScheduleFireMs(): Promise<number | null> {
    return this.#run(() => this.#get<{ next: number | null }>(q.NEXT_SCHEDULE_FIRE)?.next ?? null);
  }

  /**
   * Runs a schedule write, fenced when `term` is a number: a write the guard refused because
   * the cluster moved past the term is a FencedError, not a lost compare-and-set.
   */
  #scheduleWrite(plain: string, fenced: string, term: number | null, params: Params): boolean {
    return this.#transaction(q.BEGIN_IMMEDIATE, () => {
      const sql = term === null ? plain : fenced;
      const { changes } = this.#stmt(sql).run(term === null ? params : { ...params, term });
      if (Number(changes) === 1) return true;
      if (term !== null) {
        const current = this.#get<{ term: number }>(q.GET_TERM)?.term ?? null;
        if (current !== term) throw termFencedError(term, current);
      }
      return false;
    });
  }

  claimSchedule(c: ScheduleClaim): Promise<boolean> {
    return this.#run(() =>
      this.#scheduleWrite(q.CLAIM_SCHEDULE, q.CLAIM_SCHEDULE_FENCED, c.term ?? null, {
        schedule_id: c.schedule_id,
        next_fire_ms: c.next_fire_ms,
        owner: c.owner,
        until_ms: c.until_ms,
        now: c.now,
      })
    );
  }

  renewScheduleClaim(r: ScheduleRenewal): Promise<boolean> {
    return this.#run(() =>
      this.#scheduleWrite(q.RENEW_SCHEDULE_CLAIM, q.RENEW_SCHEDULE_CLAIM_FENCED, r.term ?? null, {
        schedule_id: r.schedule_id,
        owner: r.owner,
        claimed_next_fire_ms: r.claimed_next_fire_ms,
        until_ms: r.until_ms,
      })
    );
  }

  advanceSchedule(a: ScheduleAdvance): Promise<boolean> {
    return this.#run(() =>
      this.#scheduleWrite(q.ADVANCE_SCHEDULE, q.ADVANCE_SCHEDULE_FENCED, a.term ?? null, {
        schedule_id: a.schedule_id,
        owner: a.owner,
        claimed_next_fire_ms: a.claimed_next_fire_ms,
        next_fire_ms: a.next_fire_ms,
        buffered_ms: a.buffered_ms,
        last_fired_ms: a.last_fired_ms,
        fired: a.fired,
        skipped: a.skipped,
      })
    );
  }

  countSchedule(scheduleId: string, c: ScheduleCount): Promise<boolean> {
    return this.#run(() =>
      this.#scheduleWrite(q.COUNT_SCHEDULE, q.COUNT_SCHEDULE_FENCED, c.term ?? null, {
        schedule_id: scheduleId,
        fired: c.fired,
        skipped: c.skipped,
        last_fired_ms: c.last_fired_ms,
      })
    );
  }

  dropScheduleClaims(): Promise<number> {
    return this.#run(() => Number(this.#stmt(q.DROP_SCHEDULE_CLAIMS).run().changes));
  }

  runningScheduleExecutions(scheduleId: string): Promise<string[]> {
    return this.#run(() =>
      this.#all<{ execution_id: string }>(q.RUNNING_SCHEDULE_EXECUTIONS, {
        lo: `${scheduleId}@`,
        hi: `${scheduleId}A`,
      }).map((r) => r.execution_id)
    );
  }

  executionIdsBetween(lo: string, hi: string, limit: number): Promise<string[]> {
    return this.#run(() =>
      this.#all<{ execution_id: string }>(q.EXECUTION_IDS_BETWEEN, { lo, hi, limit })
        .map((r) => r.execution_id)
    );
  }
}

/**
 * Opens (creating if needed) the SQLite file at `path` and sets its pragmas. Call
 * `migrate()` before anything else on a new file.
 */
export function openSqliteStore(
  path: string,
  opts: { now?: () => number } = {},
): Promise<Store> {
  let db: DatabaseSync | null = null;
  try {
    db = new DatabaseSync(path);
    db.exec(q.PRAGMAS);
    return Promise.resolve(new SqliteStore(db, opts.now ?? Date.now));
  } catch (e) {
    if (db?.isOpen) db.close();
    const error = new Error(`Cannot open SQLite database ${path}: ${(e as Error).message}`, {
      cause: e,
    });
    return Promise.reject(error);
  }
}
