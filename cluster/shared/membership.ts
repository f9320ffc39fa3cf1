/**
 * Shared mode's membership: joining under a node id, the heartbeat (the trust window that
 * readiness and memory's currency depend on), replacement by another process of the same
 * node id, the nodes' list for `/v1/ready` and `/v1/health`, and the graceful leave.
 */
import { OrbitError } from "../../lib/errors.ts";
import { log } from "../../lib/log.ts";
import { TimeoutError, withTimeout } from "../../lib/with_timeout.ts";
import * as q from "../../sql/postgres/shared/mod.ts";
import type { AdvertisedAddrs } from "../../lib/cluster_view.ts";
import type { SharedContext } from "./context.ts";
import { heartbeatStuckMs } from "./placement.ts";

export const TICK_MS = 1000;
/** A graceful leave's statement, per connection tried (Membership.leave). */
const LEAVE_WAIT_MS = 1_000;
/**
 * How long `/v1/ready` and `/v1/health` wait for the nodes' list (see readNodes): well inside
 * the 1 s a health check is given by default (HAProxy's `inter`, Kubernetes' probe timeout).
 */
const NODES_READ_WAIT_MS = 250;

export interface NodeRow {
  node_id: string;
  addr: string | null;
  grpc_addr: string | null;
  age_ms: number;
  owned: number;
}

export interface MembershipHooks {
  /** After a silence: drop what this node no longer owns (Ownership.reconcile). */
  reconcile(): Promise<void>;
  /** Another process took the node id: memory is let go and the server exits. */
  replaced(message: string): void;
}

export class Membership {
  #advertise: AdvertisedAddrs = { http: null, grpc: null };
  #lastBeat = 0;
  /**
   * When the latest heartbeat that was written had been sent: until a node timeout after it,
   * no other node can have judged this one dead (liveness is the database's clock at the write,
   * which is later) and taken its executions over (memoryCurrent).
   */
  #beatSent = 0;
  /**
   * A silence (heartbeats not written, or a gap past the node timeout) whose ownership check
   * (reconcile) has not completed: memory may hold executions taken over meanwhile.
   */
  #unchecked = false;
  #beatFailed = false;
  #beatStarted: number | null = null;
  /** Since when the heartbeat has been written without a gap (redeliveries wait for calm). */
  healthySince = 0;
  /** No other node heartbeated within the node timeout at the last heartbeat (Notifier.alone). */
  onAlone: (alone: boolean) => void = () => {};
  /** The read of the nodes' list in flight, the last one that answered (readNodes). */
  #nodesRead: Promise<NodeRow[]> | null = null;
  #nodesLast: { rows: NodeRow[]; at: number } | null = null;
  #nodesSlow = false;

  constructor(readonly ctx: SharedContext, readonly hooks: MembershipHooks) {}

  get advertiseAddr(): string | null {
    return this.#advertise.http;
  }

  /** Ready: resumed, and the heartbeat written within the node timeout. */
  serving(): boolean {
    const c = this.ctx;
    return c.joined && c.resumed && !c.stopped &&
      c.now() - this.#lastBeat < c.opts.nodeTimeoutMs;
  }

  /**
   * Whether what memory holds is still this node's, so that it may answer reads (queries,
   * `/pending`): the latest heartbeat written was sent less than a node timeout ago, and no
   * ownership check after a silence is pending. Otherwise reads replay the history: another
   * node may have taken the executions over and moved them on.
   */
  memoryCurrent(): boolean {
    return !this.ctx.stopped && !this.#unchecked &&
      this.ctx.now() - this.#beatSent < this.ctx.opts.nodeTimeoutMs;
  }

  /** Joins under the node id (waiting up to three node timeouts for a previous process). */
  async join(advertise: AdvertisedAddrs): Promise<void> {
    const c = this.ctx;
    this.#advertise = advertise;
    const deadline = c.now() + 3 * c.opts.nodeTimeoutMs;
    let warned = false;
    for (;;) {
      const sent = c.now();
      const rows = await c.sql("hb")(q.NODE_JOIN, [
        c.nodeId,
        this.#advertise.http,
        c.instance,
        c.opts.nodeTimeoutMs,
        this.#advertise.grpc,
      ]);
      if (rows.length === 1) {
        this.#beatSent = sent; // the joining statement's send is its heartbeat's lower bound
        c.joined = true;
        this.#lastBeat = c.now();
        this.healthySince = c.now();
        return;
      }
      if (c.now() >= deadline) {
        throw new Error(
          `node id \`${c.nodeId}\` is in use: another running server heartbeats under ` +
            "it; give every server a unique --node-id",
        );
      }
      if (!warned) {
        warned = true;
        log.shared.warn(
          "shared: another process heartbeats under this node id; waiting for it to stop",
          { node_id: c.nodeId, wait_ms: 3 * c.opts.nodeTimeoutMs },
        );
      }
      await new Promise((r) => setTimeout(r, TICK_MS));
    }
  }

