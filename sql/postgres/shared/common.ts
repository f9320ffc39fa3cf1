/**
 * Shared mode's statements (reference page, "Shared mode (several active servers)"), one file
 * per table: the owned commit (commit.ts, used by lib/store/postgres.ts), orbit_nodes
 * (nodes.ts), orbit_owners (owners.ts), orbit_tasks (tasks.ts), orbit_inbox (inbox.ts),
 * orbit_sessions (sessions.ts) and notifications (notify.ts); used by cluster/shared/.
 * Liveness uses the database clock (`DB_NOW`), never a server's own.
 *
 * This file: what they share.
 */

/**
 * A text list parameter, sent as a jsonb array (the clients skip the catalog lookup that
 * native array parameters need), as an array to compare with `= ANY (…)`: an index condition
 * on the column. As `IN (SELECT jsonb_array_elements_text(…))`, a generic plan made while the
 * tables were small joined the list with a whole index instead (every claimed attempt read
 * for each heartbeat, with 5,000 claimed).
 */
export const list = (n: number) => `ARRAY(SELECT jsonb_array_elements_text($${n}::jsonb))`;

/** The database clock in epoch milliseconds. */
export const DB_NOW = "(extract(epoch from clock_timestamp()) * 1000)::bigint";
