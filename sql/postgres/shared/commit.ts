/**
 * Shared mode: the owned commit (every append fenced by owner and epoch) and the settings of shared-mode connections.
 */
import { EXECUTION_COLUMNS } from "../queries.ts";

/** The parts of an owned commit a batch uses (the statement leaves the others out). */
export interface CommitOwnedParts {
  /** An item creates its execution. */
  create: boolean;
  /** An item creates a child (its parent's ownership is checked). */
  child: boolean;
  /** An item appends to an existing execution (its ownership is checked). */
  update: boolean;
  /** An existing execution closes (its ownership row goes). */
  close: boolean;
  enqueue: boolean;
  gone: boolean;
  cancel: boolean;
  done: boolean;
  inbox: boolean;
  take: boolean;
}

/** The list parameters of COMMIT_OWNED after $1 rows and $2 events, in their order. */
export const COMMIT_OWNED_LISTS = [
  "enqueue",
  "gone",
  "cancel",
  "done",
  "inbox",
  "take",
] as const;

const ALL_PARTS: CommitOwnedParts = {
  create: true,
  child: true,
  update: true,
  close: true,
  enqueue: true,
  gone: true,
  cancel: true,
  done: true,
  inbox: true,
  take: true,
};

const PART_NAMES = Object.keys(ALL_PARTS) as (keyof CommitOwnedParts)[];
const commitOwnedCache = new Map<string, string>();

/**
 * COMMIT_OWNED (below) for the parts a batch uses: a CTE whose list is empty is left out (each costs
 * 10–50 µs of the executor even when it writes nothing, and most commits carry no creates,
 * gone or cancelled units, inbox entries or takes). The lists present are numbered from $3 in
 * COMMIT_OWNED_LISTS order. One text per combination, cached (a server prepares the few its
 * traffic uses).
 */
export function commitOwned(parts: CommitOwnedParts): string {
  const key = PART_NAMES.map((k) => (parts[k] ? "1" : "0")).join("");
  let text = commitOwnedCache.get(key);
  if (text === undefined) {
    text = commitOwnedStatement(parts);
    commitOwnedCache.set(key, text);
  }
  return text;
}

