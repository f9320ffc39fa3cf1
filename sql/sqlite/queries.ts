/**
 * Every SQL statement the SQLite store runs, named and commented (River style: no SQL text in
 * `lib/`). Parameters are named (`$name`) and bound from objects with exactly those keys, but
 * for the three statements every commit runs many times (an event, an execution row): those
 * take numbered parameters (`?1`…) bound from an argument list, which node:sqlite binds in
 * about half the time of a named object. JSON columns are TEXT written with `JSON.stringify` and read with `JSON.parse`. Statements
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
 * Params (numbered): run_id, seq, execution_id, type, time_ms, data.
 */
export const INSERT_EVENT = `
INSERT INTO execution_events (run_id, seq, execution_id, type, time_ms, data)
VALUES (?1, ?2, ?3, ?4, ?5, ?6)`;

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

/** The events of the row's current run (in a subquery of the row's own SELECT). */
const RUN_EVENTS = "FROM execution_events e WHERE e.run_id = workflow_executions.run_id";

/**
 * What reads answer. An append that only moves the history (AppendItem.steady) writes events and
 * leaves the row as it was, so `last_seq` and `updated_ms` come from the run's newest event when
 * it is past the row's: an index seek (run_id, seq) each.
 */
const EXECUTION_READ_COLUMNS = `execution_id, run_id, root_id, parent_id, workflow, version,
  status, input, output, error, created_ms, closed_ms,
  coalesce((SELECT e.time_ms ${RUN_EVENTS} AND e.seq > workflow_executions.last_seq
            ORDER BY e.seq DESC LIMIT 1), updated_ms) AS updated_ms,
  max(last_seq, coalesce((SELECT max(e.seq) ${RUN_EVENTS}), 0)) AS last_seq`;

/**
 * Columns an append writes: every column of the row, then `wake_at_ms` (when the engine must
 * hold the execution in memory again: 0 while it has work in flight, the time of its next
 * timer, NULL when only an outside event moves it or it is closed). Reads never need it.
 */
const EXECUTION_WRITE_COLUMNS = `${EXECUTION_COLUMNS}, wake_at_ms`;

/** Numbered parameters of every written column, in EXECUTION_WRITE_COLUMNS order. */
const EXECUTION_VALUES = "?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15";

/**
 * Inserts a new execution; `changes` is 0 when the id exists, which the store turns into
 * DuplicateExecutionError (and rolls the whole commit back). Params (numbered): every column,
 * in EXECUTION_COLUMNS order.
 */
export const INSERT_EXECUTION = `
INSERT INTO workflow_executions (${EXECUTION_WRITE_COLUMNS}) VALUES (${EXECUTION_VALUES})
ON CONFLICT (execution_id) DO NOTHING`;

/**
 * Writes an execution's row after an append. `created_ms` is kept from the insert: it is the
 * listing order, and must not move under a client that is paging. Params (numbered): every
 * column, in EXECUTION_COLUMNS order.
 */
export const UPSERT_EXECUTION = `
INSERT INTO workflow_executions (${EXECUTION_WRITE_COLUMNS}) VALUES (${EXECUTION_VALUES})
ON CONFLICT (execution_id) DO UPDATE SET
  run_id = excluded.run_id, root_id = excluded.root_id, parent_id = excluded.parent_id,
  workflow = excluded.workflow, version = excluded.version, status = excluded.status,
  input = excluded.input, output = excluded.output, error = excluded.error,
  closed_ms = excluded.closed_ms, updated_ms = excluded.updated_ms, last_seq = excluded.last_seq,
  wake_at_ms = excluded.wake_at_ms`;

/** One execution. Params: $execution_id. */
export const GET_EXECUTION = `
SELECT ${EXECUTION_READ_COLUMNS} FROM workflow_executions WHERE execution_id = $execution_id`;

/**
 * Keyset paging, newest first: rows strictly after the cursor ($created_ms, $execution_id) in
 * (created_ms DESC, execution_id DESC) order. The first page passes a cursor above every row.
 * One statement per filter combination, so each uses its index.
 */
