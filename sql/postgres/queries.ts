/**
 * Every SQL statement the PostgreSQL store runs, named and commented (River style: no SQL text
 * in `lib/`). Parameters are positional (`$1`…) and sent through prepared statements; a
 * `$n::jsonb` parameter is sent as a JS value (postgres.js serializes it), never as a string.
 * `bigint` columns come back as JS numbers (the store's type parser). Statements take the
 * clock as a parameter where they need one, so tests control time.
 */
import { MIGRATION_LOCK_KEY } from "./migrations.ts";

// ---------------------------------------------------------------------------------------------
// orbit_migrations

/**
 * Serializes migrations across servers that start at once; held until the migration
 * transaction ends, so the loser waits and then sees every version applied.
 */
export const LOCK_MIGRATIONS = `SELECT pg_advisory_xact_lock(${MIGRATION_LOCK_KEY})`;

/** Versions already applied. */
export const SELECT_APPLIED_MIGRATIONS = "SELECT version FROM orbit_migrations ORDER BY version";

/** Records one applied version. Params: $1 version, $2 now. */
export const INSERT_MIGRATION =
  "INSERT INTO orbit_migrations (version, applied_ms) VALUES ($1, $2)";

// ---------------------------------------------------------------------------------------------
// workflow_definitions

const DEFINITION_COLUMNS = "name, version, ir, document, hash, created_ms";

/**
 * Inserts a definition unless this name and version exist, and answers the stored row with
 * `created`. One statement; under a concurrent insert of the same key it can answer no row
 * (the other insert is not in this statement's snapshot), and the caller then reads it. A new
 * version is announced with NOTIFY orbit_defs in the same transaction (shared mode's servers
 * drop their cached latest version of that workflow; nobody listens otherwise).
 * Params: $1 name, $2 version, $3 ir, $4 document (jsonb), $5 hash, $6 created_ms.
 */
export const PUT_DEFINITION = `
WITH ins AS (
  INSERT INTO workflow_definitions (${DEFINITION_COLUMNS})
  VALUES ($1, $2, $3, $4::jsonb, $5, $6)
  ON CONFLICT (name, version) DO NOTHING
  RETURNING ${DEFINITION_COLUMNS}
)
SELECT true AS created, ${DEFINITION_COLUMNS} FROM ins
  CROSS JOIN LATERAL (SELECT pg_notify('orbit_defs', ins.name)) AS announced
UNION ALL
SELECT false AS created, ${DEFINITION_COLUMNS} FROM workflow_definitions
WHERE name = $1 AND version = $2 AND NOT EXISTS (SELECT 1 FROM ins)`;

/** One definition. Params: $1 name, $2 version. */
export const GET_DEFINITION = `
SELECT ${DEFINITION_COLUMNS} FROM workflow_definitions WHERE name = $1 AND version = $2`;

/** Every definition, by name then deploy time. */
export const LIST_DEFINITIONS = `
SELECT ${DEFINITION_COLUMNS} FROM workflow_definitions ORDER BY name, created_ms, version`;

/** Every version of one workflow, by deploy time. Params: $1 name. */
export const LIST_DEFINITIONS_BY_NAME = `
SELECT ${DEFINITION_COLUMNS} FROM workflow_definitions WHERE name = $1
ORDER BY created_ms, version`;

// ---------------------------------------------------------------------------------------------
// execution_events + workflow_executions: the commit

export const EXECUTION_COLUMNS =
  `execution_id, run_id, root_id, parent_id, workflow, version, status,
  input, output, error, created_ms, closed_ms, updated_ms, last_seq`;

/**
 * What reads answer, for the table or alias `t`: the row's columns, with `last_seq` and
 * `updated_ms` from the run's newest event when it is past the row's. A commit (a single server's
 * or a shared server's owned one) leaves the row alone for an append that only moves the history
 * (AppendItem.steady); each is an index seek on `execution_events_pkey` (run_id, seq).
 */
export const executionReadColumns = (t: string) =>
  `${t}.execution_id, ${t}.run_id, ${t}.root_id, ${t}.parent_id, ${t}.workflow, ${t}.version,
  ${t}.status, ${t}.input, ${t}.output, ${t}.error, ${t}.created_ms, ${t}.closed_ms,
  coalesce((SELECT e.time_ms FROM execution_events e WHERE e.run_id = ${t}.run_id
            AND e.seq > ${t}.last_seq ORDER BY e.seq DESC LIMIT 1), ${t}.updated_ms) AS updated_ms,
  greatest(${t}.last_seq, (SELECT max(e.seq) FROM execution_events e
                           WHERE e.run_id = ${t}.run_id)) AS last_seq`;

