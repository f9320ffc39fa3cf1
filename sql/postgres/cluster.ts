/**
 * Standby mode: the statements of the election session (cluster/standby.ts). The session holds
 * a session-level advisory lock with a fixed key; the holder is the leader, and each election
 * increments the term in `orbit_cluster`, which every fenced append checks.
 */

/** The fixed advisory lock key of the leader election ("ORBIT" in ASCII, as a number). */
export const ELECTION_LOCK_KEY = 0x4f52424954;

/** Try to become the leader; also returns the backend pid, to notice a reconnect later. */
export const TRY_LOCK =
  "SELECT pg_try_advisory_lock($1::bigint) AS locked, pg_backend_pid() AS pid";

/**
 * On election: the new term, with this server as the leader (waits for appends in progress).
 * The gRPC address ($4, null: none) is recorded with the term it was written at: a leader of a
 * version before migration 10 bumps the term and leaves both columns as they were, and
 * READ_CLUSTER then reads no gRPC address rather than its predecessor's.
 */
export const BUMP_TERM = `
UPDATE orbit_cluster SET term = term + 1, leader_node = $1, leader_addr = $2, since_ms = $3,
  leader_grpc_addr = $4, leader_grpc_term = term + 1
WHERE id = 1 RETURNING term`;

/** The leadership check: same backend, lock still held, term unchanged. */
export const LEADER_CHECK = `
SELECT pg_backend_pid() AS pid,
       (SELECT term FROM orbit_cluster WHERE id = 1) AS term,
       EXISTS (SELECT 1 FROM pg_locks
               WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
                 AND classid = ($1::bigint >> 32)::int::oid AND objid = ($1::bigint & 4294967295)::oid
                 AND objsubid = 1) AS locked`;

/**
 * The current term and leader as recorded in `orbit_cluster`; the leader's gRPC address only
 * when it was recorded at this term (BUMP_TERM).
 */
export const READ_CLUSTER = `
SELECT term, leader_node, leader_addr, since_ms,
  CASE WHEN leader_grpc_term = term THEN leader_grpc_addr END AS leader_grpc_addr
FROM orbit_cluster WHERE id = 1`;

/** PostgreSQL 14+: end a silent election session after 5 s (releasing the lock). */
export const SET_IDLE_TIMEOUT = "SET idle_session_timeout = '5s'";
/** During recovery the session may be silent for long: no idle timeout. */
export const SUSPEND_IDLE_TIMEOUT = "SET idle_session_timeout = 0";
export const SERVER_VERSION = "SELECT current_setting('server_version_num')::int AS v";

/**
 * A standby that got the lock: whether the leader of record is only reconnecting (its election
 * session, named `orbit-cluster:<node id>`, began within the last $1 ms): such a leader is alive
 * and takes its lock back (cluster/standby.ts), so the standby yields it. Params: $1 ms.
 */
export const LEADER_RECONNECTING = `
SELECT c.leader_node,
  EXISTS (SELECT 1 FROM pg_stat_activity a
          WHERE a.application_name = 'orbit-cluster:' || c.leader_node
            AND a.pid <> pg_backend_pid()
            AND a.backend_start > now() - make_interval(secs => $1::int / 1000.0)) AS reconnecting
FROM orbit_cluster c WHERE c.id = 1`;

/** Gives the lock back (a standby yielding to a reconnecting leader). */
export const UNLOCK = "SELECT pg_advisory_unlock($1::bigint) AS unlocked";
