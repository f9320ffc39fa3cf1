/**
 * Shared mode (reference page, "Shared mode (several active servers)"): the statements of
 * ownership, heartbeats, takeover, the task queue, the inbox and worker sessions. Used by
 * `lib/store/postgres.ts` (the owned commit) and `cluster/shared_db.ts` (everything else).
 *
 * Liveness uses the database clock (`DB_NOW`), never a server's own.
 */
import { EXECUTION_COLUMNS } from "./queries.ts";

/**
 * A text list parameter, sent as a jsonb array (the clients skip the catalog lookup that
 * native array parameters need), as an array to compare with `= ANY (…)`: an index condition
 * on the column. As `IN (SELECT jsonb_array_elements_text(…))`, a generic plan made while the
 * tables were small joined the list with a whole index instead (every claimed attempt read
 * for each heartbeat, with 5,000 claimed).
 */
const list = (n: number) => `ARRAY(SELECT jsonb_array_elements_text($${n}::jsonb))`;

/** The database clock in epoch milliseconds. */
export const DB_NOW = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

// ---------------------------------------------------------------------------------------------
// The owned commit

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

// ---------------------------------------------------------------------------------------------
// orbit_nodes: membership and heartbeats

/**
 * Joins the cluster under a node id: writes this process's instance, unless another instance
 * of the id heartbeated within the node timeout (a clash: no row comes back). A row left by a
 * graceful leave (heartbeat 0) or a dead process is taken; its owned count is then unknown
 * (LIST_NODES counts the rows) until this process's first heartbeat writes it. Params: $1
 * node_id, $2 addr, $3 instance, $4 node timeout ms.
 */
export const NODE_JOIN = `
INSERT INTO orbit_nodes (node_id, addr, heartbeat_ms, started_ms, instance)
VALUES ($1, $2, ${DB_NOW}, ${DB_NOW}, $3)
ON CONFLICT (node_id) DO UPDATE SET addr = excluded.addr, heartbeat_ms = excluded.heartbeat_ms,
  started_ms = excluded.started_ms, instance = excluded.instance, owned = NULL
WHERE orbit_nodes.instance IS NOT DISTINCT FROM excluded.instance
   OR orbit_nodes.heartbeat_ms < ${DB_NOW} - $4::bigint
RETURNING heartbeat_ms`;

/**
 * The heartbeat; no row: another process took this node id. Also answers how many other nodes
 * heartbeat within the node timeout (none: notifications only this node listens to can stay
 * unsent). Params: $1 node_id, $2 instance, $3 node timeout ms, $4 the running executions it
 * owns (LIST_NODES).
 */
export const NODE_HEARTBEAT = `
UPDATE orbit_nodes SET heartbeat_ms = ${DB_NOW}, owned = $4 WHERE node_id = $1 AND instance = $2
RETURNING heartbeat_ms, (SELECT count(*) FROM orbit_nodes o
  WHERE o.node_id <> $1 AND o.heartbeat_ms > ${DB_NOW} - $3::bigint) AS others`;

/** A graceful leave: heartbeat 0, so the others take over at once. Params: $1 node_id, $2 instance. */
export const NODE_LEAVE = `
UPDATE orbit_nodes SET heartbeat_ms = 0 WHERE node_id = $1 AND instance = $2`;

/**
 * Every node with its heartbeat age on the database clock and how many executions it owns: as
 * a live node last wrote it with its heartbeat (at most a second old), counted in orbit_owners
 * for a node past the timeout (what it still owns waits for a takeover). Counting every node's
 * rows on each call read every ownership row of the cluster for each `/v1/ready` and
 * `/v1/health` (3.7 ms a call with 20,000 executions owned). Params: $1 node timeout ms.
 */
export const LIST_NODES = `
SELECT n.node_id, n.addr, n.heartbeat_ms, ${DB_NOW} - n.heartbeat_ms AS age_ms,
  CASE WHEN n.owned IS NOT NULL AND ${DB_NOW} - n.heartbeat_ms < $1::bigint THEN n.owned
    ELSE (SELECT count(*) FROM orbit_owners o WHERE o.node_id = n.node_id) END AS owned
FROM orbit_nodes n ORDER BY n.node_id`;

// ---------------------------------------------------------------------------------------------
// orbit_owners: takeover