const READ_COLUMNS = executionReadColumns("workflow_executions");

/**
 * The commit of a batch, as ONE autocommit statement (one round trip, atomic): data-modifying
 * CTEs insert every event and write every execution row.
 *
 * - $1 is a jsonb array of execution rows plus `is_create`, one per execution id (the store
 *   merges several items of one execution first: two CTEs must not touch the same row).
 * - $2 is a jsonb array of `{run_id, execution_id, data}`; seq, type and time_ms are read from
 *   the event object itself.
 * - `created` is a plain INSERT: an existing id raises unique_violation on
 *   `workflow_executions_pkey`, which aborts the whole statement (nothing is written) and which
 *   the store maps to DuplicateExecutionError. A second writer of one seq raises it on
 *   `execution_events_pkey`.
 * - `updated` upserts; `created_ms` is kept from the insert (it is the listing order).
 *
 * The fenced form ($3 = the term this server leads) first locks the cluster row FOR SHARE, so
 * no new leader can bump the term until this statement commits, and writes nothing unless the
 * term is still $3; it answers the current `term`, and the store raises FencedError when it
 * differs. That is Temporal's range-id check, in the same statement as the writes.
 */
function commitStatement(fenced: boolean): string {
  const guard = fenced ? "(SELECT term FROM fence) = $3::bigint" : "true";
  return `
WITH ${fenced ? "fence AS (SELECT term FROM orbit_cluster WHERE id = 1 FOR SHARE)," : ""}
item AS (
  SELECT * FROM jsonb_to_recordset($1::jsonb) AS i(
    execution_id text, run_id text, root_id text, parent_id text, workflow text, version text,
    status text, input jsonb, output jsonb, error jsonb, created_ms bigint, closed_ms bigint,
    updated_ms bigint, last_seq bigint, is_create boolean, wake_at_ms bigint)
),
ev AS (
  INSERT INTO execution_events (run_id, seq, execution_id, type, time_ms, data)
  SELECT e.run_id, (e.data->>'seq')::bigint, e.execution_id, e.data->>'type',
    (e.data->>'time_ms')::bigint, e.data
  FROM jsonb_to_recordset($2::jsonb) AS e(run_id text, execution_id text, data jsonb)
  WHERE ${guard}
  RETURNING 1
),
created AS (
  INSERT INTO workflow_executions (${EXECUTION_COLUMNS}, wake_at_ms)
  SELECT ${EXECUTION_COLUMNS}, wake_at_ms FROM item WHERE is_create AND ${guard}
  RETURNING 1
),
updated AS (
  INSERT INTO workflow_executions (${EXECUTION_COLUMNS}, wake_at_ms)
  SELECT ${EXECUTION_COLUMNS}, wake_at_ms FROM item WHERE NOT is_create AND ${guard}
  ON CONFLICT (execution_id) DO UPDATE SET
    run_id = excluded.run_id, root_id = excluded.root_id, parent_id = excluded.parent_id,
    workflow = excluded.workflow, version = excluded.version, status = excluded.status,
    input = excluded.input, output = excluded.output, error = excluded.error,
    closed_ms = excluded.closed_ms, updated_ms = excluded.updated_ms,
    last_seq = excluded.last_seq, wake_at_ms = excluded.wake_at_ms
  RETURNING 1
)
SELECT (SELECT count(*) FROM ev) AS events,
  (SELECT count(*) FROM created) + (SELECT count(*) FROM updated) AS executions
  ${fenced ? ", (SELECT term FROM fence) AS term" : ""}`;
}

/** The commit without a fence (single server). Params: $1 rows, $2 events. */
export const COMMIT = commitStatement(false);

/** The commit of a clustered leader. Params: $1 rows, $2 events, $3 term. */
export const COMMIT_FENCED = commitStatement(true);

// ---------------------------------------------------------------------------------------------
// execution_events: reads

/** One page of a run's history. Params: $1 run_id, $2 after_seq, $3 limit. */
export const READ_HISTORY = `
SELECT data FROM execution_events WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`;

// ---------------------------------------------------------------------------------------------
// workflow_executions: reads

/** One execution. Params: $1 execution_id. */
export const GET_EXECUTION = `
SELECT ${READ_COLUMNS} FROM workflow_executions WHERE execution_id = $1`;

