/**
 * Every SQL statement the SQLite store runs, named and commented (River style: no SQL text in
 * `lib/`). Parameters are named (`$name`) and bound from objects with exactly those keys;
 * JSON columns are TEXT written with `JSON.stringify` and read with `JSON.parse`. Statements
 * take the clock as a parameter where they need one, so tests control time.
 */

// ---------------------------------------------------------------------------------------------
// Connection and transactions

/**
 * Run once per connection. WAL lets readers go on while one writer appends;
 * `synchronous = FULL` syncs the WAL on every commit, so a committed event survives a power
 * loss (NORMAL would only survive a process crash); busy_timeout waits for another process's
 * write lock instead of failing at once.
 */
export const PRAGMAS = `
PRAGMA journal_mode = WAL;
PRAGMA synchronous = FULL;
PRAGMA busy_timeout = 10000;
PRAGMA foreign_keys = ON;
`;

/** Takes the write lock up front, so a transaction never fails half-way on SQLITE_BUSY. */
export const BEGIN_IMMEDIATE = "BEGIN IMMEDIATE";
/** A read transaction: one snapshot for several statements. */
export const BEGIN_DEFERRED = "BEGIN DEFERRED";
export const COMMIT = "COMMIT";
export const ROLLBACK = "ROLLBACK";

// ---------------------------------------------------------------------------------------------
// orbit_migrations

/** Versions already applied. */
export const SELECT_APPLIED_MIGRATIONS = "SELECT version FROM orbit_migrations ORDER BY version";

/** Records one applied version. Params: $version, $now. */
export const INSERT_MIGRATION =
  "INSERT INTO orbit_migrations (version, applied_ms) VALUES ($version, $now)";

// ---------------------------------------------------------------------------------------------
// workflow_definitions

const DEFINITION_COLUMNS = "name, version, ir, document, hash, created_ms";

/**
 * Inserts a definition unless one with this name and version exists (then `changes` is 0 and
 * the caller reads the stored one). Params: $name, $version, $ir, $document, $hash, $created_ms.
 */
export const INSERT_DEFINITION = `
INSERT INTO workflow_definitions (${DEFINITION_COLUMNS})
VALUES ($name, $version, $ir, $document, $hash, $created_ms)
ON CONFLICT (name, version) DO NOTHING`;

/** One definition. Params: $name, $version. */
export const GET_DEFINITION = `
SELECT ${DEFINITION_COLUMNS} FROM workflow_definitions WHERE name = $name AND version = $version`;

/** Every definition, by name then deploy time. */
export const LIST_DEFINITIONS = `
SELECT ${DEFINITION_COLUMNS} FROM workflow_definitions ORDER BY name, created_ms, version`;

/** Every version of one workflow, by deploy time. Params: $name. */
export const LIST_DEFINITIONS_BY_NAME = `
SELECT ${DEFINITION_COLUMNS} FROM workflow_definitions WHERE name = $name
ORDER BY created_ms, version`;

// ---------------------------------------------------------------------------------------------
// execution_events

/**
 * Appends one event; the primary key (run_id, seq) refuses a second writer of the same seq.
 * Params: $run_id, $seq, $execution_id, $type, $time_ms, $data.
 */
export const INSERT_EVENT = `
INSERT INTO execution_events (run_id, seq, execution_id, type, time_ms, data)
VALUES ($run_id, $seq, $execution_id, $type, $time_ms, $data)`;

/** One page of a run's history. Params: $run_id, $after_seq, $limit. */
export const READ_HISTORY = `
SELECT data FROM execution_events WHERE run_id = $run_id AND seq > $after_seq
ORDER BY seq LIMIT $limit`;

/** A run's whole history, for recovery. Params: $run_id. */
export const READ_FULL_HISTORY = `
SELECT data FROM execution_events WHERE run_id = $run_id ORDER BY seq`;

// ---------------------------------------------------------------------------------------------
// workflow_executions