function commitOwnedStatement(parts: CommitOwnedParts): string {
  const n: Partial<Record<(typeof COMMIT_OWNED_LISTS)[number], number>> = {};
  let next = 3;
  for (const l of COMMIT_OWNED_LISTS) {
    if (parts[l]) n[l] = next++;
  }
  const p = (l: (typeof COMMIT_OWNED_LISTS)[number]) => `$${n[l]}::jsonb`;
  const cte: string[] = [];
  cte.push(`item AS (
  SELECT * FROM jsonb_to_recordset($1::jsonb) AS i(
    execution_id text, run_id text, root_id text, parent_id text, workflow text, version text,
    status text, input jsonb, output jsonb, error jsonb, created_ms bigint, closed_ms bigint,
    updated_ms bigint, last_seq bigint, is_create boolean, owner_node text, owner_epoch bigint,
    wake_at_ms bigint, steady boolean, owner_instance text)
)`);
  if (parts.update) {
    cte.push(`own AS (
  SELECT o.execution_id, o.node_id, o.epoch FROM orbit_owners o
  WHERE o.execution_id = ANY (ARRAY(SELECT execution_id FROM item WHERE NOT is_create))
  FOR SHARE
)`);
  }
  if (parts.child) {
    // A child is created by the owner of its parent (children are owned with their root):
    // the parent's row must name this node at the epoch the child is given.
    cte.push(`parent_own AS (
  SELECT o.execution_id, o.node_id, o.epoch FROM orbit_owners o
  WHERE o.execution_id = ANY (ARRAY(SELECT parent_id FROM item WHERE is_create))
  FOR SHARE
)`);
  }
  if (parts.update || parts.child) {
    const create = parts.child
      ? `i.is_create AND (i.parent_id IS NULL OR EXISTS (SELECT 1 FROM parent_own p
      WHERE p.execution_id = i.parent_id AND p.node_id = i.owner_node
        AND p.epoch = i.owner_epoch))`
      : "i.is_create";
    cte.push(`owned AS (
  SELECT i.execution_id FROM item i${
      parts.update ? " LEFT JOIN own o ON o.execution_id = i.execution_id" : ""
    }
  WHERE (${create})${
      parts.update ? " OR (o.node_id = i.owner_node AND o.epoch = i.owner_epoch)" : ""
    }
)`);
  } else if (parts.take) {
    cte.push(`owned AS (SELECT execution_id FROM item)`);
  }
  // The executions whose part may be written so far: owned (or created), then less those with
  // an inbox entry gone, then less lost takes (ok).
  let base = parts.update || parts.child || parts.take ? "owned" : "item";
  if (parts.inbox) {
    // The entries this commit applies, locked first: one withdrawn meanwhile (the forwarding
    // server gave up waiting and deleted it, then answered "nothing was applied") or applied
    // by an earlier commit that landed is not returned, and its execution's part is not
    // written (`withdrawn`). A withdrawal that comes later waits for this commit, then finds
    // the entry gone and awaits the reply.
    cte.push(`inbox_list AS (
  SELECT * FROM jsonb_to_recordset(${p("inbox")}) AS x(execution_id text, seq bigint)
)`);
    cte.push(`inbox_held AS MATERIALIZED (
  SELECT seq FROM orbit_inbox WHERE seq = ANY (ARRAY(SELECT seq FROM inbox_list))
  FOR UPDATE
)`);
    cte.push(`held AS (
  SELECT b.execution_id FROM ${base} b WHERE NOT EXISTS (
    SELECT 1 FROM inbox_list x WHERE x.execution_id = b.execution_id
      AND x.seq NOT IN (SELECT seq FROM inbox_held))
)`);
    base = "held";
  }
  // The items written: those owned (and every create), less withdrawn inbox entries and lost
  // takes.
  const ok = parts.take ? "ok" : base;
  if (parts.take) {
    cte.push(`take AS (
  SELECT * FROM jsonb_to_recordset(${p("take")}) AS k(execution_id text, unit text, token text,
    session_id text, claimed_by text, claimed_ms bigint, head_ms bigint)
)`);
    cte.push(`took AS (
  UPDATE orbit_tasks t SET state = 'claimed', token = k.token, session_id = k.session_id,
    claimed_by = k.claimed_by, claimed_ms = k.claimed_ms
  FROM take k
  WHERE t.unit = ANY (ARRAY(
      SELECT unit FROM take WHERE execution_id IN (SELECT execution_id FROM ${base})))
    AND t.unit = k.unit AND (t.state = 'queued') IS TRUE
    AND (SELECT min(x.enqueued_ms) FROM orbit_tasks x
         WHERE x.state = 'queued' AND x.task_name = t.task_name
           AND x.contract_version = t.contract_version) >= t.enqueued_ms - k.head_ms
  RETURNING k.token
)`);
    // A take is lost when its row was neither claimed here nor claimed for this dispatch
    // already (every sub-statement reads the snapshot from before `took`).
    cte.push(`ok AS (
  SELECT o.execution_id FROM ${base} o WHERE NOT EXISTS (
    SELECT 1 FROM take k WHERE k.execution_id = o.execution_id
      AND NOT EXISTS (SELECT 1 FROM took WHERE took.token = k.token)
      AND k.token IS DISTINCT FROM (SELECT t.token FROM orbit_tasks t WHERE t.unit = k.unit))
)`);
  }
  cte.push(`ev AS (
  INSERT INTO execution_events (run_id, seq, execution_id, type, time_ms, data)
  SELECT e.run_id, (e.data->>'seq')::bigint, e.execution_id, e.data->>'type',
    (e.data->>'time_ms')::bigint, e.data
  FROM jsonb_to_recordset($2::jsonb) AS e(run_id text, execution_id text, data jsonb)
  WHERE e.execution_id IN (SELECT execution_id FROM ${ok})
  RETURNING 1
)`);
  const written: string[] = [];
  const owners: string[] = [];
  const tasks: string[] = [];
  if (parts.create) {
    cte.push(`created AS (
  INSERT INTO workflow_executions (${EXECUTION_COLUMNS}, wake_at_ms)
  SELECT ${EXECUTION_COLUMNS}, wake_at_ms FROM item
  WHERE is_create AND execution_id IN (SELECT execution_id FROM ${ok})
  RETURNING 1
)`);
    cte.push(`owner_in AS (
  INSERT INTO orbit_owners (execution_id, root_id, node_id, epoch, since_ms, instance)
  SELECT execution_id, root_id, owner_node, owner_epoch, updated_ms, owner_instance FROM item
  WHERE is_create AND status IN ('running', 'continued')
    AND execution_id IN (SELECT execution_id FROM ${ok})
  RETURNING 1
)`);
    written.push("(SELECT count(*) FROM created)");
    owners.push("(SELECT count(*) FROM owner_in)");
  }
  if (parts.update) {
    cte.push(`updated AS (
  INSERT INTO workflow_executions (${EXECUTION_COLUMNS}, wake_at_ms)
  SELECT ${EXECUTION_COLUMNS}, wake_at_ms FROM item
  WHERE NOT is_create AND steady IS NOT TRUE AND execution_id IN (SELECT execution_id FROM ${ok})
  ON CONFLICT (execution_id) DO UPDATE SET
    run_id = excluded.run_id, root_id = excluded.root_id, parent_id = excluded.parent_id,
    workflow = excluded.workflow, version = excluded.version, status = excluded.status,
    input = excluded.input, output = excluded.output, error = excluded.error,
    closed_ms = excluded.closed_ms, updated_ms = excluded.updated_ms,
    last_seq = excluded.last_seq, wake_at_ms = excluded.wake_at_ms
  RETURNING 1
)`);
    written.push("(SELECT count(*) FROM updated)");
  }
  if (parts.close) {
    cte.push(`owner_out AS (
  DELETE FROM orbit_owners WHERE execution_id = ANY (ARRAY(
    SELECT execution_id FROM item
    WHERE NOT is_create AND status NOT IN ('running', 'continued')
      AND execution_id IN (SELECT execution_id FROM ${ok})))
  RETURNING 1
)`);
    owners.push("(SELECT count(*) FROM owner_out)");
  }
  if (parts.enqueue) {
    cte.push(`task_in AS (
  INSERT INTO orbit_tasks (execution_id, run_id, step, attempt, unit, task_name,
    contract_version, language, state, enqueued_ms, payload, token, session_id, claimed_by,
    claimed_ms)
  SELECT t.execution_id, t.run_id, t.step, t.attempt, t.unit, t.task_name, t.contract_version,
    t.language, CASE WHEN t.claimed IS NULL THEN 'queued' ELSE 'claimed' END, t.enqueued_ms,
    t.payload, t.claimed->>'token', t.claimed->>'session_id', t.claimed->>'node_id',
    CASE WHEN t.claimed IS NULL THEN NULL ELSE t.enqueued_ms END
  FROM jsonb_to_recordset(${p("enqueue")}) AS t(execution_id text, run_id text, step text,
    attempt integer, unit text, task_name text, contract_version text, language text,
    enqueued_ms bigint, payload jsonb, claimed jsonb)
  WHERE t.execution_id IN (SELECT execution_id FROM ${ok})
  ON CONFLICT (unit) DO NOTHING
  RETURNING (state = 'queued') AS queued
)`);
    tasks.push("(SELECT count(*) FROM task_in)");
  }
  const gone = parts.gone
    ? `SELECT g.unit FROM jsonb_to_recordset(${p("gone")}) AS g(execution_id text, unit text)
      WHERE g.execution_id IN (SELECT execution_id FROM ${ok})`
    : "";
  if (parts.gone) {
    cte.push(`task_gone AS (
  DELETE FROM orbit_tasks
  WHERE unit = ANY (ARRAY(${gone})) AND (state = 'queued') IS TRUE
  RETURNING 1
)`);
    tasks.push("(SELECT count(*) FROM task_gone)");
  }
  if (parts.cancel || parts.gone) {
    // Claimed attempts found by unit (gone) or by token, each through its unique index.
    const units: string[] = [];
    if (parts.cancel) {
      units.push(`SELECT x.unit FROM orbit_tasks x WHERE x.token = ANY (ARRAY(
      SELECT c.token FROM jsonb_to_recordset(${p("cancel")}) AS c(execution_id text, token text)
      WHERE c.execution_id IN (SELECT execution_id FROM ${ok})))`);
    }
    if (parts.gone) units.push(gone);
    cte.push(`task_cancel AS (
  UPDATE orbit_tasks SET state = 'cancelled'
  WHERE unit = ANY (ARRAY(${units.join(" UNION ALL ")})) AND (state = 'claimed') IS TRUE
  RETURNING 1
)`);
    tasks.push("(SELECT count(*) FROM task_cancel)");
  }
  if (parts.done) {
    cte.push(`task_done AS (
  DELETE FROM orbit_tasks WHERE token = ANY (ARRAY(
    SELECT d.token FROM jsonb_to_recordset(${p("done")}) AS d(execution_id text, token text)
    WHERE d.execution_id IN (SELECT execution_id FROM ${ok})))
  RETURNING 1
)`);
    tasks.push("(SELECT count(*) FROM task_done)");
  }
  if (parts.inbox) {
    cte.push(`inbox_done AS (
  DELETE FROM orbit_inbox WHERE seq = ANY (ARRAY(
    SELECT x.seq FROM inbox_list x WHERE x.execution_id IN (SELECT execution_id FROM ${ok})))
  RETURNING 1
)`);
  }
  const sum = (xs: string[]) => (xs.length > 0 ? xs.join(" + ") : "0");
  return `
WITH ${cte.join(",\n")}
SELECT (SELECT count(*) FROM ev) AS events,
  ${sum(written)} AS executions,
  ${sum(owners)} AS owners,
  ${sum(tasks)} AS tasks,
  ${parts.inbox ? "(SELECT count(*) FROM inbox_done)" : "0"} AS inbox,
  ${parts.enqueue ? "(SELECT count(*) FROM task_in WHERE queued)" : "0"} AS queued,
  ${fencedColumn(parts)} AS fenced,
  ${
    parts.take
      ? `(SELECT coalesce(json_agg(o.execution_id), '[]'::json) FROM ${base} o
   WHERE o.execution_id NOT IN (SELECT execution_id FROM ${ok}))`
      : "'[]'::json"
  } AS lost,
  ${
    parts.inbox
      ? `(SELECT coalesce(json_agg(DISTINCT x.execution_id), '[]'::json) FROM inbox_list x
   WHERE x.seq NOT IN (SELECT seq FROM inbox_held))`
      : "'[]'::json"
  } AS withdrawn`;
}