/**
 * Roots owned by nodes that are dead (no heartbeat within $2 ms, or no row at all), other than
 * $1. Params: $1 node_id, $2 node timeout ms.
 *
 * Run every second by every node. The nodes that own anything are found by walking
 * `orbit_owners_node_idx` (node_id, instance) from one node id to the next (a handful of index probes), and only the
 * rows of dead ones are read (a lateral join from the dead nodes, kept from being flattened by
 * `OFFSET 0`, so that no plan walks every ownership row in root order looking for them):
 * filtering every ownership row instead took 182 ms a run with 200,000 executions owned by two
 * live nodes.
 */
export const DEAD_ROOTS = `
WITH RECURSIVE owner_nodes AS (
  (SELECT node_id FROM orbit_owners ORDER BY node_id LIMIT 1)
  UNION ALL
  SELECT (SELECT o.node_id FROM orbit_owners o WHERE o.node_id > w.node_id
          ORDER BY o.node_id LIMIT 1)
  FROM owner_nodes w WHERE w.node_id IS NOT NULL
),
dead AS (
  SELECT w.node_id FROM owner_nodes w LEFT JOIN orbit_nodes n ON n.node_id = w.node_id
  WHERE w.node_id IS NOT NULL AND w.node_id <> $1
    AND (n.node_id IS NULL OR n.heartbeat_ms < ${DB_NOW} - $2::bigint)
)
SELECT DISTINCT x.root_id, d.node_id FROM dead d
CROSS JOIN LATERAL (SELECT o.root_id FROM orbit_owners o WHERE o.node_id = d.node_id OFFSET 0) x
ORDER BY x.root_id LIMIT 10000`;

/**
 * This process still holds its node id (its instance is on the node's row), with that row
 * locked FOR SHARE until the statement ends: a process that joins under the id meanwhile waits
 * for it (NODE_JOIN updates the row), then bumps what this one took. A process replaced under
 * its id takes nothing: what it took would belong to no live process. $1 me, then the
 * instance's parameter.
 */
const stillMe = (instance: number) =>
  `me AS (SELECT 1 FROM orbit_nodes WHERE node_id = $1 AND instance = $${instance} FOR SHARE)`;

/**
 * The single-winner takeover of a batch of trees from one dead node: a second server trying
 * the same rows waits for the first, re-reads them and updates nothing. The rows record this
 * process's instance (the epoch is its own). Params: $1 me, $2 root ids, $3 dead node, $4 now,
 * $5 instance.
 */
export const TAKE_OVER = `
WITH ${stillMe(5)}
UPDATE orbit_owners SET node_id = $1, epoch = epoch + 1, since_ms = $4, instance = $5
WHERE root_id = ANY (${list(2)}) AND node_id = $3 AND EXISTS (SELECT 1 FROM me)
RETURNING execution_id, root_id, epoch`;

/**
 * A restart under the same node id fences the previous process: every row of the node gets a
 * new epoch, and this process's instance (the previous process then cannot read the new epoch
 * as its own: see OWNER_OF). Params: $1 me, $2 now, $3 instance.
 */
export const BUMP_OWN_EPOCHS = `
WITH ${stillMe(3)}
UPDATE orbit_owners SET epoch = epoch + 1, since_ms = $2, instance = $3
WHERE node_id = $1 AND EXISTS (SELECT 1 FROM me)
RETURNING execution_id, root_id, epoch`;

/**
 * A tree whose ownership row names this node id for another process of it: one replaced by
 * this process that created it after this one's resume bumped the node's rows (its create was
 * in flight, or came before its heartbeat told it). Only the process on the node's row takes
 * it (new epoch, its instance), which fences the replaced one; a replaced process takes
 * nothing. Params: $1 me, $2 execution_id, $3 instance, $4 now.
 */
export const RECLAIM = `
WITH ${stillMe(3)}
UPDATE orbit_owners SET epoch = epoch + 1, since_ms = $4, instance = $3
WHERE root_id = (SELECT root_id FROM orbit_owners WHERE execution_id = $2) AND node_id = $1
  AND instance IS DISTINCT FROM $3 AND EXISTS (SELECT 1 FROM me)
RETURNING execution_id, root_id, epoch`;

/**
 * Up to 100 trees with a row that names this node id for another process of it (see RECLAIM),
 * looked for every second: three ranges of `orbit_owners_node_idx` (node_id, instance) around
 * this process's instance, empty but for a replaced process's late starts. Each range is its
 * own index condition: as one `OR` filter, the plan read every row of the node (10,000 a run).
 * Params: $1 me, $2 instance.
 */
