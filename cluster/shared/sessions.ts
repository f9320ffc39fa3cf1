/**
 * Shared mode's worker sessions (reference page, "Worker sessions"): the cluster's sessions
 * live in `orbit_sessions`; this server caches the ones it served and writes their last
 * contacts every 250 ms. A session another server removed is forgotten here (its next request
 * answers 404 UNKNOWN_SESSION and the SDK registers again). Also the cluster-wide views of
 * sessions (`/v1/workers`, `/pending`, `/v1/health`).
 */
import type postgres from "postgres";
import { notFound } from "../../lib/errors.ts";
import type { Executions } from "../../lib/executions/executions.ts";
import { log } from "../../lib/log.ts";
import type { Metrics } from "../../lib/metrics.ts";
import { withTimeout } from "../../lib/with_timeout.ts";
import { stepOfToken } from "../../lib/engine/state.ts";
import { executionOfToken } from "../../lib/executions/types.ts";
import type { Session, SessionView, TaskRegistration } from "../../lib/workers/dispatcher.ts";
import * as q from "../../sql/postgres/shared/mod.ts";

/** How long `/v1/health` waits for the cluster's session count (as for the nodes' list). */
const SESSION_COUNT_WAIT_MS = 250;

export interface SharedWorkersOptions {
  nodeId: string;
  sessionTimeoutMs: number;
  now: () => number;
  newId: () => string;
  /** The requests' client (lib/store/watched_client.ts in the server; postgres.js in tests). */
  sql: {
    unsafe(
      text: string,
      params: postgres.ParameterOrJSON<never>[],
      options: { prepare: boolean },
    ): PromiseLike<unknown>;
  };
  /** Applies the inbox entries of one execution owned here (a result may need its dispatch). */
  drainInbox(executionId: string): Promise<void>;
  /**
   * Since when this node's own heartbeat has been written without a gap. After a database
   * outage nobody could record contacts or confirmations, so redeliveries that judge silence
   * wait until the node has been healthy for a session timeout.
   */
  healthySince(): number;
  /** Sends notifications after a write (never inside it). */
  notify(list: Array<{ channel: string; payload: string }>): void;
}

/** What the parts of the worker service share (workers.ts builds it). */
export interface WorkersContext {
  readonly executions: Executions;
  readonly metrics: Metrics;
  readonly opts: SharedWorkersOptions;
  q<T>(text: string, params?: unknown[]): Promise<T[]>;
}

/** A statement on the requests' client. */
export function queryOn(sql: SharedWorkersOptions["sql"]) {
  return <T>(text: string, params: unknown[] = []): Promise<T[]> =>
    sql.unsafe(text, params as postgres.ParameterOrJSON<never>[], {
      prepare: true,
    }) as unknown as Promise<T[]>;
}

export interface SessionRecord {
  session_id: string;
  worker_id: string;
  runtime: string;
  tasks: TaskRegistration[];
  concurrency: number;
  last_contact_ms: number;
  created_ms: number;
}

export class SharedSessions {
  readonly sessions = new Map<string, Session>();
  #contacts = new Map<string, number>();
  /** When the contact write in flight began (null: none). */
  #flushStarted: number | null = null;
  #countRead: Promise<number> | null = null;
  #lastCount: number | null = null;
  /** A session was forgotten here: its polls end, its empty-claim memory goes. */
  onForget: (id: string) => void = () => {};

  constructor(readonly w: WorkersContext) {}