/**
 * The items not owned, each with the row that decided it: its own ownership row, or for a
 * child's create its parent's (`parent_id` set).
 */
function fencedColumn(parts: CommitOwnedParts): string {
  if (!parts.update && !parts.child) return "'[]'::json";
  const of = (
    x: string,
  ) => (parts.update && parts.child
    ? `coalesce(o.${x}, p.${x})`
    : parts.update
    ? `o.${x}`
    : `p.${x}`);
  return `(SELECT coalesce(json_agg(json_build_object('execution_id', i.execution_id,
     'node_id', ${of("node_id")}, 'epoch', ${of("epoch")},
     'parent_id', ${
    parts.child ? "CASE WHEN i.is_create THEN i.parent_id END" : "NULL"
  })), '[]'::json)
   FROM item i${parts.update ? " LEFT JOIN own o ON o.execution_id = i.execution_id" : ""}${
    parts.child ? " LEFT JOIN parent_own p ON i.is_create AND p.execution_id = i.parent_id" : ""
  }
   WHERE i.execution_id NOT IN (SELECT execution_id FROM owned))`;
}

/**
 * The commit of a shared-mode server, as ONE statement: the single-server commit plus, per
 * execution, the ownership check and what changes around its history.
 *
 * - `own` locks the ownership rows of the batch's existing executions FOR SHARE (a takeover's
 *   UPDATE waits for this statement, and this statement, started after a takeover, sees the
 *   new epoch); `ok` keeps the items whose row still names this node at the epoch it holds,
 *   and every create (its ownership row is inserted here, epoch as given) — a child's only
 *   when its parent's row (`parent_own`, also FOR SHARE) names this node at that epoch: a
 *   node that lost a tree cannot add an execution to it.
 * - Events, rows, task rows and inbox deletions are written for `ok` items only; the others
 *   come back in `fenced` with the row's current owner, and the store raises FencedError for
 *   each of them while the rest of the batch is committed. A `steady` item (only its history
 *   moved) is checked like the others and writes no row: reads answer its `last_seq` and
 *   `updated_ms` from the newest event.
 * - A terminal status deletes the ownership row; `continued` keeps it (continue-as-new keeps
 *   owner and epoch).
 * - Task rows: `enqueue` inserts queued rows, or claimed ones for an
 *   eager dispatch (the result's worker takes the next step in the same append), `gone` deletes queued rows
 *   of units no longer queued, `cancel` marks claimed attempts the owner no longer needs,
 *   `done` deletes the rows of attempts whose result was recorded.
 * - `take`: the dispatches of units that were queued. A row claimed by a claim statement
 *   (here or elsewhere) carries the dispatch's token already; a row still queued is claimed
 *   here, in the commit of its dispatch (the owner handing its own queued task to a worker
 *   slot the same commit freed: no claim statement, no second commit), unless a row of the
 *   same task queued more than `head_ms` earlier waits (the claim statement's order: the
 *   claim then decides). A take whose row was claimed with another token meanwhile (another
 *   server's claim won: its lock made this UPDATE wait, then skip the row), or that yields to
 *   an older row, is `lost`: nothing of that execution is written, the others commit, and the
 *   store raises TaskTakenError for it.
 * - `inbox`: the entries the batch applies are locked (`FOR UPDATE`) before anything is
 *   written, and deleted with the events they caused. An execution whose entry is gone (the
 *   forwarding server withdrew it after waiting 10 s and answered that nothing was applied, or
 *   an earlier commit that reported an error had landed and deleted it) is `withdrawn`:
 *   nothing of it is written, and the store raises InboxGoneError for it. A withdrawal that
 *   comes while this statement holds the entry waits for it, then finds the entry gone.
 *
 * - Ownership and task rows are found through their unique indexes (`execution_id`, `unit`,
 *   `token`) from arrays built first (`= ANY (ARRAY(…))`). Joined with the parameters instead
 *   (`IN (SELECT … FROM jsonb_to_recordset(…))`, which the planner guesses at 100 rows), the
 *   plans read whole tables on every commit: all of `orbit_owners` (a commit took 5.2 ms in the
 *   executor with 20,000 waiting executions owned, against 1.2 ms with none) and every claimed
 *   attempt of `orbit_tasks`. A task row's state is checked as `(state = '…') IS TRUE`, which
 *   the claim index cannot answer: a generic plan made on small tables otherwise read every
 *   queued or claimed row through it to find a few units (all 5,000 claimed attempts, for
 *   every commit, with nothing to cancel).
 * - No NOTIFY here: PostgreSQL holds a global lock from a notifying transaction's commit until
 *   it is flushed, which would serialize every commit of every server. The statement answers
 *   how many rows it queued (the caller knows which executions closed: those of its items with
 *   a terminal status that were neither fenced nor lost); the caller notifies (orbit_tasks,
 *   orbit_done) in a statement of its own once the commit is known.
 *
 * Params: $1 rows (+ is_create, owner_node, owner_epoch; owner_instance on creates), $2 events,
 * $3 enqueue [{execution_id, run_id, step, attempt, unit, task_name, contract_version, language,
 * enqueued_ms, payload}], $4 gone [{execution_id, unit}], $5 cancel [{execution_id, token}],
 * $6 done [{execution_id, token}], $7 inbox entries applied [{execution_id, seq}], $8 take
 * [{execution_id, unit, token, session_id, claimed_by, claimed_ms, head_ms}].
 */
