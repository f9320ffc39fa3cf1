/**
 * orbit_sessions: worker sessions of the whole cluster.
 */
import { list } from "./common.ts";

const SESSION_COLUMNS = "session_id, worker_id, runtime, tasks, concurrency, last_contact_ms, " +
  "created_ms";

/** Params: $1 session_id, $2 worker_id, $3 runtime, $4 tasks, $5 concurrency, $6 now. */
export const INSERT_SESSION = `
INSERT INTO orbit_sessions (${SESSION_COLUMNS}) VALUES ($1, $2, $3, $4::jsonb, $5, $6, $6)`;

/** Params: $1 session_id. */
export const GET_SESSION = `SELECT ${SESSION_COLUMNS} FROM orbit_sessions WHERE session_id = $1`;

export const LIST_SESSIONS = `SELECT ${SESSION_COLUMNS} FROM orbit_sessions ORDER BY created_ms`;

/** How many sessions the cluster has (expired ones are deleted by EXPIRE_SESSIONS). */
export const COUNT_SESSIONS = "SELECT count(*)::int AS n FROM orbit_sessions";

/**
 * Who holds these attempts, for the workers file's checks on a server that does not hold their
 * executions: task, contract and the worker of the session each went to (null when that session
 * is gone). A token with no row is no live attempt. Params: $1 tokens.
 */
export const TOKEN_HOLDERS = `
SELECT t.token, t.task_name, t.contract_version, s.worker_id FROM orbit_tasks t
LEFT JOIN orbit_sessions s ON s.session_id = t.session_id
WHERE t.token = ANY (${list(1)}) AND t.state <> 'queued'`;

/**
 * Last contacts seen by this server since its last write; answers the sessions that still have
 * a row (one missing was removed by another server: expired, or unregistered). Params:
 * $1 [{id, ms}].
 *
 * Every server writes the contacts of the sessions it serves, and a worker's slots reach several
 * servers, so statements of different servers update the same rows. They lock them in one order
 * (by session id, `ORDER BY … FOR UPDATE` locks after sorting): in the order of each server's
 * list, two statements could each hold a row the other waits for, a deadlock that PostgreSQL
 * breaks only after `deadlock_timeout` (1 s) — and after a database restart, when every server
 * writes at once, one such wait after another held every request connection of every server
 * for seconds (chaos, shared mode).
 */
export const TOUCH_SESSIONS = `
WITH t AS (SELECT * FROM jsonb_to_recordset($1::jsonb) AS t(id text, ms bigint)),
l AS MATERIALIZED (
  SELECT s.session_id, t.ms FROM orbit_sessions s JOIN t ON t.id = s.session_id
  ORDER BY s.session_id FOR UPDATE OF s
)
UPDATE orbit_sessions s SET last_contact_ms = greatest(s.last_contact_ms, l.ms)
FROM l WHERE s.session_id = l.session_id
RETURNING s.session_id`;

/** Last contact of the sessions holding an owner's attempts. Params: $1 ids. */
export const SESSION_CONTACTS = `
SELECT session_id, last_contact_ms FROM orbit_sessions WHERE session_id = ANY (${list(1)})`;

/** Params: $1 session_id. */
export const DELETE_SESSION = "DELETE FROM orbit_sessions WHERE session_id = $1 RETURNING 1";

/**
 * Sessions silent for longer than $1 ms before $2 (now): removed by whoever sees them. Rows are
 * locked in session id order, as TOUCH_SESSIONS locks them; one written meanwhile is checked
 * again after the wait and kept.
 */
export const EXPIRE_SESSIONS = `
DELETE FROM orbit_sessions s USING (
  SELECT session_id FROM orbit_sessions WHERE last_contact_ms < $2::bigint - $1::bigint
  ORDER BY session_id FOR UPDATE
) e
WHERE s.session_id = e.session_id RETURNING s.session_id`;

/** Every session of the cluster with the attempts it holds (claimed rows), oldest first. */
export const SESSIONS_WITH_IN_FLIGHT = `
SELECT s.*, (SELECT count(*) FROM orbit_tasks t WHERE t.session_id = s.session_id
  AND t.state = 'claimed') AS in_flight FROM orbit_sessions s ORDER BY s.created_ms`;
