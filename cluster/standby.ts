/**
 * Standby mode: leader election on PostgreSQL (reference page, "Leader election" and
 * "Fencing").
 *
 * State model. An Elector is `standby` or `leader`.
 *   standby → leader: its `pg_try_advisory_lock` (once a second, on its own election session
 *     named `orbit-cluster:<node id>`) succeeds; it increments the term in `orbit_cluster`,
 *     suspends the session's idle timeout, runs `onElected(term)` (recovery), restores the
 *     5-second idle timeout and serves.
 *   leader → leader: a leadership check fails but the term has not moved (the session does
 *     not answer, it is a new backend after a reconnect, it no longer holds the lock, or the
 *     lease ran out): it takes the lock again at once and, when the term is still its own,
 *     goes on leading from memory, no recovery (`took the leader lock back`). A closed
 *     session triggers that check at once. A standby that gets the lock while the leader of
 *     record has an election session younger than RETAKE_GRACE_MS gives it back: that leader
 *     is alive and only reconnecting.
 *   leader → standby: the term moved on, or the lock cannot be taken again at its term. It
 *     stops serving at once, drops the election session (releasing the lock if PostgreSQL
 *     still has it), runs `onLost(reason)` and rejoins the election.
 *
 * Trust window. The leader serves only while its last successful check is less than 3 s old
 * (`serving()`); a leader whose host is cut off stops serving before PostgreSQL ends its silent
 * session (idle_session_timeout 5 s, or TCP keepalives of 5 s on servers before 14) and so
 * before anyone else can be elected. Timing is not what keeps a single writer, though: every
 * append of the leader's store checks the term in its own transaction (the store's `fence`), so
 * a paused leader that resumes after a successor was elected cannot write.
 *
 * Failure handling. The election client is a separate postgres.js client with one connection
 * (not `sql.reserve()`); postgres.js reconnects by itself, and a changed `pg_backend_pid()` is
 * how a reconnect (and so a lost lock) is noticed.
 */
import postgres from "postgres";
import {
  BUMP_TERM,
  ELECTION_LOCK_KEY,
  LEADER_CHECK,
  LEADER_RECONNECTING,
  READ_CLUSTER,
  SERVER_VERSION,
  SET_IDLE_TIMEOUT,
  SUSPEND_IDLE_TIMEOUT,
  TRY_LOCK,
  UNLOCK,
} from "../sql/postgres/cluster.ts";
import { log } from "../lib/log.ts";
import { withTimeout } from "../lib/with_timeout.ts";
import type { LeaderInfo } from "../lib/cluster_view.ts";

export const CHECK_INTERVAL_MS = 1000;
export const LEASE_MS = 3000;
/**
 * How long after the leader's election session reconnected a standby that got the lock gives
 * it back: the leader is alive, lost only its connection, and takes its lock back.
 */
export const RETAKE_GRACE_MS = 2000;

/** The leader as health and NOT_LEADER name it: `grpc_addr` only when there is one. */
function leaderInfo(nodeId: string, addr: string | null, grpc: string | null): LeaderInfo {
  return { node_id: nodeId, addr, ...(grpc ? { grpc_addr: grpc } : {}) };
}

export interface ElectorOptions {
  url: string;
  nodeId: string;
  advertiseAddr: string | null;
  /** This server's gRPC address (`host:port`), recorded with its term; null: none. */
  grpcAdvertiseAddr?: string | null;
  /** Recovery as the new leader of `term`; the elector serves when it resolves. */
  onElected: (term: number) => Promise<void>;
  /** Called once when leadership is lost (after serving stopped). */
  onLost: (reason: string) => Promise<void> | void;
  now?: () => number;
}

type Sql = ReturnType<typeof postgres>;

export class Elector {
  #role: "standby" | "leader" = "standby";
  #term: number | null = null;
  #leader: LeaderInfo | null = null;
  #lastCheck = 0;
  #pid: number | null = null;
  #sql: Sql | null = null;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #stopped = false;
  #busy = false;
  #followed: string | null = null;
  #idleTimeout = true;
  readonly now: () => number;

