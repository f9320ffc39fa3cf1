/**
 * orbit_tasks: the shared queue (claims, releases, confirmations).
 */
import { list } from "./common.ts";

/**
 * Claims up to $2 queued tasks a session serves, preferring those of executions this node
 * owns, and in the same statement writes a `dispatched` inbox entry for each one whose owner
 * is another node (so the owner records StepDispatched); the caller then notifies those owners
 * (NOTIFY orbit_inbox, in a statement of its own: see COMMIT_OWNED). SKIP LOCKED lets servers
 * claim different rows at once.
 *
 * Which rows: a worker slot whose connection a balancer pins to this server reports its
 * result here; when this node owns the execution, the result needs no forward and its eager
 * dispatch keeps the execution on this node. So among the queued rows, those this node owns
 * go first, by a head start of $7 ms: a row ranks by `enqueued_ms`, minus $7 when this node
 * owns its execution. A row owned elsewhere therefore waits at most $7 ms longer than in
 * strict age order, whoever polls here (a node without workers of its own, or another node's
 * backlog, is not starved), and among rows of one kind the order is still by age.
 *
 * Cost on a long queue: `cand` reads, per registration, at most `window` of the oldest
 * matching rows from `orbit_tasks_claim_idx` (task_name, enqueued_ms of queued rows) and keeps the
 * `window` oldest of them. Only those are looked up in `orbit_owners` and ranked; the ranked
 * rows are then locked, LIMIT $2, SKIP LOCKED. `t.state = 'queued'` is repeated on the locked
 * scan so that a row claimed by another server after this statement's snapshot is skipped
 * (READ COMMITTED re-checks the locked row's new version against it). A window whose rows are
 * all locked by concurrent claims yields nothing; the window is a few times $2 (and at least
 * 64) so that this needs more concurrent claims than a cluster runs, and the next NOTIFY or
 * the poll's one-second re-check looks again.
 *
 * Plans made on an empty queue (the statement is prepared once per connection and its generic
 * plan kept until an ANALYZE) must not read the backlog either: `cand` orders by `enqueued_ms`
 * alone, which the claim index serves in order (with `, t.id` it sorted every queued row of the
 * task), and `c` finds the window's rows by unit (`t.unit = ANY (ARRAY(…))`; its state test
 * is written `(t.state = 'queued') IS TRUE` so that the claim index, whose `queued` range is the
 * whole backlog, is not a way to it), and `win` looks each row's owner up by its key (joined,
 * a plan made while orbit_owners was empty read all of it once the table had one more column:
 * 3,131 rows for that claim). With the pool's `enable_seqscan = off`
 * (SHARED_CONNECTION_SETTINGS), a claim on a 3,000-row backlog read 6,067 rows before, under 500
 * now. Rows queued in the same millisecond enter the window in any order; `c` still takes them
 * by rank, then id.
 *
 * The window is written into the text, not passed: with a parameter there, a generic plan
 * (the clients prepare statements; PostgreSQL switches to one after five runs when it looks
 * no dearer, e.g. while the queue is short) guesses 10% of the queue and joins it by
 * sequential scans of orbit_tasks and orbit_owners, about 100 ms a claim at 100,000 queued
 * rows; with a constant every plan stays on the indexes (below a millisecond). Callers use a
 * few sizes (claimWindow in cluster/shared/claims.ts: powers of two), so a few statements.
 * (A plan made while the table was nearly empty still scans it until autovacuum's next
 * ANALYZE of the busy queue table replaces it, as for every statement here.)
 *
 * Params: $1 registrations [{task_name, contract_version, lang}] (lang: the registration's
 * language, else the session's runtime), $2 limit, $3 me, $4 session_id, $5 worker_id, $6 now,
 * $7 head start of own rows in ms.
 */
export function claimTasks(window: number): string {
  if (!Number.isSafeInteger(window) || window < 1) throw new Error(`bad claim window ${window}`);
  let text = claimTexts.get(window);
  if (!text) claimTexts.set(window, text = claimText(window));
  return text;
}

const claimTexts = new Map<number, string>();