const LIST_EXECUTIONS_WHERE = "(created_ms, execution_id) < ($created_ms, $execution_id)";
const LIST_EXECUTIONS_ORDER = "ORDER BY created_ms DESC, execution_id DESC LIMIT $limit";

/** Params: $created_ms, $execution_id, $limit. */
export const LIST_EXECUTIONS = `
SELECT ${EXECUTION_READ_COLUMNS} FROM workflow_executions
WHERE ${LIST_EXECUTIONS_WHERE} ${LIST_EXECUTIONS_ORDER}`;

/** Params: $workflow, $created_ms, $execution_id, $limit. */
export const LIST_EXECUTIONS_BY_WORKFLOW = `
SELECT ${EXECUTION_READ_COLUMNS} FROM workflow_executions
WHERE workflow = $workflow AND ${LIST_EXECUTIONS_WHERE} ${LIST_EXECUTIONS_ORDER}`;

/** Params: $status, $created_ms, $execution_id, $limit. */
export const LIST_EXECUTIONS_BY_STATUS = `
SELECT ${EXECUTION_READ_COLUMNS} FROM workflow_executions
WHERE status = $status AND ${LIST_EXECUTIONS_WHERE} ${LIST_EXECUTIONS_ORDER}`;

/** Params: $workflow, $status, $created_ms, $execution_id, $limit. */
export const LIST_EXECUTIONS_BY_WORKFLOW_AND_STATUS = `
SELECT ${EXECUTION_READ_COLUMNS} FROM workflow_executions
WHERE workflow = $workflow AND status = $status AND ${LIST_EXECUTIONS_WHERE}
${LIST_EXECUTIONS_ORDER}`;

/** Executions to recover at start-up, oldest first. */
export const LIST_RUNNING = `
SELECT ${EXECUTION_READ_COLUMNS} FROM workflow_executions WHERE status = 'running'
ORDER BY created_ms, execution_id`;

/**
 * Running executions to load at start-up: those with work in flight (wake_at_ms 0) or a timer
 * due before $before_ms; oldest first. The rest are loaded when something happens to them.
 */
export const LIST_RUNNING_DUE = `
SELECT ${EXECUTION_READ_COLUMNS} FROM workflow_executions
WHERE wake_at_ms IS NOT NULL AND wake_at_ms <= $before_ms AND status = 'running'
ORDER BY created_ms, execution_id`;

/**
 * Running executions whose next timer is due before $before_ms, in (wake_at_ms, execution_id)
 * order after the keyset ($after_ms, $after_id), at most $limit. Params: $before_ms,
 * $after_ms, $after_id, $limit.
 */
export const LIST_WAKING = `
SELECT execution_id, wake_at_ms FROM workflow_executions
WHERE wake_at_ms IS NOT NULL AND wake_at_ms > 0 AND wake_at_ms <= $before_ms
  AND (wake_at_ms, execution_id) > ($after_ms, $after_id) AND status = 'running'
ORDER BY wake_at_ms, execution_id LIMIT $limit`;

/** Number of running executions (the `--max-active-executions` gate). */
export const COUNT_RUNNING =
  "SELECT count(*) AS n FROM workflow_executions WHERE status = 'running'";

// ---------------------------------------------------------------------------------------------
// orbit_schedules (lib/schedules/scheduler.ts is the only writer of claims, counts and next_fire_ms
// advances; lib/schedules/service.ts writes definitions). `paused` is 0 or 1; `spec` is JSON.

const SCHEDULE_COLUMNS = `schedule_id, spec, workflow, next_fire_ms, paused, fired, skipped,
  claimed_by, claimed_until_ms, created_ms, updated_ms, buffered_ms, last_fired_ms`;

/**
 * A claim is live while it is unexpired; the owner's own live claim (left by a pass that
 * failed half-way) does not keep the owner out.
 */
const CLAIM_FREE = "(claimed_by IS NULL OR claimed_until_ms < $now OR claimed_by = $owner)";