export const STALE_ROOTS = `
SELECT DISTINCT root_id FROM (
  (SELECT root_id FROM orbit_owners WHERE node_id = $1 AND instance < $2 LIMIT 100)
  UNION ALL
  (SELECT root_id FROM orbit_owners WHERE node_id = $1 AND instance > $2 LIMIT 100)
  UNION ALL
  (SELECT root_id FROM orbit_owners WHERE node_id = $1 AND instance IS NULL LIMIT 100)
) s LIMIT 100`;

/** RECLAIM for whole trees (STALE_ROOTS). Params: $1 me, $2 root ids, $3 instance, $4 now. */
export const RECLAIM_ROOTS = `
WITH ${stillMe(3)}
UPDATE orbit_owners SET epoch = epoch + 1, since_ms = $4, instance = $3
WHERE root_id = ANY (${list(2)}) AND node_id = $1 AND instance IS DISTINCT FROM $3
  AND EXISTS (SELECT 1 FROM me)
RETURNING execution_id, root_id, epoch`;

/**
 * The owner of one execution, and the process (instance) whose epoch it is: a node adopts the
 * epoch only when both name it, so that an epoch is only ever used by the process that
 * obtained it. Params: $1 execution_id.
 */
export const OWNER_OF = `
SELECT o.node_id, o.epoch, o.instance, n.addr FROM orbit_owners o
LEFT JOIN orbit_nodes n ON n.node_id = o.node_id WHERE o.execution_id = $1`;

/**
 * Whether executions a node just took over or resumed must be in memory (\`--cache-executions\`):
 * their status and next wake-up (lib/executions/cache.ts \`wakeAt\`). Params: $1 ids.
 */
export const WAKE_OF = `
SELECT execution_id, status, wake_at_ms FROM workflow_executions
WHERE execution_id = ANY (${list(1)})`;

/**
 * The running executions this process owns whose next timer is due at or before $2, with the
 * epoch it owns them at, in (wake_at_ms, execution_id) order after the keyset ($3, $4), at
 * most $5 (the single server's LIST_WAKING, joined with orbit_owners: a node loads only what
 * it owns, at epochs of its own instance). Params: $1 me, $2 before, $3 after wake_at_ms,
 * $4 after execution_id, $5 limit, $6 instance.
 */
export const LIST_WAKING_OWNED = `
SELECT x.execution_id, x.wake_at_ms, o.epoch FROM workflow_executions x
JOIN orbit_owners o ON o.execution_id = x.execution_id AND o.node_id = $1 AND o.instance = $6
WHERE x.wake_at_ms IS NOT NULL AND x.wake_at_ms > 0 AND x.wake_at_ms <= $2
  AND (x.wake_at_ms, x.execution_id) > ($3::bigint, $4::text) AND x.status = 'running'
ORDER BY x.wake_at_ms, x.execution_id LIMIT $5`;

/**
 * How many running executions this process owns (in memory or not). Params: $1 me,
 * $2 instance.
 */
export const COUNT_OWNED_RUNNING = `
SELECT count(*) AS n FROM orbit_owners o
JOIN workflow_executions x ON x.execution_id = o.execution_id AND x.status = 'running'
WHERE o.node_id = $1 AND o.instance = $2`;

/**
 * Which of these executions this process owns, at which epoch. Params: $1 me, $2 ids,
 * $3 instance.
 */
export const OWNED_AMONG = `
SELECT execution_id, epoch FROM orbit_owners
WHERE node_id = $1 AND execution_id = ANY (${list(2)}) AND instance = $3`;

/**
 * What this process owns of these trees, at which epoch: after a takeover whose statement
 * failed on this side (it may have committed with its answer lost). Params: $1 me, $2 root
 * ids, $3 instance.
 */
export const OWNED_OF_ROOTS = `
SELECT execution_id, epoch FROM orbit_owners
WHERE node_id = $1 AND root_id = ANY (${list(2)}) AND instance = $3`;

// ---------------------------------------------------------------------------------------------
// orbit_tasks: the shared queue

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
 * few sizes (claimWindow in cluster/shared_workers.ts: powers of two), so a few statements.
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
 * session and its `claimed_ms`, unique per claim of a process (cluster/shared_workers.ts); each
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