const EXECUTION_COLUMNS = `execution_id, run_id, root_id, parent_id, workflow, version, status,
  input, output, error, created_ms, closed_ms, updated_ms, last_seq`;

const EXECUTION_VALUES = `$execution_id, $run_id, $root_id, $parent_id, $workflow, $version,
  $status, $input, $output, $error, $created_ms, $closed_ms, $updated_ms, $last_seq`;

/**
 * Inserts a new execution; `changes` is 0 when the id exists, which the store turns into
 * DuplicateExecutionError (and rolls the whole commit back). Params: every column.
 */
export const INSERT_EXECUTION = `
INSERT INTO workflow_executions (${EXECUTION_COLUMNS}) VALUES (${EXECUTION_VALUES})
ON CONFLICT (execution_id) DO NOTHING`;

/**
 * Writes an execution's row after an append. `created_ms` is kept from the insert: it is the
 * listing order, and must not move under a client that is paging. Params: every column.
 */
export const UPSERT_EXECUTION = `
INSERT INTO workflow_executions (${EXECUTION_COLUMNS}) VALUES (${EXECUTION_VALUES})
ON CONFLICT (execution_id) DO UPDATE SET
  run_id = excluded.run_id, root_id = excluded.root_id, parent_id = excluded.parent_id,
  workflow = excluded.workflow, version = excluded.version, status = excluded.status,
  input = excluded.input, output = excluded.output, error = excluded.error,
  closed_ms = excluded.closed_ms, updated_ms = excluded.updated_ms, last_seq = excluded.last_seq`;

/** One execution. Params: $execution_id. */
export const GET_EXECUTION = `
SELECT ${EXECUTION_COLUMNS} FROM workflow_executions WHERE execution_id = $execution_id`;

/**
 * Keyset paging, newest first: rows strictly after the cursor ($created_ms, $execution_id) in
 * (created_ms DESC, execution_id DESC) order. The first page passes a cursor above every row.
 * One statement per filter combination, so each uses its index.
 */
const LIST_EXECUTIONS_WHERE = "(created_ms, execution_id) < ($created_ms, $execution_id)";
const LIST_EXECUTIONS_ORDER = "ORDER BY created_ms DESC, execution_id DESC LIMIT $limit";

/** Params: $created_ms, $execution_id, $limit. */
export const LIST_EXECUTIONS = `
SELECT ${EXECUTION_COLUMNS} FROM workflow_executions
WHERE ${LIST_EXECUTIONS_WHERE} ${LIST_EXECUTIONS_ORDER}`;

/** Params: $workflow, $created_ms, $execution_id, $limit. */
export const LIST_EXECUTIONS_BY_WORKFLOW = `
SELECT ${EXECUTION_COLUMNS} FROM workflow_executions
WHERE workflow = $workflow AND ${LIST_EXECUTIONS_WHERE} ${LIST_EXECUTIONS_ORDER}`;

/** Params: $status, $created_ms, $execution_id, $limit. */
export const LIST_EXECUTIONS_BY_STATUS = `
SELECT ${EXECUTION_COLUMNS} FROM workflow_executions
WHERE status = $status AND ${LIST_EXECUTIONS_WHERE} ${LIST_EXECUTIONS_ORDER}`;

/** Params: $workflow, $status, $created_ms, $execution_id, $limit. */
export const LIST_EXECUTIONS_BY_WORKFLOW_AND_STATUS = `
SELECT ${EXECUTION_COLUMNS} FROM workflow_executions
WHERE workflow = $workflow AND status = $status AND ${LIST_EXECUTIONS_WHERE}
${LIST_EXECUTIONS_ORDER}`;

/** Executions to recover at start-up, oldest first. */
export const LIST_RUNNING = `
SELECT ${EXECUTION_COLUMNS} FROM workflow_executions WHERE status = 'running'
ORDER BY created_ms, execution_id`;

/** Number of running executions (the `--max-active-executions` gate). */
export const COUNT_RUNNING =
  "SELECT count(*) AS n FROM workflow_executions WHERE status = 'running'";
