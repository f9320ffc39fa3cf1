/**
 * orbit_nodes: membership and heartbeats (shared mode).
 */
import { DB_NOW } from "./common.ts";

/**
 * Joins the cluster under a node id: writes this process's instance, unless another instance
 * of the id heartbeated within the node timeout (a clash: no row comes back). A row left by a
 * graceful leave (heartbeat 0) or a dead process is taken; its owned count is then unknown
 * (LIST_NODES counts the rows) until this process's first heartbeat writes it. Params: $1
 * node_id, $2 addr, $3 instance, $4 node timeout ms, $5 gRPC addr.
 */
export const NODE_JOIN = `
INSERT INTO orbit_nodes (node_id, addr, heartbeat_ms, started_ms, instance, grpc_addr)
VALUES ($1, $2, ${DB_NOW}, ${DB_NOW}, $3, $5)
ON CONFLICT (node_id) DO UPDATE SET addr = excluded.addr, heartbeat_ms = excluded.heartbeat_ms,
  started_ms = excluded.started_ms, instance = excluded.instance, owned = NULL,
  grpc_addr = excluded.grpc_addr
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
SELECT n.node_id, n.addr, n.grpc_addr, n.heartbeat_ms, ${DB_NOW} - n.heartbeat_ms AS age_ms,
  CASE WHEN n.owned IS NOT NULL AND ${DB_NOW} - n.heartbeat_ms < $1::bigint THEN n.owned
    ELSE (SELECT count(*) FROM orbit_owners o WHERE o.node_id = n.node_id) END AS owned
FROM orbit_nodes n ORDER BY n.node_id`;