// ---------------------------------------------------------------------------------------------
// orbit_inbox

/**
 * A command for the owner of an execution (the caller then sends NOTIFY orbit_inbox).
 * Params: $1 owner node, $2 execution_id, $3 kind, $4 payload, $5 now, $6 reply_to (or null).
 */
/**
 * A command for an execution's owner, in one statement: reads the owner and, when it is
 * another node, writes the entry into its inbox. Answers the owner (no row: nobody owns it),
 * the process whose epoch it is (see OWNER_OF) and the entry's seq (null: owned by $1,
 * nothing written).
 * Params: $1 me, $2 execution_id, $3 kind, $4 payload, $5 created_ms, $6 reply_to.
 */
export const FORWARD = `
WITH o AS (SELECT node_id, epoch, instance FROM orbit_owners WHERE execution_id = $2),
ins AS (
  INSERT INTO orbit_inbox (node_id, execution_id, kind, payload, created_ms, reply_to)
  SELECT o.node_id, $2, $3, $4::jsonb, $5, $6 FROM o WHERE o.node_id <> $1
  RETURNING seq
)
SELECT o.node_id, o.epoch, o.instance, (SELECT seq FROM ins) AS seq FROM o`;

/** The inputs of tasks whose reply left them out (too large for a notification). */
export const TASK_INPUTS = `
SELECT token, payload->'input' AS input FROM orbit_tasks WHERE token = ANY (${list(1)})`;

/**
 * Notifications after a commit (never inside a writing transaction, see COMMIT_OWNED).
 * Params: $1 [{channel, payload}].
 */
export const NOTIFY = `
SELECT pg_notify(n.channel, n.payload) FROM jsonb_to_recordset($1::jsonb) AS n(channel text, payload text)`;

/**
 * The inbox entries of the executions a node owns (wherever they were addressed: an entry
 * follows its execution through a takeover), in seq order. Each entry's owner is looked up by
 * its key: joined with orbit_owners, the plan read every ownership row of the node (7.9 ms a
 * read with 20,000 executions owned). Params: $1 me, $2 limit.
 */
export const READ_INBOX = `
SELECT i.seq, i.execution_id, i.kind, i.payload, i.reply_to FROM orbit_inbox i
WHERE (SELECT o.node_id FROM orbit_owners o WHERE o.execution_id = i.execution_id) = $1
ORDER BY i.seq LIMIT $2`;

/**
 * The pending entries of one execution this node owns, in seq order (none when another node
 * owns it: a node that lost it must not apply them). Params: $1 execution_id, $2 me.
 */
export const READ_INBOX_OF = `
SELECT seq, execution_id, kind, payload, reply_to FROM orbit_inbox
WHERE execution_id = $1
  AND (SELECT o.node_id FROM orbit_owners o WHERE o.execution_id = $1) = $2
ORDER BY seq`;

/**
 * Deletes an entry the owner answered without an event (a result refused, a signal to a
 * finished execution), unless the execution is owned by another node, or by this one at an
 * epoch other than the one it holds: a node that lost it (and has not noticed yet) leaves the
 * entry to the new owner and sends no reply. Params: $1 seq, $2 execution_id, $3 me, $4 epoch
 * held (null: none).
 */
export const SETTLE_INBOX = `
WITH o AS (SELECT node_id, epoch FROM orbit_owners WHERE execution_id = $2 FOR SHARE)
DELETE FROM orbit_inbox WHERE seq = $1 AND NOT EXISTS (
  SELECT 1 FROM o WHERE o.node_id IS DISTINCT FROM $3
    OR ($4::bigint IS NOT NULL AND o.epoch <> $4::bigint))
RETURNING seq`;

/** Deletes an entry outside a commit (it caused no event). Params: $1 seq. */
export const DELETE_INBOX = "DELETE FROM orbit_inbox WHERE seq = $1 RETURNING seq";

/**
 * Entries of executions that no longer run (nobody owns them): the senders get an answer as
 * from a finished execution. Params: $1 limit.
 */
export const ORPHAN_INBOX = `
SELECT i.seq, i.execution_id, i.kind, i.payload, i.reply_to FROM orbit_inbox i
WHERE (SELECT o.node_id FROM orbit_owners o WHERE o.execution_id = i.execution_id) IS NULL
ORDER BY i.seq LIMIT $1`;

// ---------------------------------------------------------------------------------------------
// orbit_sessions

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