const claimText = (window: number) => `
WITH reg AS (
  SELECT r.task_name, r.contract_version, array_agg(r.lang) AS langs
  FROM jsonb_to_recordset($1::jsonb) AS r(task_name text, contract_version text, lang text)
  GROUP BY r.task_name, r.contract_version
),
cand AS (
  SELECT q.id, q.unit, q.execution_id, q.enqueued_ms FROM reg r CROSS JOIN LATERAL (
    SELECT t.id, t.unit, t.execution_id, t.enqueued_ms FROM orbit_tasks t
    WHERE t.state = 'queued' AND t.task_name = r.task_name
      AND t.contract_version = r.contract_version
      AND (t.language IS NULL OR t.language = 'any' OR t.language = ANY (r.langs))
    ORDER BY t.enqueued_ms LIMIT ${window}
  ) q
  ORDER BY q.enqueued_ms, q.id LIMIT ${window}
),
win AS (
  SELECT c.id, c.unit, c.enqueued_ms - CASE
      WHEN (SELECT o.node_id FROM orbit_owners o WHERE o.execution_id = c.execution_id) = $3
      THEN $7::bigint ELSE 0 END AS rank_ms
  FROM cand c
),
c AS (
  SELECT t.unit FROM win w JOIN orbit_tasks t ON t.unit = w.unit
  WHERE t.unit = ANY (ARRAY(SELECT unit FROM win)) AND (t.state = 'queued') IS TRUE
  ORDER BY w.rank_ms, t.id LIMIT $2 FOR UPDATE OF t SKIP LOCKED
),
claimed AS (
  UPDATE orbit_tasks t SET state = 'claimed', token = t.execution_id || '/' || gen_random_uuid(),
    claimed_by = $3, session_id = $4, claimed_ms = $6
  FROM c WHERE t.unit = c.unit
  RETURNING t.id, t.execution_id, t.run_id, t.step, t.attempt, t.unit, t.token, t.payload
),
owner AS (
  SELECT c.*, o.node_id AS owner_node FROM claimed c
  LEFT JOIN orbit_owners o ON o.execution_id = c.execution_id
),
forwarded AS (
  INSERT INTO orbit_inbox (node_id, execution_id, kind, payload, created_ms)
  SELECT owner_node, execution_id, 'dispatched',
    jsonb_build_object('step', step, 'attempt', attempt, 'unit', unit, 'token', token,
      'worker_id', $5::text, 'worker_session', $4::text), $6
  FROM owner WHERE owner_node IS NOT NULL AND owner_node <> $3
  ORDER BY id
  RETURNING node_id
),
fw AS (SELECT count(*) AS n FROM forwarded)
SELECT o.*, (SELECT n FROM fw) AS forwarded FROM owner o ORDER BY o.id`;

/**
 * The rows still claimed by claims of this node whose statement failed on this side: it may have
 * committed with its answer lost (a connection that broke after the commit), and then nobody
 * would ever hand those rows to a worker or record their dispatch. A claim is found by its
 * session and its `claimed_ms`, unique per claim of a process (cluster/shared/claims.ts); each
 * row comes with its execution's owner. Rare (only after a failed claim), so no index serves
 * it. Params: $1 me, $2 [{session_id, claimed_ms}].
 */
export const LOST_CLAIM_ROWS = `
SELECT t.token, t.execution_id, t.step, o.node_id AS owner_node
FROM jsonb_to_recordset($2::jsonb) AS l(session_id text, claimed_ms bigint)
JOIN orbit_tasks t ON t.session_id = l.session_id AND t.claimed_ms = l.claimed_ms
LEFT JOIN orbit_owners o ON o.execution_id = t.execution_id
WHERE t.claimed_by = $1 AND (t.state = 'claimed') IS TRUE`;

/** Puts a claimed task back on the queue (its dispatch could not be recorded). Params: $1 token. */
/**
 * Claimed rows of queued units (the owner's memory has the step queued: it never recorded their
 * dispatch) whose claim was last confirmed before $2 and for whose execution no inbox entry
 * waits (a `dispatched` entry on its way is no stale claim). Found by the owner's audit
 * (Executions.startAudit): a claim whose recording was lost with a cut connection or a takeover
 * would hold the row, and the execution, for ever. Params: $1 units, $2 confirmed before (ms).
 */
