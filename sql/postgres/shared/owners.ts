/**
 * orbit_owners: ownership, takeover and reclaim (shared mode).
 */
import { DB_NOW, list } from "./common.ts";

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