/**
 * Keyset paging, newest first: rows strictly after the cursor ($1 created_ms, $2 execution_id)
 * in (created_ms DESC, execution_id DESC) order. The first page passes a cursor above every
 * row. One statement per filter combination, so each is planned for its own index.
 */
const LIST_WHERE = "(created_ms, execution_id) < ($1, $2)";
const LIST_ORDER = "ORDER BY created_ms DESC, execution_id DESC";

/** Params: $1 created_ms, $2 execution_id, $3 limit. */
export const LIST_EXECUTIONS = `
SELECT ${READ_COLUMNS} FROM workflow_executions
WHERE ${LIST_WHERE} ${LIST_ORDER} LIMIT $3`;

/** Params: $1 created_ms, $2 execution_id, $3 limit, $4 workflow. */
export const LIST_EXECUTIONS_BY_WORKFLOW = `
SELECT ${READ_COLUMNS} FROM workflow_executions
WHERE workflow = $4 AND ${LIST_WHERE} ${LIST_ORDER} LIMIT $3`;

/** Params: $1 created_ms, $2 execution_id, $3 limit, $4 status. */
export const LIST_EXECUTIONS_BY_STATUS = `
SELECT ${READ_COLUMNS} FROM workflow_executions
WHERE status = $4 AND ${LIST_WHERE} ${LIST_ORDER} LIMIT $3`;

/** Params: $1 created_ms, $2 execution_id, $3 limit, $4 workflow, $5 status. */
export const LIST_EXECUTIONS_BY_WORKFLOW_AND_STATUS = `
SELECT ${READ_COLUMNS} FROM workflow_executions
WHERE workflow = $4 AND status = $5 AND ${LIST_WHERE} ${LIST_ORDER} LIMIT $3`;

/**
 * Executions to recover at start-up with their whole current-run histories, in one statement
 * (one snapshot: a history never runs past its row's last_seq).
 */
export const LOAD_RUNNING = `
SELECT ${executionReadColumns("x")},
  coalesce((SELECT json_agg(e.data ORDER BY e.seq) FROM execution_events e
            WHERE e.run_id = x.run_id), '[]'::json) AS events
FROM workflow_executions x WHERE x.status = 'running'
ORDER BY x.created_ms, x.execution_id`;

/**
 * Running executions to load at start-up (with work in flight, wake_at_ms 0, or a timer due
 * at or before $1), with their whole current-run histories, in one statement. The rest are
 * loaded when something happens to them.
 */
export const LOAD_RUNNING_DUE = `
SELECT ${executionReadColumns("x")},
  coalesce((SELECT json_agg(e.data ORDER BY e.seq) FROM execution_events e
            WHERE e.run_id = x.run_id), '[]'::json) AS events
FROM workflow_executions x
WHERE x.wake_at_ms IS NOT NULL AND x.wake_at_ms <= $1 AND x.status = 'running'
ORDER BY x.created_ms, x.execution_id`;

/**
 * Running executions whose next timer is due at or before $1, in (wake_at_ms, execution_id)
 * order after the keyset ($2, $3), at most $4.
 */
export const LIST_WAKING = `
SELECT execution_id, wake_at_ms FROM workflow_executions
WHERE wake_at_ms IS NOT NULL AND wake_at_ms > 0 AND wake_at_ms <= $1
  AND (wake_at_ms, execution_id) > ($2::bigint, $3::text) AND status = 'running'
ORDER BY wake_at_ms, execution_id LIMIT $4`;

/** Number of running executions (the `--max-active-executions` gate). */
export const COUNT_RUNNING =
  "SELECT count(*) AS n FROM workflow_executions WHERE status = 'running'";

// ---------------------------------------------------------------------------------------------
// orbit_cluster

/** The current leadership term (for the fence's error message and for tests). */
export const GET_TERM = "SELECT term FROM orbit_cluster WHERE id = 1";

// ---------------------------------------------------------------------------------------------
// orbit_schedules (lib/schedules/scheduler.ts is the only writer of claims, counts and next_fire_ms
// advances; lib/schedules/service.ts writes definitions).

const SCHEDULE_COLUMNS = `schedule_id, spec, workflow, next_fire_ms, paused, fired, skipped,
  claimed_by, claimed_until_ms, created_ms, updated_ms, buffered_ms, last_fired_ms`;