  constructor(readonly opts: ElectorOptions) {
    this.now = opts.now ?? Date.now;
  }

  get role(): "standby" | "leader" {
    return this.#role;
  }
  /** The term this server last saw. */
  get term(): number | null {
    return this.#term;
  }
  get leader(): LeaderInfo | null {
    return this.#leader;
  }

  /** True while this server is the leader and its last successful check is within the lease. */
  serving(): boolean {
    return this.#role === "leader" && this.now() - this.#lastCheck < LEASE_MS;
  }

  start(): void {
    this.#tick();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    await this.#closeSession();
  }

  #session(): Sql {
    if (!this.#sql) {
      const sql: Sql = this.#sql = postgres(this.opts.url, {
        // A leader whose session closed checks at once: it takes its lock back before a
        // standby's next try (see #retake), instead of at its next check.
        onclose: () => {
          if (this.#role === "leader" && this.#sql === sql) this.#tick(0);
        },
        max: 1,
        prepare: false,
        idle_timeout: 0,
        connect_timeout: 3,
        // TCP keepalives (seconds): on PostgreSQL before 14 they end a silent session.
        keep_alive: 5,
        backoff: (attempt: number) => Math.min(0.05 * 2 ** attempt, 1),
        fetch_types: false,
        onnotice: () => {},
        connection: { application_name: `orbit-cluster:${this.opts.nodeId}` },
        types: {
          bigint: {
            to: 20,
            from: [20],
            serialize: (x: number | bigint | string) => String(x),
            parse: (x: string) => Number(x),
          },
        },
      });
    }
    return this.#sql;
  }

  async #closeSession(): Promise<void> {
    const sql = this.#sql;
    this.#sql = null;
    this.#pid = null;
    if (sql) await sql.end({ timeout: 0 }).catch(() => {});
  }

  #tick(delay = CHECK_INTERVAL_MS): void {
    if (this.#stopped || (delay === 0 && this.#busy)) return;
    clearTimeout(this.#timer);
    this.#timer = setTimeout(async () => {
      if (this.#busy) return this.#tick();
      this.#busy = true;
      try {
        if (this.#role === "leader") await this.#check();
        else await this.#tryElect();
      } finally {
        this.#busy = false;
        this.#tick();
      }
    }, delay);
  }

  async #tryElect(): Promise<void> {
    const sql = this.#session();
    let locked = false;
    try {
      const [r] = await withTimeout(sql.unsafe(TRY_LOCK, [ELECTION_LOCK_KEY]), 2000);
      locked = r!.locked as boolean;
      this.#pid = r!.pid as number;
      if (locked) {
        // A leader that only lost its connection is taking its lock back: leave it that.
        const [c] = await sql.unsafe(LEADER_RECONNECTING, [RETAKE_GRACE_MS]);
        if (c?.leader_node && c.leader_node !== this.opts.nodeId && c.reconnecting) {
          await sql.unsafe(UNLOCK, [ELECTION_LOCK_KEY]);
          locked = false;
        }
      }
      if (!locked) {
        await this.#follow(sql);
        return;
      }
      await this.#setIdleTimeout(sql, false);
      const grpc = this.opts.grpcAdvertiseAddr ?? null;
      const [t] = await sql.unsafe(BUMP_TERM, [
        this.opts.nodeId,
        this.opts.advertiseAddr,
        this.now(),
        grpc,
      ]);
      this.#term = t!.term as number;
      this.#leader = leaderInfo(this.opts.nodeId, this.opts.advertiseAddr, grpc);
    } catch (e) {
      if (locked) await this.#closeSession(); // release a lock we may hold
      if (!this.#stopped) {
        log.cluster.warn("cluster: election attempt failed", {
          node_id: this.opts.nodeId,
          error: (e as Error).message,
        });
      }
      return;
    }
    log.cluster.info("cluster: elected leader; recovering executions from history", {
      node_id: this.opts.nodeId,
      term: this.#term,
    });
    this.#role = "leader";
    this.#lastCheck = this.now();
    this.#followed = null;
    try {
      await this.opts.onElected(this.#term!);
      await this.#setIdleTimeout(sql, true);
      this.#lastCheck = this.now();
    } catch (e) {
      await this.#stepDown(`recovery failed: ${(e as Error).message}`);
    }
  }

  async #setIdleTimeout(sql: Sql, on: boolean): Promise<void> {
    if (!this.#idleTimeout) return;
    try {
      const [v] = await sql.unsafe(SERVER_VERSION);
      if ((v!.v as number) < 140000) {
        this.#idleTimeout = false; // older servers: TCP keepalives do it
        return;
      }
      await sql.unsafe(on ? SET_IDLE_TIMEOUT : SUSPEND_IDLE_TIMEOUT);
    } catch (e) {
      if (on) throw e;
    }
  }

  async #follow(sql: Sql): Promise<void> {
    const [c] = await sql.unsafe(READ_CLUSTER);
    if (!c) return;
    this.#term = c.term as number;
    this.#leader = c.leader_node
      ? leaderInfo(
        c.leader_node as string,
        (c.leader_addr as string | null) ?? null,
        (c.leader_grpc_addr as string | null) ?? null,
      )
      : null;
    const key = `${c.term}/${c.leader_node}`;
    if (this.#leader && key !== this.#followed) {
      this.#followed = key;
      log.cluster.info("cluster: standby; following the leader", {
        term: this.#term,
        leader: this.#leader.node_id,
      });
    }
  }

  async #check(): Promise<void> {
    let reason: string | null = null;
    /** Whether the lock may still be this server's to take back (nobody else was elected). */
    let mine = true;
    if (this.now() - this.#lastCheck >= LEASE_MS) {
      reason = `the lease expired: no successful leadership check for ${LEASE_MS / 1000} s`;
    } else {
      try {
        const [r] = await withTimeout(
          this.#session().unsafe(LEADER_CHECK, [ELECTION_LOCK_KEY]),
          1500,
        );
        if (r!.term !== this.#term) {
          reason = `the term moved on to ${r!.term}`;
          mine = false;
        } else if (r!.pid !== this.#pid) {
          reason = "the election session was reconnected, so its lock is gone";
        } else if (!r!.locked) reason = "the election session no longer holds the lock";
      } catch (e) {
        reason = `the election session failed: ${(e as Error).message}`;
      }
    }
    if (!reason) {
      this.#lastCheck = this.now();
      return;
    }
    if (mine && await this.#retake(reason)) return;
    await this.#stepDown(reason);
  }

  /**
   * A check failed but the term may be unchanged (a lost connection, a lapsed lease): takes the
   * lock again on a session of its own and goes on leading, from memory, when nobody was elected
   * meanwhile — an election always bumps the term, and the lock now held keeps anyone from
   * being elected from here on. True when it leads on; the caller steps down otherwise.
   */
  async #retake(reason: string): Promise<boolean> {
    try {
      const sql = this.#session();
      const [r] = await withTimeout(sql.unsafe(TRY_LOCK, [ELECTION_LOCK_KEY]), 1500);
      if (!r!.locked) return false;
      const [c] = await withTimeout(sql.unsafe(READ_CLUSTER), 1500);
      if (c?.term !== this.#term || c?.leader_node !== this.opts.nodeId) {
        await this.#closeSession(); // a lock held at another term is not ours to keep
        return false;
      }
      this.#pid = r!.pid as number;
      await this.#setIdleTimeout(sql, true);
      this.#lastCheck = this.now();
    } catch {
      return false;
    }
    log.cluster.warn("cluster: took the leader lock back; still the leader", {
      node_id: this.opts.nodeId,
      term: this.#term,
      reason,
    });
    return true;
  }

  /** Stops serving now, drops the session and engine, and rejoins the election. */
  async #stepDown(reason: string): Promise<void> {
    if (this.#role !== "leader") return;
    this.#role = "standby";
    this.#leader = null;
    await this.#closeSession();
    log.cluster.error("cluster: lost leadership; stepped down to standby", {
      node_id: this.opts.nodeId,
      reason,
    });
    try {
      await this.opts.onLost(reason);
    } catch (e) {
      log.cluster.error("cluster: error while stepping down", { error: (e as Error).message });
    }
  }
}