/**
 * Appended to a schedule write of a clustered leader: the write happens only while the cluster
 * is still at the term the caller leads (`$term`). One statement, so no new leader can bump the
 * term between the check and the write (SQLite has one writer at a time).
 */
const TERM_GUARD = "AND (SELECT term FROM orbit_cluster WHERE id = 1) = $term";

/**
 * Inserts a schedule unless its id exists (`changes` is 0 then: 409 SCHEDULE_EXISTS).
 * Params: every column.
 */
export const INSERT_SCHEDULE = `
INSERT INTO orbit_schedules (${SCHEDULE_COLUMNS})
VALUES ($schedule_id, $spec, $workflow, $next_fire_ms, $paused, $fired, $skipped, $claimed_by,
  $claimed_until_ms, $created_ms, $updated_ms, $buffered_ms, $last_fired_ms)
ON CONFLICT (schedule_id) DO NOTHING`;

/** One schedule. Params: $schedule_id. */
export const GET_SCHEDULE = `
SELECT ${SCHEDULE_COLUMNS} FROM orbit_schedules WHERE schedule_id = $schedule_id`;

/** Every schedule, by id. */
export const LIST_SCHEDULES = `
SELECT ${SCHEDULE_COLUMNS} FROM orbit_schedules ORDER BY schedule_id`;

/**
 * Writes a changed definition (PATCH, pause, resume). next_fire_ms moves only when $reset_next
 * is 1: otherwise the scheduler's advance, which may be running, keeps its value.
 * Params: $schedule_id, $spec, $workflow, $paused, $reset_next, $next_fire_ms, $now.
 */
export const UPDATE_SCHEDULE = `
UPDATE orbit_schedules SET spec = $spec, workflow = $workflow, paused = $paused,
  next_fire_ms = CASE WHEN $reset_next = 1 THEN $next_fire_ms ELSE next_fire_ms END,
  updated_ms = $now
WHERE schedule_id = $schedule_id
RETURNING ${SCHEDULE_COLUMNS}`;

/** Params: $schedule_id. */
export const DELETE_SCHEDULE = "DELETE FROM orbit_schedules WHERE schedule_id = $schedule_id";

/**
 * Schedules with work for the scheduler at $now: an occurrence due, or a buffered one waiting
 * for its predecessor to end; not paused, not claimed by someone else. Earliest first.
 * Params: $now, $owner, $limit.
 */
export const DUE_SCHEDULES = `
SELECT ${SCHEDULE_COLUMNS} FROM orbit_schedules
WHERE paused = 0 AND (next_fire_ms <= $now OR buffered_ms IS NOT NULL) AND ${CLAIM_FREE}
ORDER BY next_fire_ms, schedule_id LIMIT $limit`;

/** The earliest next occurrence of any schedule that is not paused (the scheduler's timer). */
export const NEXT_SCHEDULE_FIRE =
  "SELECT min(next_fire_ms) AS next FROM orbit_schedules WHERE paused = 0";

/**
 * The claim of an occurrence: a compare-and-set on the next_fire_ms the scheduler read, so of
 * several schedulers that read the same row exactly one takes it (`changes` 1).
 * Params: $schedule_id, $next_fire_ms, $owner, $until_ms, $now.
 */
export const CLAIM_SCHEDULE = `
UPDATE orbit_schedules SET claimed_by = $owner, claimed_until_ms = $until_ms
WHERE schedule_id = $schedule_id AND next_fire_ms IS $next_fire_ms AND paused = 0
  AND ${CLAIM_FREE}`;

/** CLAIM_SCHEDULE of a clustered leader. Params: those of CLAIM_SCHEDULE, $term. */
export const CLAIM_SCHEDULE_FENCED = `${CLAIM_SCHEDULE} ${TERM_GUARD}`;

/**
 * The renewal of a claim by its owner before each start of its pass: a compare-and-set on the
 * owner and the next_fire_ms the claim was taken at, which extends the lease (`changes` 1).
 * Nothing else can have moved the row meanwhile: another claim changes claimed_by, an advance
 * releases it, a PATCH of the timing moves next_fire_ms, a new leader drops the claims.
 * Params: $schedule_id, $owner, $claimed_next_fire_ms, $until_ms.
 */
