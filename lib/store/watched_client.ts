/**
 * A postgres.js client whose statements cannot wait forever. When the oldest statement in
 * flight has had no answer for `stuckMs`, the client is replaced by a new one, the old one is
 * destroyed, and every statement it held fails with `CONNECTION_DESTROYED` (a transient code:
 * see isTransientPostgresError; a commit failing so is an ambiguous one).
 *
 * Why: every statement ORBIT sends takes milliseconds, and postgres.js rejects a statement
 * whose connection closes; but once in CI, after a PostgreSQL restart, every later statement of
 * a client waited behind one PostgreSQL never received (the connection idle on PostgreSQL's
 * side for 15 minutes), and a black-holed database link (no FIN, no reset) does the same to any
 * client. The heartbeat connection of shared mode has its own detector (cluster/shared/membership.ts).
 *
 * ```ts
 * const db = new WatchedClient(() => postgres(url), { what: "the store's" });
 * const rows = await db.unsafe("SELECT 1", [], { prepare: true });
 * await db.end({ timeout: 5 });
 * ```
 */
import type postgres from "postgres";
import { log } from "../log.ts";

/** Default limit: a statement without an answer for this long means the client is wedged. */
export const STATEMENT_STUCK_MS = 30_000;
const CHECK_MS = 5_000;

export interface WatchedClientOptions {
  /** After how long without an answer the client is replaced (default STATEMENT_STUCK_MS). */
  stuckMs?: number;
  /** Whose connections, for the log line (`the store's`, `the requests'`). */
  what: string;
}

export class WatchedClient {
  #sql: postgres.Sql;
  readonly #make: () => postgres.Sql;
  readonly #stuckMs: number;
  readonly #what: string;
  /** Statements in flight: id → when sent, and how to give up on it (insertion order). */
  readonly #inFlight = new Map<number, { since: number; abandon: (e: Error) => void }>();
  #seq = 0;
  readonly #timer: ReturnType<typeof setInterval>;

  constructor(make: () => postgres.Sql, opts: WatchedClientOptions, first?: postgres.Sql) {
    this.#make = make;
    this.#sql = first ?? make();
    this.#stuckMs = opts.stuckMs ?? STATEMENT_STUCK_MS;
    this.#what = opts.what;
    this.#timer = setInterval(
      () => this.#unstick(),
      Math.min(CHECK_MS, Math.ceil(this.#stuckMs / 3)),
    );
    Deno.unrefTimer(this.#timer);
  }

  /** The current client, for what needs one connection's transaction (`begin`). */
  get client(): postgres.Sql {
    return this.#sql;
  }

  /** postgres.js `unsafe`, watched. */
  async unsafe<T = Record<string, unknown>>(
    text: string,
    params: unknown[] = [],
    options: postgres.UnsafeQueryOptions = {},
  ): Promise<T[]> {
    const id = ++this.#seq;
    let abandon!: (e: Error) => void;
    const abandoned = new Promise<never>((_, reject) => (abandon = reject));
    this.#inFlight.set(id, { since: performance.now(), abandon });
    try {
      const rows = await Promise.race([
        this.#sql.unsafe(text, params as postgres.ParameterOrJSON<never>[], options),
        abandoned,
      ]);
      return rows as unknown as T[];
    } finally {
      this.#inFlight.delete(id);
    }
  }

  async end(options: { timeout?: number } = {}): Promise<void> {
    clearInterval(this.#timer);
    await this.#sql.end(options);
  }

  #unstick(): void {
    const first = this.#inFlight.values().next();
    if (first.done) return;
    const waited = performance.now() - first.value.since;
    if (waited < this.#stuckMs) return;
    log.engine.error(
      `a PostgreSQL statement has had no answer; replacing ${this.#what} connections`,
      { waited_ms: Math.round(waited), statements_in_flight: this.#inFlight.size },
    );
    const old = this.#sql;
    this.#sql = this.#make();
    const held = [...this.#inFlight.values()];
    this.#inFlight.clear();
    for (const h of held) {
      h.abandon(Object.assign(
        new Error(
          `no answer from PostgreSQL within ${this.#stuckMs / 1000} s; connection replaced`,
        ),
        { code: "CONNECTION_DESTROYED" },
      ));
    }
    old.end({ timeout: 0 }).catch(() => {});
  }
}