/**
 * Wraps one UPDATE of a schedule so that it answers `n` (rows written) and, fenced, `term`.
 * The fenced form ($term = the term this server leads) locks the cluster row FOR SHARE, so no
 * new leader can bump the term until this statement commits, and writes nothing unless the term
 * is still $term (the same check as COMMIT_FENCED); the store raises FencedError when the
 * answered term differs.
 */
function scheduleWrite(update: string, termParam: number | null): string {
  if (termParam === null) {
    return `WITH done AS (${update} RETURNING 1)
SELECT (SELECT count(*) FROM done) AS n, NULL::bigint AS term`;
  }
  return `
WITH fence AS (SELECT term FROM orbit_cluster WHERE id = 1 FOR SHARE),
done AS (${update} AND (SELECT term FROM fence) = $${termParam}::bigint RETURNING 1)
SELECT (SELECT count(*) FROM done) AS n, (SELECT term FROM fence) AS term`;
}

/**
 * Inserts a schedule unless its id exists; answers the id only when it inserted (409
 * SCHEDULE_EXISTS otherwise). Params: $1…$13 in SCHEDULE_COLUMNS order ($2 spec as jsonb).
 */
export const INSERT_SCHEDULE = `
INSERT INTO orbit_schedules (${SCHEDULE_COLUMNS})
VALUES ($1, $2::jsonb, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
ON CONFLICT (schedule_id) DO NOTHING
RETURNING schedule_id`;

/** One schedule. Params: $1 schedule_id. */
export const GET_SCHEDULE = `
SELECT ${SCHEDULE_COLUMNS} FROM orbit_schedules WHERE schedule_id = $1`;

/** Every schedule, by id. */
export const LIST_SCHEDULES = `
SELECT ${SCHEDULE_COLUMNS} FROM orbit_schedules ORDER BY schedule_id`;

/**
 * Writes a changed definition (PATCH, pause, resume). next_fire_ms moves only when $5 is true:
 * otherwise the scheduler's advance, which may be running, keeps its value.
 * Params: $1 schedule_id, $2 spec (jsonb), $3 workflow, $4 paused, $5 reset_next,
 * $6 next_fire_ms, $7 now.
 */
export const UPDATE_SCHEDULE = `
UPDATE orbit_schedules SET spec = $2::jsonb, workflow = $3, paused = $4,
  next_fire_ms = CASE WHEN $5::boolean THEN $6::bigint ELSE next_fire_ms END,
  updated_ms = $7
WHERE schedule_id = $1
RETURNING ${SCHEDULE_COLUMNS}`;

/** Params: $1 schedule_id. */
export const DELETE_SCHEDULE = "DELETE FROM orbit_schedules WHERE schedule_id = $1 RETURNING 1";

/**
 * Schedules with work for the scheduler at $1: an occurrence due, or a buffered one waiting
 * for its predecessor to end; not paused; not claimed by another owner while the claim lives
 * (the owner's own live claim, left by a pass that failed half-way, does not keep it out).
 * Params: $1 now, $2 owner, $3 limit.
 */
export const DUE_SCHEDULES = `
SELECT ${SCHEDULE_COLUMNS} FROM orbit_schedules
WHERE NOT paused AND (next_fire_ms <= $1 OR buffered_ms IS NOT NULL)
  AND (claimed_by IS NULL OR claimed_until_ms < $1 OR claimed_by = $2)
ORDER BY next_fire_ms, schedule_id LIMIT $3`;

/** The earliest next occurrence of any schedule that is not paused (the scheduler's timer). */
export const NEXT_SCHEDULE_FIRE =
  "SELECT min(next_fire_ms) AS next FROM orbit_schedules WHERE NOT paused";

const CLAIM = `
UPDATE orbit_schedules SET claimed_by = $3, claimed_until_ms = $4
WHERE schedule_id = $1 AND next_fire_ms IS NOT DISTINCT FROM $2::bigint AND NOT paused
  AND (claimed_by IS NULL OR claimed_until_ms < $5 OR claimed_by = $3)`;

/**
 * The claim of an occurrence: a compare-and-set on the next_fire_ms the scheduler read, so of
 * several schedulers that read the same row exactly one takes it (`n` 1).
 * Params: $1 schedule_id, $2 next_fire_ms, $3 owner, $4 until_ms, $5 now.
 */
export const CLAIM_SCHEDULE = scheduleWrite(CLAIM, null);
/** CLAIM_SCHEDULE of a clustered leader. Params: those of CLAIM_SCHEDULE, $6 term. */
export const CLAIM_SCHEDULE_FENCED = scheduleWrite(CLAIM, 6);