export const RENEW_SCHEDULE_CLAIM = `
UPDATE orbit_schedules SET claimed_until_ms = $until_ms
WHERE schedule_id = $schedule_id AND claimed_by = $owner
  AND next_fire_ms IS $claimed_next_fire_ms`;

/** RENEW_SCHEDULE_CLAIM of a clustered leader. Params: those of RENEW_SCHEDULE_CLAIM, $term. */
export const RENEW_SCHEDULE_CLAIM_FENCED = `${RENEW_SCHEDULE_CLAIM} ${TERM_GUARD}`;

/**
 * The advance after an occurrence was handled: the counts, the buffered occurrence, the next
 * occurrence and the release of the claim, only by the claim's owner (the second
 * compare-and-set). If a PATCH moved next_fire_ms meanwhile, its value stays; the counts land.
 * Params: $schedule_id, $owner, $claimed_next_fire_ms, $next_fire_ms, $buffered_ms,
 * $last_fired_ms (NULL keeps the stored one), $fired, $skipped.
 */
export const ADVANCE_SCHEDULE = `
UPDATE orbit_schedules SET
  next_fire_ms = CASE WHEN next_fire_ms IS $claimed_next_fire_ms THEN $next_fire_ms
    ELSE next_fire_ms END,
  buffered_ms = $buffered_ms,
  last_fired_ms = coalesce($last_fired_ms, last_fired_ms),
  fired = fired + $fired, skipped = skipped + $skipped,
  claimed_by = NULL, claimed_until_ms = NULL
WHERE schedule_id = $schedule_id AND claimed_by = $owner`;

/** ADVANCE_SCHEDULE of a clustered leader. Params: those of ADVANCE_SCHEDULE, $term. */
export const ADVANCE_SCHEDULE_FENCED = `${ADVANCE_SCHEDULE} ${TERM_GUARD}`;

/**
 * Adds to the counts outside a claim (a trigger). Params: $schedule_id, $fired, $skipped,
 * $last_fired_ms (NULL keeps the stored one).
 */
export const COUNT_SCHEDULE = `
UPDATE orbit_schedules SET fired = fired + $fired, skipped = skipped + $skipped,
  last_fired_ms = coalesce($last_fired_ms, last_fired_ms)
WHERE schedule_id = $schedule_id`;

/** COUNT_SCHEDULE of a clustered leader. Params: those of COUNT_SCHEDULE, $term. */
export const COUNT_SCHEDULE_FENCED = `${COUNT_SCHEDULE} ${TERM_GUARD}`;

/** Drops every claim: a new leader's (or a restarted single server's) first act. */
export const DROP_SCHEDULE_CLAIMS = `
UPDATE orbit_schedules SET claimed_by = NULL, claimed_until_ms = NULL
WHERE claimed_by IS NOT NULL`;

/**
 * Running executions of one schedule: ids `<schedule_id>@…`, read as the key range
 * [$lo, $hi) = [`<id>@`, `<id>A`) ('A' follows '@'; a schedule id holds no '@').
 */
export const RUNNING_SCHEDULE_EXECUTIONS = `
SELECT execution_id FROM workflow_executions
WHERE execution_id >= $lo AND execution_id < $hi AND status = 'running'
ORDER BY execution_id`;

/**
 * Executions of any status with ids in [$lo, $hi] (BINARY collation: byte order), at most
 * $limit: the occurrences of a schedule between two ISO times (ids `<schedule_id>@<ISO>`).
 */
export const EXECUTION_IDS_BETWEEN = `
SELECT execution_id FROM workflow_executions
WHERE execution_id >= $lo AND execution_id <= $hi
ORDER BY execution_id LIMIT $limit`;

// ---------------------------------------------------------------------------------------------
// orbit_cluster

/** The current leadership term (the fence's error message). */
export const GET_TERM = "SELECT term FROM orbit_cluster WHERE id = 1";
