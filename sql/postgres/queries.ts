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
 * (the other insert is not in this statement's snapshot), and the caller then reads it.
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

const EXECUTION_COLUMNS = `execution_id, run_id, root_id, parent_id, workflow, version, status,
  input, output, error, created_ms, closed_ms, updated_ms, last_seq`;

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
    updated_ms bigint, last_seq bigint, is_create boolean)
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
  INSERT INTO workflow_executions (${EXECUTION_COLUMNS})
  SELECT ${EXECUTION_COLUMNS} FROM item WHERE is_create AND ${guard}
  RETURNING 1
),
updated AS (
  INSERT INTO workflow_executions (${EXECUTION_COLUMNS})
  SELECT ${EXECUTION_COLUMNS} FROM item WHERE NOT is_create AND ${guard}
  ON CONFLICT (execution_id) DO UPDATE SET
    run_id = excluded.run_id, root_id = excluded.root_id, parent_id = excluded.parent_id,
    workflow = excluded.workflow, version = excluded.version, status = excluded.status,
    input = excluded.input, output = excluded.output, error = excluded.error,
    closed_ms = excluded.closed_ms, updated_ms = excluded.updated_ms,
    last_seq = excluded.last_seq
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
SELECT ${EXECUTION_COLUMNS} FROM workflow_executions WHERE execution_id = $1`;

/**
 * Keyset paging, newest first: rows strictly after the cursor ($1 created_ms, $2 execution_id)
 * in (created_ms DESC, execution_id DESC) order. The first page passes a cursor above every
 * row. One statement per filter combination, so each is planned for its own index.
 */
const LIST_WHERE = "(created_ms, execution_id) < ($1, $2)";
const LIST_ORDER = "ORDER BY created_ms DESC, execution_id DESC";

/** Params: $1 created_ms, $2 execution_id, $3 limit. */
export const LIST_EXECUTIONS = `
SELECT ${EXECUTION_COLUMNS} FROM workflow_executions
WHERE ${LIST_WHERE} ${LIST_ORDER} LIMIT $3`;

/** Params: $1 created_ms, $2 execution_id, $3 limit, $4 workflow. */
export const LIST_EXECUTIONS_BY_WORKFLOW = `
SELECT ${EXECUTION_COLUMNS} FROM workflow_executions
WHERE workflow = $4 AND ${LIST_WHERE} ${LIST_ORDER} LIMIT $3`;

/** Params: $1 created_ms, $2 execution_id, $3 limit, $4 status. */
export const LIST_EXECUTIONS_BY_STATUS = `
SELECT ${EXECUTION_COLUMNS} FROM workflow_executions
WHERE status = $4 AND ${LIST_WHERE} ${LIST_ORDER} LIMIT $3`;

/** Params: $1 created_ms, $2 execution_id, $3 limit, $4 workflow, $5 status. */
export const LIST_EXECUTIONS_BY_WORKFLOW_AND_STATUS = `
SELECT ${EXECUTION_COLUMNS} FROM workflow_executions
WHERE workflow = $4 AND status = $5 AND ${LIST_WHERE} ${LIST_ORDER} LIMIT $3`;

/**
 * Executions to recover at start-up with their whole current-run histories, in one statement
 * (one snapshot: a history never runs past its row's last_seq).
 */
export const LOAD_RUNNING = `
SELECT ${EXECUTION_COLUMNS},
  coalesce((SELECT json_agg(e.data ORDER BY e.seq) FROM execution_events e
            WHERE e.run_id = x.run_id), '[]'::json) AS events
FROM workflow_executions x WHERE x.status = 'running'
ORDER BY x.created_ms, x.execution_id`;

/** Number of running executions (the `--max-active-executions` gate). */
export const COUNT_RUNNING =
  "SELECT count(*) AS n FROM workflow_executions WHERE status = 'running'";

// ---------------------------------------------------------------------------------------------
// orbit_cluster

/** The current leadership term (for the fence's error message and for tests). */
export const GET_TERM = "SELECT term FROM orbit_cluster WHERE id = 1";