  async register(
    r: Pick<Session, "worker_id" | "runtime" | "tasks" | "concurrency">,
  ): Promise<string> {
    const now = this.w.opts.now();
    const id = this.w.opts.newId();
    await this.w.q(q.INSERT_SESSION, [id, r.worker_id, r.runtime, r.tasks, r.concurrency, now]);
    this.#cache({
      session_id: id,
      worker_id: r.worker_id,
      runtime: r.runtime,
      tasks: r.tasks,
      concurrency: r.concurrency,
      last_contact_ms: now,
      created_ms: now,
    });
    log.engine.info("worker registered", {
      worker_id: r.worker_id,
      runtime: r.runtime,
      tasks: r.tasks.length,
    });
    return id;
  }

  #cache(rec: SessionRecord): Session {
    const s: Session = {
      ...rec,
      polling: 0,
      tokens: new Set(),
      cancel: new Set(),
      told: new Set(),
    };
    this.sessions.set(rec.session_id, s);
    return s;
  }

  /** The session, from the cache or the table, in contact now; 404 UNKNOWN_SESSION when gone. */
  async contact(id: string): Promise<Session> {
    let s = this.sessions.get(id);
    if (!s) {
      const [rec] = await this.w.q<SessionRecord>(q.GET_SESSION, [id]);
      if (rec) s = this.#cache(rec);
    }
    if (!s) {
      throw notFound(
        "UNKNOWN_SESSION",
        `worker session ${id} is unknown or expired; register again`,
      );
    }
    this.touch(s);
    return s;
  }

  async workerOf(sessionId: string): Promise<string | null> {
    const cached = this.sessions.get(sessionId);
    if (cached) return cached.worker_id;
    const [rec] = await this.w.q<SessionRecord>(q.GET_SESSION, [sessionId]);
    return rec?.worker_id ?? null;
  }

  touch(s: Session): void {
    if (!this.sessions.has(s.session_id)) return; // forgotten: nothing to write for it
    const now = this.w.opts.now();
    s.last_contact_ms = now;
    this.#contacts.set(s.session_id, now);
  }

  /**
   * Forgets a session whose row is gone (expired here or elsewhere, or unregistered through
   * another server): its next poll, heartbeat or unregister answers 404 UNKNOWN_SESSION, as on
   * one server for an unknown session, and the SDK registers again. Its polls waiting here end
   * (they answer no tasks); a result it reports is still applied. Answers the cached session.
   */
  forget(id: string): Session | undefined {
    const s = this.sessions.get(id);
    this.#contacts.delete(id);
    if (s) this.sessions.delete(id);
    this.onForget(id);
    return s;
  }

  /** forget for a session cached here that another server removed. */
  gone(id: string): void {
    const s = this.forget(id);
    if (s) {
      log.engine.info("worker session removed by another server; forgotten here", {
        session_id: id,
        worker_id: s.worker_id,
      });
    }
  }

  /**
   * Unregistered through this server: the row goes; answers the attempts it held (the rows it
   * claimed), for the dispatcher to redeliver on their owners.
   */
  async remove(s: Session): Promise<string[]> {
    this.sessions.delete(s.session_id);
    this.#contacts.delete(s.session_id);
    await this.w.q(q.DELETE_SESSION, [s.session_id]);
    const held = await this.w.q<{ token: string }>(q.CLAIMED_BY_SESSION, [s.session_id]);
    return held.map((h) => h.token);
  }

  /**
   * A heartbeat: the attempts it lists that no server wants any more are cancelled (told once
   * per session), those still running are confirmed (the owner's AttemptWatch reads when).
   */
  async heartbeat(s: Session, tokens: string[]): Promise<string[]> {
    const { executions } = this.w;
    const cancel = new Set(
      (await this.w.q<{ token: string }>(q.TAKE_CANCELLED, [s.session_id, tokens])).map((r) =>
        r.token
      ),
    );
    // A token no server knows any more (its result was applied, or it never existed).
    const unknown = tokens.filter((t) => !cancel.has(t) && !s.told.has(t));
    if (unknown.length > 0) {
      const known = new Set(
        (await this.w.q<{ token: string }>(q.KNOWN_TOKENS, [unknown])).map((r) => r.token),
      );
      for (const t of unknown) {
        const id = executionOfToken(t);
        const st = id ? executions.stateOf(id) : undefined;
        // Memory in doubt may lack a dispatch that landed: not a reason to cancel.
        if (id && executions.inDoubt(id)) continue;
        if (!known.has(t) && !(st && stepOfToken(st, t))) cancel.add(t);
      }
    }
    for (const t of cancel) s.told.add(t);
    if (s.told.size > 10_000) s.told.clear();
    const running = tokens.filter((t) => !cancel.has(t));
    if (running.length > 0) await this.w.q(q.CONFIRM_TOKENS, [running, this.w.opts.now()]);
    return [...cancel];
  }

  /** Sessions silent past the timeout are gone for every server (404 UNKNOWN_SESSION). */
  async expire(now: number): Promise<void> {
    const timeout = this.w.opts.sessionTimeoutMs + 1000;
    const expired = await this.w.q<{ session_id: string }>(q.EXPIRE_SESSIONS, [timeout, now]);
    // Gone for every server: forgotten here too, even with a poll waiting (its row cannot
    // come back; kept, it would be served here and nowhere else).
    for (const { session_id } of expired) {
      const s = this.forget(session_id);
      log.engine.info("worker session expired", { session_id, worker_id: s?.worker_id });
    }
    // A cached session another server removed.
    for (const s of [...this.sessions.values()]) {
      if (s.polling === 0 && now - s.last_contact_ms > timeout) {
        this.sessions.delete(s.session_id);
      }
    }
  }

  /**
   * Writes the contacts seen since the last write (every 250 ms). One write at a time: a write
   * still waiting (a slow database, a row another server's write holds) is not joined by the
   * next ones, which would take every request connection of this server; what comes meanwhile
   * goes with the next write. A write that has not finished within 10 s (a wedged connection)
   * no longer holds them back.
   */
  async flushContacts(): Promise<void> {
    const opts = this.w.opts;
    for (const s of this.sessions.values()) {
      if (s.polling > 0) this.#contacts.set(s.session_id, opts.now());
    }
    if (this.#contacts.size === 0) return;
    const now = opts.now();
    if (this.#flushStarted !== null && now - this.#flushStarted < 10_000) return;
    const started = this.#flushStarted = now;
    const batch = [...this.#contacts].sort((a, b) => a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0);
    this.#contacts.clear();
    try {
      const kept = new Set(
        (await this.w.q<{ session_id: string }>(q.TOUCH_SESSIONS, [
          batch.map(([id, ms]) => ({ id, ms })),
        ])).map((r) => r.session_id),
      );
      // No row to update: another server removed the session (it expired there, e.g. while
      // this server's writes failed for longer than the session timeout).
      for (const [id] of batch) if (!kept.has(id)) this.gone(id);
    } catch {
      for (const [id, ms] of batch) {
        this.#contacts.set(id, Math.max(ms, this.#contacts.get(id) ?? 0));
      }
    } finally {
      if (this.#flushStarted === started) this.#flushStarted = null;
    }
  }

  /** Every session of the cluster with the attempts it holds (claimed rows). */
  #rows(): Promise<Array<SessionRecord & { in_flight: number }>> {
    return this.w.q<SessionRecord & { in_flight: number }>(q.SESSIONS_WITH_IN_FLIGHT);
  }

  /**
   * WorkerService.sessionViews: the sessions of the whole cluster for `/pending`, their last
   * contact the latest known here or written by any server (a poll open on another server is
   * written as contact every 250 ms), those silent past the sweep's limit left out.
   */
  async views(): Promise<SessionView[]> {
    const now = this.w.opts.now();
    const out: SessionView[] = [];
    for (const r of await this.#rows()) {
      const local = this.sessions.get(r.session_id);
      const last = Math.max(
        Number(r.last_contact_ms),
        this.#contacts.get(r.session_id) ?? 0,
        local?.last_contact_ms ?? 0,
      );
      const polling = local?.polling ?? 0;
      if (polling === 0 && now - last > this.w.opts.sessionTimeoutMs + 1000) continue;
      out.push({
        session_id: r.session_id,
        worker_id: r.worker_id,
        runtime: r.runtime,
        tasks: r.tasks,
        concurrency: r.concurrency,
        last_contact_ms: last,
        polling,
        busy: Number(r.in_flight),
      });
    }
    return out;
  }

  /**
   * WorkerService.sessionCount, for `/v1/health`: read once for the calls that arrive while it
   * runs, awaited up to SESSION_COUNT_WAIT_MS; past that, or when it fails, the last count read
   * (or this server's cached sessions), so that health never waits on a wedged connection.
   */
  async count(): Promise<number> {
    this.#countRead ??= this.w.q<{ n: number }>(q.COUNT_SESSIONS)
      .then(([r]) => this.#lastCount = r?.n ?? 0)
      .finally(() => this.#countRead = null);
    try {
      return await withTimeout(this.#countRead, SESSION_COUNT_WAIT_MS);
    } catch {
      return this.#lastCount ?? this.sessions.size;
    }
  }

  /** `/v1/workers`: every session of the cluster. */
  async list(): Promise<unknown[]> {
    const rows = await this.#rows();
    return rows.map((r) => ({
      session_id: r.session_id,
      worker_id: r.worker_id,
      runtime: r.runtime,
      tasks: r.tasks,
      concurrency: r.concurrency,
      created_ms: r.created_ms,
      last_contact_ms: Math.max(r.last_contact_ms, this.#contacts.get(r.session_id) ?? 0),
      in_flight: Number(r.in_flight),
    }));
  }
}