  /**
   * The heartbeat, on its own timer so that slow maintenance cannot hold it back. A heartbeat
   * stuck for longer than heartbeatStuckMs means the connection is wedged: the client is
   * replaced.
   */
  async beat(): Promise<void> {
    const c = this.ctx;
    if (c.stopped) return;
    if (this.#beatStarted !== null) {
      if (c.now() - this.#beatStarted < heartbeatStuckMs(c.opts.nodeTimeoutMs)) return;
      log.shared.warn("shared: the heartbeat connection is stuck; reconnecting", {
        node_id: c.nodeId,
      });
      c.conns!.replaceHeartbeat();
    }
    const started = this.#beatStarted = c.now();
    try {
      await this.#heartbeat();
    } finally {
      if (this.#beatStarted === started) this.#beatStarted = null;
    }
  }

  async #heartbeat(): Promise<void> {
    const c = this.ctx;
    let rows: unknown[];
    const sent = c.now();
    try {
      rows = await c.sql("hb")<{ others: string | number }>(q.NODE_HEARTBEAT, [
        c.nodeId,
        c.instance,
        c.opts.nodeTimeoutMs,
        c.rt?.executions.running ?? 0,
      ]);
    } catch (e) {
      if (!this.#beatFailed) {
        this.#beatFailed = true;
        log.shared.error("shared: cannot write the heartbeat", {
          node_id: c.nodeId,
          error: (e as Error).message,
        });
      }
      return;
    }
    if (rows.length === 0) {
      // Another process joined under this id after this one was silent past the node timeout.
      c.replaced = true;
      c.stopped = true;
      const msg = `node id \`${c.nodeId}\` was taken by another process while this ` +
        "one was not heartbeating; this server stops serving";
      log.shared.error(`shared: ${msg}`, { node_id: c.nodeId });
      this.hooks.replaced(msg);
      return;
    }
    this.onAlone(Number((rows[0] as { others: string | number }).others) === 0);
    const gap = c.now() - this.#lastBeat;
    this.#lastBeat = c.now();
    if (this.#beatFailed || gap > c.opts.nodeTimeoutMs) {
      this.#beatFailed = false;
      this.#unchecked = true;
      this.healthySince = c.now();
      log.shared.info("shared: heartbeat written again; checking ownership", {
        node_id: c.nodeId,
        silent_ms: gap,
      });
    }
    this.#beatSent = sent;
    if (!this.#unchecked) return;
    try {
      await this.hooks.reconcile();
      this.#unchecked = false;
    } catch (e) {
      // Memory stays unchecked (reads replay the history); the next heartbeat checks again.
      log.shared.warn("shared: cannot check ownership after a silence; retrying", {
        node_id: c.nodeId,
        error: (e as Error).message,
      });
    }
  }

  /**
   * Something showed this node id held by another process (Ownership.replaced, forward): the
   * heartbeat runs now rather than at its next tick, and if another instance is on the node's
   * row this process stops serving (#heartbeat). One heartbeat at a time (beat).
   */
  checkReplaced(): void {
    if (this.ctx.stopped || !this.ctx.joined) return;
    void this.beat();
  }

  /**
   * A request reached this process after another one took its node id, or a command for an
   * execution that its node id holds in another process (`id`).
   */
  replacedError(id?: string): OrbitError {
    const node = this.ctx.nodeId;
    const what = id === undefined
      ? `node id \`${node}\` was taken by another process`
      : `execution ${id} is owned by node \`${node}\` in another process`;
    return new OrbitError(
      503,
      "NODE_REPLACED",
      `${what}: a server started with this server's --node-id replaced it, and this one stops ` +
        "serving; nothing was applied, retry through another server",
      { node_id: node, retry_after_s: 1 },
      { "retry-after": "1" },
    );
  }

  /**
   * The nodes' list for `/v1/ready` and `/v1/health`, which must answer whatever the request
   * connections do: a load balancer's check times out long before a wedged statement fails
   * (requestsStuckMs: 10 s at the page's node timeout), and a server whose heartbeat is
   * written is ready whether or not this list can be read. One read at a time (checks that
   * arrive meanwhile share it), awaited up to NODES_READ_WAIT_MS; past that, or when it fails,
   * the last list read answers, its ages advanced by the time since it was read (`staleMs`), or
   * none.
   */
  async readNodes(): Promise<{ rows: NodeRow[]; staleMs: number }> {
    const c = this.ctx;
    if (!this.#nodesRead) {
      const started = c.now();
      this.#nodesRead = c.sql("req")<NodeRow>(q.LIST_NODES, [c.opts.nodeTimeoutMs])
        .then((rows) => {
          this.#nodesLast = { rows, at: started };
          if (this.#nodesSlow) {
            this.#nodesSlow = false;
            log.shared.info("the cluster's nodes are read again", {
              node_id: c.nodeId,
              waited_ms: c.now() - started,
            });
          }
          return rows;
        })
        .finally(() => this.#nodesRead = null);
    }
    try {
      return { rows: await withTimeout(this.#nodesRead, NODES_READ_WAIT_MS), staleMs: 0 };
    } catch (e) {
      if (!(e instanceof TimeoutError)) {
        log.shared.warn("cannot read the cluster's nodes", { error: (e as Error).message });
      } else if (!this.#nodesSlow) {
        this.#nodesSlow = true;
        log.shared.warn("cannot read the cluster's nodes in time; answering from the last list", {
          node_id: c.nodeId,
          waited_ms: NODES_READ_WAIT_MS,
        });
      }
    }
    const last = this.#nodesLast;
    return last ? { rows: last.rows, staleMs: c.now() - last.at } : { rows: [], staleMs: 0 };
  }

  /**
   * Sets this node's heartbeat to 0, on the heartbeat connection, or on the requests' pool if
   * that one does not answer within LEAVE_WAIT_MS (a connection can be stuck behind a
   * statement PostgreSQL never received); failing both, the others take over after
   * --node-timeout.
   */
  async leave(): Promise<void> {
    const params = [this.ctx.nodeId, this.ctx.instance];
    let error: unknown;
    for (const role of ["hb", "req"] as const) {
      try {
        await withTimeout(this.ctx.sql(role)(q.NODE_LEAVE, params), LEAVE_WAIT_MS);
        log.shared.info(
          "shared: left the cluster; other servers take over this server's executions",
        );
        return;
      } catch (e) {
        error = e;
      }
    }
    log.shared.warn(
      "shared: cannot leave the cluster; the others take over after --node-timeout",
      { error: (error as Error).message },
    );
  }
}