export const STALE_CLAIMS = `
SELECT t.execution_id, t.unit, t.token FROM orbit_tasks t
WHERE t.unit = ANY (${list(1)}) AND (t.state = 'claimed') IS TRUE AND t.claimed_ms < $2
  AND NOT EXISTS (SELECT 1 FROM orbit_inbox i WHERE i.execution_id = t.execution_id)`;

export const REQUEUE_TASK = `
UPDATE orbit_tasks SET state = 'queued', token = NULL, claimed_by = NULL, session_id = NULL,
  claimed_ms = NULL
WHERE token = $1 AND state = 'claimed'`;

/** REQUEUE_TASK for a stale claim (STALE_CLAIMS), answering whether it was still claimed. */
export const REQUEUE_STALE_CLAIM = `${REQUEUE_TASK} RETURNING token`;

/** Marks a claimed attempt cancelled (the owner refused its dispatch). Params: $1 token. */
export const CANCEL_TASK = `
UPDATE orbit_tasks SET state = 'cancelled' WHERE token = $1 AND state = 'claimed'`;

/**
 * The attempts (task rows with a token: claimed or cancelled) of the executions a node just
 * took over or resumed, so their queue is rebuilt: claimed rows whose attempt the history does
 * not show dispatched go back on the queue (the claiming server died between claim and
 * dispatch); queued rows stay as they are. A token begins with its execution id and a slash,
 * so an execution's attempts are a range of the token index (bytewise, COLLATE "C"; the id
 * test drops the rows of an execution whose id extends this one's with a slash).
 * Params: $1 execution ids.
 */
export const TASKS_OF = `
SELECT t.execution_id, t.unit, t.token, t.state, t.claimed_by
FROM jsonb_array_elements_text($1::jsonb) AS x(id)
CROSS JOIN LATERAL (
  SELECT * FROM orbit_tasks t
  WHERE t.token >= x.id || '/' AND t.token < x.id || '0' AND t.execution_id = x.id
) t`;

/**
 * The cancel notices for a heartbeat, each reported once (the row goes): those of its session,
 * and those of the tokens it lists whatever session held them (a worker that registered again
 * still runs the attempts of its old session). Params: $1 session_id, $2 tokens.
 */
export const TAKE_CANCELLED = `
DELETE FROM orbit_tasks
WHERE state = 'cancelled' AND (session_id = $1 OR token = ANY (${list(2)}))
RETURNING token`;

/**
 * A heartbeat listed these attempts: their worker has them. `claimed_ms` is the last time the
 * attempt was confirmed (its claim, then every heartbeat naming it). Params: $1 tokens, $2 now.
 */
export const CONFIRM_TOKENS = `
UPDATE orbit_tasks SET claimed_ms = $2
WHERE token = ANY (${list(1)}) AND (state = 'claimed') IS TRUE`;

/** When the attempts were last confirmed (CONFIRM_TOKENS). Params: $1 tokens. */
export const CONFIRMED_AT = `
SELECT token, claimed_ms FROM orbit_tasks
WHERE token = ANY (${list(1)}) AND (state = 'claimed') IS TRUE`;

/** Which of these tokens have a task row. Params: $1 tokens. */
export const KNOWN_TOKENS = `
SELECT token FROM orbit_tasks WHERE token = ANY (${list(1)})`;

/** Queue depth per task (pending reasons, metrics). */
export const QUEUE_DEPTH = `
SELECT task_name, contract_version, count(*) AS n FROM orbit_tasks WHERE state = 'queued'
GROUP BY task_name, contract_version`;

/**
 * The inputs of tasks whose reply left them out (too large for a notification). A row written
 * without its payload (sharedChanges: an eager dispatch of the owner's own) is not answered, and
 * its task is not handed out. Params: $1 tokens.
 */
export const TASK_INPUTS = `
SELECT token, payload->'input' AS input FROM orbit_tasks
WHERE token = ANY (${list(1)}) AND jsonb_typeof(payload) = 'object'`;

/** The attempts a session holds (its claimed rows). Params: $1 session_id. */
export const CLAIMED_BY_SESSION = `
SELECT token, execution_id FROM orbit_tasks WHERE session_id = $1 AND state = 'claimed'`;
