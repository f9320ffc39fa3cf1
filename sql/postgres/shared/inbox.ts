/**
 * orbit_inbox: commands for an execution's owner (forward, read, settle, orphans).
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
 * Entries of executions that no longer run (nobody owns them), written before $2 (an entry
 * younger than that may belong to an execution whose ownership row is being written): the
 * senders get an answer as from a finished execution. Params: $1 limit, $2 created before (ms).
 */
export const ORPHAN_INBOX = `
SELECT i.seq, i.execution_id, i.kind, i.payload, i.reply_to FROM orbit_inbox i
WHERE (SELECT o.node_id FROM orbit_owners o WHERE o.execution_id = i.execution_id) IS NULL
  AND i.created_ms < $2
ORDER BY i.seq LIMIT $1`;