export const COMMIT_OWNED = commitOwned(ALL_PARTS);

/**
 * Run-time parameters of a shared-mode server's store, requests and heartbeat connections.
 *
 * `enable_seqscan = off`: every statement is prepared once per connection and its generic plan
 * kept until an ANALYZE. Plans made while the queue tables were small read them whole later:
 * COMMIT_OWNED deleted reported attempts by reading all of orbit_tasks, which churns (a row in
 * and out per task) and grows between autovacuum's visits (916 pages, 3.7 ms of a 4.6 ms commit
 * after 2,400 orders); the claim joined its window with a whole backlog (claimTasks). With
 * sequential scans priced out, lookups go through the indexes whatever the tables' sizes were
 * when planned; PostgreSQL still scans where no index serves (small tables such as
 * orbit_sessions and orbit_nodes).
 *
 * `jit = off`: a plan whose estimate is large (the planner guesses 100 rows for a JSON
 * parameter or a recursive CTE, and multiplies) is compiled by LLVM before it runs, hundreds of
 * milliseconds for a statement that then reads nothing: DEAD_ROOTS, run every second, took
 * 384 ms that way with 200,000 executions owned, 0.1 ms of it executing.
 */
export const SHARED_CONNECTION_SETTINGS: Record<string, string> = {
  enable_seqscan: "off",
  jit: "off",
};
