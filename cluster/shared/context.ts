/**
 * What the roles of a shared-mode node share (cluster/shared/node.ts composes them): its
 * options, its identity (node id, process instance), its connections, the runtime once built,
 * and its life-cycle flags. No behaviour of its own.
 */
import type { Hono } from "hono";
import type postgres from "postgres";
import type { Runtime, RuntimeOptions } from "../../lib/runtime.ts";
import { postgresClient } from "../../lib/store/postgres.ts";
import type { Store } from "../../lib/store/store.ts";
import { WatchedClient } from "../../lib/store/watched_client.ts";
import * as q from "../../sql/postgres/shared/mod.ts";
import { requestsStuckMs } from "./placement.ts";
import type { SharedWorkers } from "./workers.ts";

export interface SharedNodeOptions {
  url: string;
  nodeId: string;
  nodeTimeoutMs: number;
  sessionTimeoutMs: number;
  now?: () => number;
  newId?: () => string;
  /** Builds the runtime over the owned store, with the shared-mode hooks. */
  runtime(store: Store, shared: NonNullable<RuntimeOptions["shared"]>): Runtime;
  app(rt: Runtime): Hono;
  /** The node cannot go on (its id was taken by another process): the server exits. */
  onFatal(message: string): void;
  /**
   * Tests: sees the text of each statement of the heartbeat connection (takeovers, inbox,
   * membership) once it has answered; throwing hands the caller that error instead, as when
   * a statement committed and its answer was lost with the connection.
   */
  afterStatement?: (text: string) => void;
}

/** A statement on one of the node's connections. */
export type Query = <T>(text: string, params?: unknown[]) => Promise<T[]>;

/**
 * The node's connections besides the store's (its appends): `req`, the request path (claims,
 * forwards, sessions; a statement without an answer fails after requestsStuckMs and the pool
 * is replaced), `hb`, heartbeats, takeovers and the inbox (replaced when a heartbeat is stuck),
 * and `listen`, NOTIFY. Each a postgres.js client of its own (application_name
 * `orbit-<role>:<node id>`) that reconnects on its own.
 */
export class Connections {
  readonly req: WatchedClient;
  hb: postgres.Sql;
  readonly listen: postgres.Sql;

  constructor(readonly opts: SharedNodeOptions) {
    const id = opts.nodeId;
    this.req = new WatchedClient(
      () =>
        postgresClient(opts.url, {
          max: 4,
          applicationName: `orbit-requests:${id}`,
          settings: q.SHARED_CONNECTION_SETTINGS,
        }),
      { what: "the requests'", stuckMs: requestsStuckMs(opts.nodeTimeoutMs) },
    );
    this.hb = this.#heartbeatClient();
    this.listen = postgresClient(opts.url, { max: 1, applicationName: `orbit-listen:${id}` });
  }

  #heartbeatClient(): postgres.Sql {
    return postgresClient(this.opts.url, {
      max: 1,
      applicationName: `orbit-heartbeat:${this.opts.nodeId}`,
      settings: q.SHARED_CONNECTION_SETTINGS,
    });
  }

  /** Statements on the request path (`req`) or the heartbeat connection (`hb`). */
  query(role: "req" | "hb"): Query {
    if (role === "req") {
      const req = this.req;
      return <T>(text: string, params: unknown[] = []): Promise<T[]> =>
        req.unsafe<T>(text, params, { prepare: true });
    }
    const sql = this.hb;
    const after = this.opts.afterStatement;
    return <T>(text: string, params: unknown[] = []): Promise<T[]> => {
      const r = sql.unsafe(text, params as postgres.ParameterOrJSON<never>[], {
        prepare: true,
      }) as unknown as Promise<T[]>;
      return after ? r.then((rows) => (after(text), rows)) : r;
    };
  }

  /** The heartbeat connection is wedged: a new client takes its place. */
  replaceHeartbeat(): void {
    const old = this.hb;
    this.hb = this.#heartbeatClient();
    old.end({ timeout: 0 }).catch(() => {});
  }

  async end(): Promise<void> {
    await Promise.all(
      [this.req, this.hb, this.listen].map((s) => s.end({ timeout: 1 }).catch(() => {})),
    );
  }
}

/** The node's shared state, handed to each of its roles. */
export class SharedContext {
  readonly instance = crypto.randomUUID();
  readonly now: () => number;
  readonly newId: () => string;
  conns: Connections | null = null;
  store: Store | null = null;
  rt: Runtime | null = null;
  workers: SharedWorkers | null = null;
  /** Joined under the node id (its row written with this instance). */
  joined = false;
  /** What it owned before a restart is resumed: inbox and maintenance may run. */
  resumed = false;
  stopped = false;
  /** Another process joined under this node id: this one serves no writes. */
  replaced = false;

  constructor(readonly opts: SharedNodeOptions) {
    this.now = opts.now ?? Date.now;
    this.newId = opts.newId ?? (() => crypto.randomUUID());
  }

  get nodeId(): string {
    return this.opts.nodeId;
  }

  get runtime(): Runtime {
    return this.rt!;
  }

  sql(role: "req" | "hb"): Query {
    return this.conns!.query(role);
  }
}