const RENEW = `
UPDATE orbit_schedules SET claimed_until_ms = $4
WHERE schedule_id = $1 AND claimed_by = $2 AND next_fire_ms IS NOT DISTINCT FROM $3::bigint`;

/**
 * The renewal of a claim by its owner before each start of its pass: a compare-and-set on the
 * owner and the next_fire_ms the claim was taken at, which extends the lease (`n` 1). Nothing
 * else can have moved the row meanwhile: another claim changes claimed_by, an advance releases
 * it, a PATCH of the timing moves next_fire_ms, a new leader drops the claims.
 * Params: $1 schedule_id, $2 owner, $3 claimed next_fire_ms, $4 until_ms.
 */
export const RENEW_SCHEDULE_CLAIM = scheduleWrite(RENEW, null);
/** RENEW_SCHEDULE_CLAIM of a clustered leader. Params: those of RENEW_SCHEDULE_CLAIM, $5 term. */
export const RENEW_SCHEDULE_CLAIM_FENCED = scheduleWrite(RENEW, 5);

const ADVANCE = `
UPDATE orbit_schedules SET
  next_fire_ms = CASE WHEN next_fire_ms IS NOT DISTINCT FROM $3::bigint THEN $4::bigint
    ELSE next_fire_ms END,
  buffered_ms = $5::bigint,
  last_fired_ms = coalesce($6::bigint, last_fired_ms),
  fired = fired + $7, skipped = skipped + $8,
  claimed_by = NULL, claimed_until_ms = NULL
WHERE schedule_id = $1 AND claimed_by = $2`;

/**
 * The advance after an occurrence was handled: the counts, the buffered occurrence, the next
 * occurrence and the release of the claim, only by the claim's owner (the second
 * compare-and-set). If a PATCH moved next_fire_ms meanwhile, its value stays; the counts land.
 * Params: $1 schedule_id, $2 owner, $3 claimed next_fire_ms, $4 next_fire_ms, $5 buffered_ms,
 * $6 last_fired_ms (NULL keeps the stored one), $7 fired, $8 skipped.
 */
export const ADVANCE_SCHEDULE = scheduleWrite(ADVANCE, null);
/** ADVANCE_SCHEDULE of a clustered leader. Params: those of ADVANCE_SCHEDULE, $9 term. */
export const ADVANCE_SCHEDULE_FENCED = scheduleWrite(ADVANCE, 9);

const COUNT = `
UPDATE orbit_schedules SET fired = fired + $2, skipped = skipped + $3,
  last_fired_ms = coalesce($4::bigint, last_fired_ms)
WHERE schedule_id = $1`;

/**
 * Adds to the counts outside a claim (a trigger). Params: $1 schedule_id, $2 fired,
 * $3 skipped, $4 last_fired_ms (NULL keeps the stored one).
 */
export const COUNT_SCHEDULE = scheduleWrite(COUNT, null);
/** COUNT_SCHEDULE of a clustered leader. Params: those of COUNT_SCHEDULE, $5 term. */
export const COUNT_SCHEDULE_FENCED = scheduleWrite(COUNT, 5);

/** Drops every claim: a new leader's (or a restarted single server's) first act. */
export const DROP_SCHEDULE_CLAIMS = `
UPDATE orbit_schedules SET claimed_by = NULL, claimed_until_ms = NULL
WHERE claimed_by IS NOT NULL
RETURNING 1`;

/**
 * Running executions of one schedule: ids `<schedule_id>@…`, read as the key range
 * [$1, $2) = [`<id>@`, `<id>A`) of the "C"-collated key ('A' follows '@'; a schedule id holds
 * no '@').
 */
export const RUNNING_SCHEDULE_EXECUTIONS = `
SELECT execution_id FROM workflow_executions
WHERE execution_id >= $1 AND execution_id < $2 AND status = 'running'
ORDER BY execution_id`;

/**
 * Executions of any status with ids in [$1, $2] (the "C"-collated key: byte order), at most $3:
 * the occurrences of a schedule between two ISO times (ids `<schedule_id>@<ISO>`).
 */
export const EXECUTION_IDS_BETWEEN = `
SELECT execution_id FROM workflow_executions
WHERE execution_id >= $1 AND execution_id <= $2
ORDER BY execution_id LIMIT $3`;
