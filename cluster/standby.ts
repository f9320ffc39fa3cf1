/**
 * Standby mode: leader election on PostgreSQL (reference page, "Leader election" and
 * "Fencing").
 *
 * State model. An Elector is `standby` or `leader`.
 *   standby → leader: its `pg_try_advisory_lock` (once a second, on its own election session
 *     named `orbit-cluster:<node id>`) succeeds; it increments the term in `orbit_cluster`,
 *     suspends the session's idle timeout, runs `onElected(term)` (recovery), restores the
 *     5-second idle timeout and serves.
 *   leader → standby: a leadership check fails (the session does not answer, it is a new
 *     backend after a reconnect, it no longer holds the lock, or the term moved on), or the
 *     lease runs out. It stops serving at once, drops the election session (releasing the lock
 *     if PostgreSQL still has it), runs `onLost(reason)` and rejoins the election.
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
  READ_CLUSTER,
  SERVER_VERSION,
  SET_IDLE_TIMEOUT,
  SUSPEND_IDLE_TIMEOUT,
  TRY_LOCK,
} from "../sql/postgres/cluster.ts";
import { log } from "../lib/log.ts";
import { withTimeout } from "../lib/with_timeout.ts";

export const CHECK_INTERVAL_MS = 1000;
export const LEASE_MS = 3000;

export interface LeaderInfo {
  node_id: string;
  addr: string | null;
}

export interface ElectorOptions {
  url: string;
  nodeId: string;
  advertiseAddr: string | null;
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
      this.#sql = postgres(this.opts.url, {
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

  #tick(): void {
    if (this.#stopped) return;
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
    }, CHECK_INTERVAL_MS);
  }

  async #tryElect(): Promise<void> {
    const sql = this.#session();
    let locked = false;
    try {
      const [r] = await withTimeout(sql.unsafe(TRY_LOCK, [ELECTION_LOCK_KEY]), 2000);
      locked = r!.locked as boolean;
      this.#pid = r!.pid as number;
      if (!locked) {
        await this.#follow(sql);
        return;
      }
      await this.#setIdleTimeout(sql, false);
      const [t] = await sql.unsafe(BUMP_TERM, [
        this.opts.nodeId,
        this.opts.advertiseAddr,
        this.now(),
      ]);
      this.#term = t!.term as number;
      this.#leader = { node_id: this.opts.nodeId, addr: this.opts.advertiseAddr };
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
      ? { node_id: c.leader_node as string, addr: (c.leader_addr as string | null) ?? null }
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
    if (this.now() - this.#lastCheck >= LEASE_MS) {
      await this.#stepDown(
        `the lease expired: no successful leadership check for ${LEASE_MS / 1000} s`,
      );
      return;
    }
    let reason: string | null = null;
    try {
      const [r] = await withTimeout(
        this.#session().unsafe(LEADER_CHECK, [ELECTION_LOCK_KEY]),
        1500,
      );
      if (r!.pid !== this.#pid) {
        reason = "the election session was reconnected, so its lock is gone";
      } else if (!r!.locked) reason = "the election session no longer holds the lock";
      else if (r!.term !== this.#term) reason = `the term moved on to ${r!.term}`;
    } catch (e) {
      reason = `the election session failed: ${(e as Error).message}`;
    }
    if (reason) await this.#stepDown(reason);
    else this.#lastCheck = this.now();
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
