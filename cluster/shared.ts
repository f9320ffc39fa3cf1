/**
 * Shared mode: every server active on one PostgreSQL (reference page, "Shared mode (several
 * active servers)"). A strategy over the same engine and store: the engine appends with an
 * ownership fence per execution (lib/executions/executions.ts `Ownership`, sql/postgres/shared.ts
 * COMMIT_OWNED), workers use the shared queue (cluster/shared_workers.ts), and commands for
 * executions owned elsewhere go through the owner's inbox (`forward`).
 *
 * State model. A node is `joining` (its id is written to `orbit_nodes` with this process's
 * instance; a live row of another instance is waited for up to three node timeouts, then the
 * start is refused), `resuming` (it bumps the epoch of every execution it owned before a
 * restart, which fences the previous process, and loads them from history), then `serving`.
 * Ownership is per process: every ownership row records the instance that obtained its epoch
 * (creation, takeover, resume), and a node adopts an epoch it reads only from a row of its own
 * instance. A process replaced under its node id therefore cannot write again at its
 * successor's epoch; it stops serving when its heartbeat finds the other instance on its row,
 * or sooner, when a fence or a read shows its node id held by another process.
 * Every second it writes its heartbeat on the database clock, takes over its rendezvous share
 * of the executions of dead nodes (single-winner UPDATE … WHERE node_id = $dead, batches of
 * 100 trees), and applies its inbox (also on NOTIFY orbit_inbox).
 *
 * Trust window. The node is ready only while its last heartbeat write is younger than
 * --node-timeout; after that the others may take its executions. Timing is not what keeps a
 * single writer: every append checks owner and epoch under FOR SHARE in its own statement, so
 * a paused node that resumes cannot write what it lost; its appends fail `fenced:` and it
 * drops those executions. A node that could not heartbeat for longer than the node timeout
 * compares what it holds with `orbit_owners` as soon as it can, and drops what it lost.
 *
 * Failure handling. Each role has its own postgres.js client (application_name
 * `orbit-<role>:<node id>`): the store (history appends, 1 connection), requests (claims,
 * forwarding, sessions, 4), heartbeat (heartbeats, takeovers, inbox, 1) and listen (NOTIFY,
 * 1). postgres.js reconnects each on its own, with a short backoff. A forwarded command
 * waits up to 10 s for the owner's reply; if none came, its inbox entry is withdrawn (so it
 * is never applied later) and the request answers 503 OWNER_UNAVAILABLE with retry-after.
 */
import { setImmediate } from "node:timers";
import type { Hono } from "hono";
import type postgres from "postgres";
import type { Command } from "../lib/engine/decide.ts";
import type { ExecutionState } from "../lib/engine/state.ts";
import { liveTokens, stepOfToken } from "../lib/engine/state.ts";
import { type Ownership, type RemoteCommands, rowOf } from "../lib/executions/executions.ts";
import { unitOf } from "../lib/executions/shared_changes.ts";
import { OrbitError, storageError, storageFailure } from "../lib/errors.ts";
import { log } from "../lib/log.ts";
import { settledBy, TimeoutError, withTimeout } from "../lib/with_timeout.ts";
import type { Runtime, RuntimeOptions } from "../lib/runtime.ts";
import { openStore } from "../lib/store/open.ts";
import { postgresClient } from "../lib/store/postgres.ts";
import { WatchedClient } from "../lib/store/watched_client.ts";
import { type ExecutionRow, InboxGoneError, type Store } from "../lib/store/store.ts";
import type { EagerSession, TaskPayload } from "../lib/workers/sessions.ts";

import * as q from "../sql/postgres/shared.ts";
import type { ClusterView } from "../lib/cluster_view.ts";
import { SharedWorkers } from "./shared_workers.ts";
import { commandOf, errorOf, type InboxEntry, inboxOf, type Reply } from "./shared/messages.ts";
import { heartbeatStuckMs, rendezvousOwner, requestsStuckMs } from "./shared/placement.ts";

const TICK_MS = 1000;
const TAKEOVER_BATCH = 100;
/** Failed takeover batches kept for #recoverTakeovers (one a tick at most). */
const LOST_TAKEOVERS_MAX = 1000;
const FORWARD_WAIT_MS = 10_000;
/** How long a forward whose entry the owner deleted (applied or answered) waits for the reply. */
const FORWARD_LATE_REPLY_MS = 2_000;
/** Replies that came with no waiter, kept for one that registers late (SharedNode.#early). */
const EARLY_REPLIES_MAX = 1_000;
/** A graceful leave's statement, per connection tried (SharedNode.#leave). */
const LEAVE_WAIT_MS = 1_000;
/**
 * How long `/v1/ready` and `/v1/health` wait for the nodes' list (see #readNodes): well inside
 * the 1 s a health check is given by default (HAProxy's `inter`, Kubernetes' probe timeout).
 */
const NODES_READ_WAIT_MS = 250;
/** How long notifications nobody awaits on the request path wait for others to join them. */
const NOTIFY_BATCH_MS = 5;
/** A NOTIFY payload must stay below 8000 bytes (node id and a space come first). */
const REPLY_MAX_BYTES = 7000;
const utf8 = new TextEncoder();

interface NodeRow {
  node_id: string;
  addr: string | null;
  age_ms: number;
  owned: number;
}

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

export class SharedNode implements ClusterView, RemoteCommands {
  readonly instance = crypto.randomUUID();
  readonly epochs = new Map<string, number>();
  readonly now: () => number;
  #store: Store | null = null;
  #req: WatchedClient | null = null;
  #hb: postgres.Sql | null = null;
  #listen: postgres.Sql | null = null;
  #rt: Runtime | null = null;
  #app: Hono | null = null;
  #workers: SharedWorkers | null = null;
  /** Notifications waiting for the statement in flight (see notify). */
  #outbox = new Map<string, { channel: string; payload: string }>();
  #notifying = false;
  /**
   * No other node heartbeated within the node timeout at the last heartbeat: `orbit_tasks` and
   * `orbit_done` would reach only this node's own listener, so they are delivered in memory and
   * not sent. A node that joins meanwhile is seen at the next heartbeat (within a second); until
   * then its polls and waits find work by their one-second re-check.
   */
  #alone = false;
  /** Ends the batching wait of notifications at once (an urgent one arrived). */
  #hurry: (() => void) | null = null;
  #advertise: string | null = null;
  #joined = false;
  #resumed = false;
  #stopped = false;
  /** Another process joined under this node id (#heartbeat): this one serves no writes. */
  #replaced = false;
  #lastBeat = 0;
  /**
   * When the latest heartbeat that was written had been sent: until a node timeout after it,
   * no other node can have judged this one dead (liveness is the database's clock at the write,
   * which is later) and taken its executions over (memoryCurrent).
   */
  #beatSent = 0;
  /**
   * A silence (heartbeats not written, or a gap past the node timeout) whose ownership check
   * (#reconcile) has not completed: memory may hold executions taken over meanwhile.
   */
  #unchecked = false;
  #beatFailed = false;
  #ticking = false;
  /** Takeover batches whose statement or adoption failed here (#recoverTakeovers). */
  #lostTakeovers: Array<{ from: string; roots: string[] }> = [];
  #tick: ReturnType<typeof setInterval> | undefined;
  #beat: ReturnType<typeof setInterval> | undefined;
  #beatStarted: number | null = null;
  /** Since when the heartbeat has been written without a gap (redeliveries wait for calm). */
  #healthySince = 0;
  #ticks = 0;
  #replies = new Map<number, (r: Reply) => void>();
  #early = new Map<number, Reply>();
  #done = new Map<string, Set<() => void>>();
  #draining: Promise<void> | null = null;
  #drainAgain = false;
  #applying = new Set<number>();
  /** The read of the nodes' list in flight, the last one that answered (#readNodes). */
  #nodesRead: Promise<NodeRow[]> | null = null;
  #nodesLast: { rows: NodeRow[]; at: number } | null = null;
  #nodesSlow = false;
  /**
   * Inbox entries applied (or removed) here lately: an entry reaches the owner twice, in its
   * notification and in the inbox read that may have started before its commit deleted it.
   */
  #applied = new Set<number>();

  constructor(readonly opts: SharedNodeOptions) {
    this.now = opts.now ?? Date.now;
  }

  get nodeId(): string {
    return this.opts.nodeId;
  }
  role(): "shared" {
    return "shared";
  }
  term(): null {
    return null;
  }
  leader(): null {
    return null;
  }
  /** Ready: resumed, and the heartbeat written within the node timeout. */
  serving(): boolean {
    return this.#joined && this.#resumed && !this.#stopped &&
      this.now() - this.#lastBeat < this.opts.nodeTimeoutMs;
  }
  /**
   * Whether what memory holds is still this node's, so that it may answer reads (queries,
   * `/pending`): the latest heartbeat written was sent less than a node timeout ago, and no
   * ownership check after a silence is pending. Otherwise reads replay the history: another
   * node may have taken the executions over and moved them on.
   */
  memoryCurrent(): boolean {
    return !this.#stopped && !this.#unchecked &&
      this.now() - this.#beatSent < this.opts.nodeTimeoutMs;
  }
  get runtime(): Runtime {
    return this.#rt!;
  }
  get advertiseAddr(): string | null {
    return this.#advertise;
  }

  async details(): Promise<Record<string, unknown>> {
    const read = await this.#readNodes();
    // Another node's count is the one it wrote with its last heartbeat; this node's is now.
    const mine = this.#rt?.executions.running;
    const nodes = read.rows
      .map((n) => {
        const age = Math.max(0, Number(n.age_ms) + read.staleMs);
        return {
          node_id: n.node_id,
          addr: n.addr,
          live: age < this.opts.nodeTimeoutMs,
          heartbeat_age_ms: age,
          owned_executions: n.node_id === this.opts.nodeId && mine !== undefined
            ? mine
            : Number(n.owned),
        };
      })
      .filter((n) => n.live || n.owned_executions > 0);
    return {
      // In memory or not (`--cache-executions` lets waiting ones leave memory).
      owned_executions: this.#rt?.executions.running ?? 0,
      tasks_claimed: this.#workers?.tasksClaimed ?? 0,
      nodes,
    };
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
  async #readNodes(): Promise<{ rows: NodeRow[]; staleMs: number }> {
    if (!this.#nodesRead) {
      const started = this.now();
      this.#nodesRead = this.#sql("req")<NodeRow>(q.LIST_NODES, [this.opts.nodeTimeoutMs])
        .then((rows) => {
          this.#nodesLast = { rows, at: started };
          if (this.#nodesSlow) {
            this.#nodesSlow = false;
            log.shared.info("the cluster's nodes are read again", {
              node_id: this.opts.nodeId,
              waited_ms: this.now() - started,
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
          node_id: this.opts.nodeId,
          waited_ms: NODES_READ_WAIT_MS,
        });
      }
    }
    const last = this.#nodesLast;
    return last ? { rows: last.rows, staleMs: this.now() - last.at } : { rows: [], staleMs: 0 };
  }

  #sql(role: "req" | "hb") {
    if (role === "req") {
      const req = this.#req!;
      return <T>(text: string, params: unknown[] = []): Promise<T[]> =>
        req.unsafe<T>(text, params, { prepare: true });
    }
    const sql = this.#hb!;
    const after = this.opts.afterStatement;
    return <T>(text: string, params: unknown[] = []): Promise<T[]> => {
      const r = sql.unsafe(text, params as postgres.ParameterOrJSON<never>[], {
        prepare: true,
      }) as unknown as Promise<T[]>;
      return after ? r.then((rows) => (after(text), rows)) : r;
    };
  }

  /**
   * The app; once another process took this node id (#heartbeat), every request but a read
   * answers 503 NODE_REPLACED until the server exits (main.ts: onFatal), so that nothing is
   * written meanwhile.
   */
  readonly fetch = (req: Request, info: Deno.ServeHandlerInfo): Response | Promise<Response> => {
    if (this.#replaced && req.method !== "GET" && req.method !== "HEAD") {
      const e = this.#replacedError();
      return new Response(JSON.stringify(e.toBody()), {
        status: e.status,
        headers: { "content-type": "application/json", ...e.headers },
      });
    }
    return this.#app!.fetch(req, info);
  };

  /** Opens the connections and builds the runtime; the server can listen once this resolves. */
  async open(): Promise<void> {
    const id = this.opts.nodeId;
    this.#store = await openStore(this.opts.url, {
      max: 1,
      applicationName: `orbit-store:${id}`,
      settings: q.SHARED_CONNECTION_SETTINGS, // kept plans stay on their indexes; no JIT
      afterCommit: ({ queued, closed }) => {
        const n = closed.map((payload) => ({ channel: "orbit_done", payload }));
        // The payload names the node: its own listener knows these rows are in its memory.
        if (queued > 0) n.push({ channel: "orbit_tasks", payload: id });
        this.notify(n);
        // Local waiters and polls need no round trip through the database.
        if (queued > 0) this.#workers?.wake();
        for (const execId of closed) this.#wakeDone(execId);
      },
    });
    // Claims, forwards, sessions: a statement without an answer fails after requestsStuckMs
    // and the pool is replaced (lib/store/watched_client.ts).
    this.#req = new WatchedClient(
      () =>
        postgresClient(this.opts.url, {
          max: 4,
          applicationName: `orbit-requests:${id}`,
          settings: q.SHARED_CONNECTION_SETTINGS,
        }),
      { what: "the requests'", stuckMs: requestsStuckMs(this.opts.nodeTimeoutMs) },
    );
    this.#hb = postgresClient(this.opts.url, {
      max: 1,
      applicationName: `orbit-heartbeat:${id}`,
      settings: q.SHARED_CONNECTION_SETTINGS,
    });
    this.#listen = postgresClient(this.opts.url, {
      max: 1,
      applicationName: `orbit-listen:${id}`,
    });
    const ownership: Ownership = {
      nodeId: id,
      instance: this.instance,
      epochs: this.epochs,
      ownerOf: async (execId) => {
        const [o] = await this.#sql("req")<
          { node_id: string; epoch: number; instance: string | null }
        >(q.OWNER_OF, [execId]);
        return o ? { node_id: o.node_id, epoch: Number(o.epoch), instance: o.instance } : null;
      },
      reclaim: (execId) => this.#reclaim(execId),
      staleClaims: async (units, before) => {
        const rows = await this.#sql("req")<
          { execution_id: string; unit: string; token: string }
        >(q.STALE_CLAIMS, [units.map((u) => u.unit), before]);
        return rows;
      },
      requeue: async (token) => {
        const r = await this.#sql("req")(q.REQUEUE_STALE_CLAIM, [token]);
        if (r.length > 0) this.#workers?.requeued();
        return r.length > 0;
      },
      replaced: () => this.#checkReplaced(),
      listWaking: async (before, after, limit) => {
        const rows = await this.#sql("req")<
          { execution_id: string; wake_at_ms: string | number; epoch: string | number }
        >(q.LIST_WAKING_OWNED, [
          id,
          before,
          after?.wake_at_ms ?? 0,
          after?.execution_id ?? "",
          Math.max(1, Math.floor(limit)),
          this.instance,
        ]);
        return rows.map((r) => ({
          execution_id: r.execution_id,
          wake_at_ms: Number(r.wake_at_ms),
          epoch: Number(r.epoch),
        }));
      },
      onDone: (execId, wake) => {
        let set = this.#done.get(execId);
        if (!set) this.#done.set(execId, set = new Set());
        set.add(wake);
        return () => {
          set!.delete(wake);
          if (set!.size === 0) this.#done.delete(execId);
        };
      },
    };
    const rt = this.opts.runtime(this.#store, {
      ownership,
      workers: (executions, metrics) =>
        this.#workers = new SharedWorkers(executions, metrics, {
          nodeId: id,
          sessionTimeoutMs: this.opts.sessionTimeoutMs,
          now: this.now,
          newId: this.opts.newId ?? (() => crypto.randomUUID()),
          sql: this.#req!,
          drainInbox: async (execId) => {
            await this.#drainExecution(execId);
          },
          healthySince: () => this.#healthySince,
          notify: (list) => this.notify(list),
        }),
      recover: () => this.#resume(),
    });
    rt.executions.remote = this;
    rt.executions.memoryCurrent = () => this.memoryCurrent();
    this.#rt = rt;
    this.#app = this.opts.app(rt);
    const listen = this.#listen;
    // Rows another node queued (or put back) may be claimed here; this node's own are in its
    // memory already (its commit woke the polls). (Re)connected: what was announced meanwhile
    // is lost, so polls look again.
    await listen.listen(
      "orbit_tasks",
      (payload) => payload === id ? this.#workers?.wake() : this.#workers?.wakeRemote(),
      () => this.#workers?.wakeRemote(),
    );
    await listen.listen("orbit_inbox", (payload) => {
      const sp = payload.indexOf(" ");
      if ((sp < 0 ? payload : payload.slice(0, sp)) !== id) return;
      if (sp < 0) return this.drain();
      try {
        this.#direct(JSON.parse(payload.slice(sp + 1)) as InboxEntry);
      } catch {
        this.drain();
      }
    });
    await listen.listen("orbit_done", (execId) => this.#wakeDone(execId));
    // A deploy through another server clears that workflow's cached latest version; whenever
    // the listening connection is (re)established (postgres.js listens again after it breaks),
    // every cached latest version is dropped, since what was announced meanwhile is lost.
    await listen.listen(
      "orbit_defs",
      (name) => rt.definitions.forget(name),
      () => rt.definitions.forgetAll(),
    );
    await listen.listen("orbit_reply", (payload) => {
      const sp = payload.indexOf(" ");
      if (payload.slice(0, sp) !== id) return;
      try {
        const r = JSON.parse(payload.slice(sp + 1)) as Reply;
        const waiter = this.#replies.get(r.seq);
        if (waiter) waiter(r);
        else {
          // Before its waiter (rare), or after the waiter gave up: kept, the oldest dropped.
          this.#early.set(r.seq, r);
          if (this.#early.size > EARLY_REPLIES_MAX) {
            this.#early.delete(this.#early.keys().next().value!);
          }
        }
      } catch { /* not ours */ }
    });
  }

  /** Waits for the end of `execId` on this server look again. */
  #wakeDone(execId: string): void {
    for (const w of [...(this.#done.get(execId) ?? [])]) w();
  }

  /**
   * Sends notifications in a statement of their own, after the commit they announce (a NOTIFY
   * inside a writing transaction would serialize every commit of the cluster). One statement
   * is in flight at a time; what arrives meanwhile goes out together in the next one, each
   * channel and payload once (replies are unique). A lost one is covered by the one-second
   * re-checks of polls, waits and the inbox.
   */
  notify(list: Array<{ channel: string; payload: string }>): void {
    if (list.length === 0 || !this.#req) return;
    let urgent = false;
    for (const n of list) {
      if (this.#alone && n.channel === "orbit_tasks") {
        this.#workers?.wake(); // what this node's listener would have done
        continue;
      }
      if (this.#alone && n.channel === "orbit_done") {
        this.#wakeDone(n.payload);
        continue;
      }
      this.#outbox.set(`${n.channel}\u0000${n.payload}`, n);
      if (n.channel === "orbit_inbox" || n.channel === "orbit_reply") urgent = true;
    }
    if (this.#outbox.size === 0) return;
    if (urgent) this.#hurry?.();
    if (!this.#notifying) void this.#sendNotifications(urgent);
  }

  async #sendNotifications(urgent: boolean): Promise<void> {
    this.#notifying = true;
    try {
      // Let the commits that end in this turn of the event loop add theirs. What nobody
      // awaits on the request path (new tasks, finished executions: polls and waits also look
      // again every second) waits a little longer, to go out together with more.
      await new Promise<void>((r) => {
        if (urgent) return setImmediate(r);
        const t = setTimeout(done, NOTIFY_BATCH_MS);
        this.#hurry = done;
        function done() {
          clearTimeout(t);
          r();
        }
      });
      this.#hurry = null;
      while (this.#outbox.size > 0 && this.#req) {
        const batch = [...this.#outbox.values()];
        this.#outbox.clear();
        await this.#sql("req")(q.NOTIFY, [batch]).catch((e) =>
          log.shared.warn("shared: cannot send notifications", { error: (e as Error).message })
        );
      }
    } finally {
      this.#notifying = false;
    }
  }

  /** Joins under the node id, resumes what it owns, and serves (after the listener is bound). */
  async start(advertiseAddr: string | null): Promise<void> {
    this.#advertise = advertiseAddr;
    this.#beatSent = await this.#join();
    this.#joined = true;
    this.#lastBeat = this.now();
    this.#healthySince = this.now();
    this.#beat = setInterval(() => this.#onBeat(), TICK_MS);
    this.#tick = setInterval(() => this.#onTick(), TICK_MS);
    await this.#rt!.start();
    this.#rt!.executions.startCache();
    this.#rt!.executions.startAudit();
    this.#resumed = true;
    log.shared.info("shared: node is serving", {
      node_id: this.opts.nodeId,
      resumed: this.#rt!.executions.running,
    });
    this.drain();
  }

  /** Answers when the statement that joined was sent (its heartbeat's lower bound). */
  async #join(): Promise<number> {
    const deadline = this.now() + 3 * this.opts.nodeTimeoutMs;
    let warned = false;
    for (;;) {
      const sent = this.now();
      const rows = await this.#sql("hb")(q.NODE_JOIN, [
        this.opts.nodeId,
        this.#advertise,
        this.instance,
        this.opts.nodeTimeoutMs,
      ]);
      if (rows.length === 1) return sent;
      if (this.now() >= deadline) {
        throw new Error(
          `node id \`${this.opts.nodeId}\` is in use: another running server heartbeats under ` +
            "it; give every server a unique --node-id",
        );
      }
      if (!warned) {
        warned = true;
        log.shared.warn(
          "shared: another process heartbeats under this node id; waiting for it to stop",
          { node_id: this.opts.nodeId, wait_ms: 3 * this.opts.nodeTimeoutMs },
        );
      }
      await new Promise((r) => setTimeout(r, TICK_MS));
    }
  }

  /** A restart under the same node id: bump the epochs it owns (fencing the old process). */
  async #resume(): Promise<{ executions: number; in_flight: number }> {
    const rows = await this.#sql("hb")<{ execution_id: string; epoch: number }>(
      q.BUMP_OWN_EPOCHS,
      [this.opts.nodeId, this.now(), this.instance],
    );
    return await this.#adopt(rows, this.opts.nodeId);
  }

  /**
   * Loads executions this node now owns at the given epochs (with `--cache-executions` those
   * with work due; the rest load on demand); rebuilds their queue rows.
   */
  async #adopt(
    rows: Array<{ execution_id: string; epoch: number }>,
    from: string,
  ): Promise<{ executions: number; in_flight: number; loaded: number }> {
    if (rows.length === 0) return { executions: 0, in_flight: 0, loaded: 0 };
    const ex = this.#rt!.executions;
    // Held here at another epoch: this node lost it (another took it over while this one was
    // silent) and takes it back before it noticed; that memory misses what the other wrote.
    // Let it go: the load below rebuilds it from history.
    let stale = 0;
    for (const r of rows) {
      const id = r.execution_id;
      if (!ex.holds(id) || this.epochs.get(id) === Number(r.epoch)) continue;
      const last = ex.stateOf(id);
      ex.drop(id);
      if (last) this.#workers?.dropped(last);
      stale++;
    }
    if (stale > 0) {
      log.shared.warn("shared: rebuilding executions taken back that memory held from before", {
        node_id: this.opts.nodeId,
        executions: stale,
      });
    }
    for (const r of rows) this.epochs.set(r.execution_id, Number(r.epoch));
    const ids = rows.map((r) => r.execution_id);
    const wake = ex.caches
      ? new Map(
        (await this.#sql("hb")<
          { execution_id: string; status: string; wake_at_ms: string | number | null }
        >(q.WAKE_OF, [ids])).map((r) => [r.execution_id, r]),
      )
      : new Map();
    // No row read: status null, and it loads (the load finds what there is).
    const loaded = await ex.adopt(ids.map((id) => {
      const w = wake.get(id);
      return {
        execution_id: id,
        status: w?.status ?? null,
        wake_at_ms: w?.wake_at_ms === null || w?.wake_at_ms === undefined
          ? null
          : Number(w.wake_at_ms),
      };
    }));
    // A child whose parent ended without its cancel committed (the previous owner stopped in
    // between) is cancelled now, as after a restart.
    this.#rt!.children.afterRecovery(ids);
    // Claims the previous owner made for itself and had not recorded as dispatched go back on
    // the queue (a claim for another owner wrote its `dispatched` inbox entry with it).
    const tasks = await this.#sql("hb")<
      { execution_id: string; token: string | null; state: string; claimed_by: string | null }
    >(q.TASKS_OF, [ids]);
    const live = new Set<string>();
    for (const id of ids) {
      const st = ex.stateOf(id);
      if (st) { for (const { token } of liveTokens(st)) live.add(token); }
    }
    const claimedBy = new Map<string, string | null>();
    let requeued = false;
    for (const t of tasks) {
      if (t.token) claimedBy.set(t.token, t.claimed_by);
      if (t.state === "claimed" && t.token && t.claimed_by === from && !live.has(t.token)) {
        await this.#sql("hb")(q.REQUEUE_TASK, [t.token]);
        requeued = true;
      }
    }
    if (requeued) this.#workers?.requeued(); // one announcement for all of them
    // Attempts the previous owner handed out itself (its claims and eager dispatches; a row
    // gone too) are redelivered after a session timeout unless their result comes: the answer
    // that carried one may have died with it. Those another server handed out stay in flight
    // while their workers are alive, watched like any other (the page's "Ownership").
    const orphans = [...live].filter((t) => {
      const by = claimedBy.get(t);
      return by === undefined || by === null || by === from;
    });
    this.#workers?.adoptOrphans(orphans);
    return loaded;
  }

  /**
   * The heartbeat, on its own timer so that slow maintenance cannot hold it back. A heartbeat
   * stuck for longer than heartbeatStuckMs means the connection is wedged: the client is
   * replaced.
   */
  async #onBeat(): Promise<void> {
    if (this.#stopped) return;
    if (this.#beatStarted !== null) {
      if (this.now() - this.#beatStarted < heartbeatStuckMs(this.opts.nodeTimeoutMs)) return;
      log.shared.warn("shared: the heartbeat connection is stuck; reconnecting", {
        node_id: this.opts.nodeId,
      });
      const old = this.#hb;
      this.#hb = postgresClient(this.opts.url, {
        max: 1,
        applicationName: `orbit-heartbeat:${this.opts.nodeId}`,
        settings: q.SHARED_CONNECTION_SETTINGS,
      });
      old?.end({ timeout: 0 }).catch(() => {});
    }
    const started = this.#beatStarted = this.now();
    try {
      await this.#heartbeat();
    } finally {
      if (this.#beatStarted === started) this.#beatStarted = null;
    }
  }

  async #onTick(): Promise<void> {
    if (this.#ticking || this.#stopped) return;
    this.#ticking = true;
    try {
      if (this.#stopped || !this.serving()) return;
      await this.#takeOver();
      await this.#reclaimStale();
      this.drain();
      if (++this.#ticks % 5 === 0) await this.#orphanInbox();
    } catch (e) {
      log.shared.warn("shared: cluster maintenance failed", { error: (e as Error).message });
    } finally {
      this.#ticking = false;
    }
  }

  async #heartbeat(): Promise<void> {
    let rows: unknown[];
    const sent = this.now();
    try {
      rows = await this.#sql("hb")<{ others: string | number }>(q.NODE_HEARTBEAT, [
        this.opts.nodeId,
        this.instance,
        this.opts.nodeTimeoutMs,
        this.#rt?.executions.running ?? 0,
      ]);
    } catch (e) {
      if (!this.#beatFailed) {
        this.#beatFailed = true;
        log.shared.error("shared: cannot write the heartbeat", {
          node_id: this.opts.nodeId,
          error: (e as Error).message,
        });
      }
      return;
    }
    if (rows.length === 0) {
      // Another process joined under this id after this one was silent past the node timeout.
      this.#replaced = true;
      this.#stopped = true;
      for (const id of this.#rt!.executions.heldIds()) this.#rt!.executions.drop(id);
      const msg = `node id \`${this.opts.nodeId}\` was taken by another process while this ` +
        "one was not heartbeating; this server stops serving";
      log.shared.error(`shared: ${msg}`, { node_id: this.opts.nodeId });
      this.opts.onFatal(msg);
      return;
    }
    this.#alone = Number((rows[0] as { others: string | number }).others) === 0;
    const gap = this.now() - this.#lastBeat;
    this.#lastBeat = this.now();
    if (this.#beatFailed || gap > this.opts.nodeTimeoutMs) {
      this.#beatFailed = false;
      this.#unchecked = true;
      this.#healthySince = this.now();
      log.shared.info("shared: heartbeat written again; checking ownership", {
        node_id: this.opts.nodeId,
        silent_ms: gap,
      });
    }
    this.#beatSent = sent;
    if (!this.#unchecked) return;
    try {
      await this.#reconcile();
      this.#unchecked = false;
    } catch (e) {
      // Memory stays unchecked (reads replay the history); the next heartbeat checks again.
      log.shared.warn("shared: cannot check ownership after a silence; retrying", {
        node_id: this.opts.nodeId,
        error: (e as Error).message,
      });
    }
  }

  /**
   * Something showed this node id held by another process (Ownership.replaced, forward): the
   * heartbeat runs now rather than at its next tick, and if another instance is on the node's
   * row this process stops serving (#heartbeat). One heartbeat at a time (#onBeat).
   */
  #checkReplaced(): void {
    if (this.#stopped || !this.#joined) return;
    void this.#onBeat();
  }

  /**
   * Ownership.reclaim: the tree of `id`, whose row names this node id for another process of
   * it, is taken if this process holds the node id (RECLAIM); the other executions of the tree
   * are adopted as at a takeover. Null: this process was replaced (it checks its heartbeat),
   * or the row moved.
   */
  async #reclaim(id: string): Promise<number | null> {
    const rows = await this.#sql("req")<{ execution_id: string; epoch: number }>(q.RECLAIM, [
      this.opts.nodeId,
      id,
      this.instance,
      this.now(),
    ]);
    const mine = rows.find((r) => r.execution_id === id);
    if (!mine) {
      // Taken back meanwhile (#reclaimStale), or this process was replaced.
      const [o] = await this.#sql("req")<{ node_id: string; epoch: number; instance: string }>(
        q.OWNER_OF,
        [id],
      );
      if (o?.node_id === this.opts.nodeId && o.instance === this.instance) return Number(o.epoch);
      this.#checkReplaced();
      return null;
    }
    log.shared.warn("shared: took back executions a replaced process of this node id created", {
      node_id: this.opts.nodeId,
      executions: rows.length,
    });
    // The caller loads `id` itself (inside its serial chain); the rest of the tree loads here.
    const others = rows.filter((r) => r.execution_id !== id);
    if (others.length > 0) {
      this.#adopt(others, "").catch((e) =>
        log.shared.warn("shared: cannot load executions taken back; they load on demand", {
          error: (e as Error).message,
        })
      );
    }
    return Number(mine.epoch);
  }

  /**
   * Every second: trees of this node id held by a process this one replaced (its late starts,
   * see RECLAIM) are taken back and adopted as at a takeover, so that one nothing reaches (a
   * timer, a child's end) does not wait for the node's next restart. A replaced process takes
   * nothing and checks its heartbeat.
   */
  async #reclaimStale(): Promise<void> {
    const stale = await this.#sql("hb")<{ root_id: string }>(q.STALE_ROOTS, [
      this.opts.nodeId,
      this.instance,
    ]);
    if (stale.length === 0) return;
    const rows = await this.#sql("hb")<{ execution_id: string; epoch: number }>(
      q.RECLAIM_ROOTS,
      [this.opts.nodeId, stale.map((r) => r.root_id), this.instance, this.now()],
    );
    if (rows.length === 0) return this.#checkReplaced();
    log.shared.warn("shared: took back executions a replaced process of this node id created", {
      node_id: this.opts.nodeId,
      executions: rows.length,
    });
    await this.#adopt(rows, "");
  }

  /**
   * A request reached this process after another one took its node id, or a command for an
   * execution that its node id holds in another process (`id`).
   */
  #replacedError(id?: string): OrbitError {
    const what = id === undefined
      ? `node id \`${this.opts.nodeId}\` was taken by another process`
      : `execution ${id} is owned by node \`${this.opts.nodeId}\` in another process`;
    return new OrbitError(
      503,
      "NODE_REPLACED",
      `${what}: a server started with this server's --node-id replaced it, and this one stops ` +
        "serving; nothing was applied, retry through another server",
      { node_id: this.opts.nodeId, retry_after_s: 1 },
      { "retry-after": "1" },
    );
  }

  /** After a silence: drop what this node no longer owns (at the epoch it holds). */
  async #reconcile(): Promise<void> {
    const ex = this.#rt!.executions;
    const ids = ex.heldIds();
    if (ids.length > 0) await this.#dropLost(ids);
    // Executions memory did not hold (`--cache-executions`) may have been taken over as well.
    const [n] = await this.#sql("hb")<{ n: string | number }>(q.COUNT_OWNED_RUNNING, [
      this.opts.nodeId,
      this.instance,
    ]);
    ex.recount(Number(n?.n ?? 0));
  }

  async #dropLost(ids: string[]): Promise<void> {
    const ex = this.#rt!.executions;
    const rows = await this.#sql("hb")<{ execution_id: string; epoch: number }>(q.OWNED_AMONG, [
      this.opts.nodeId,
      ids,
      this.instance,
    ]);
    const owned = new Map(rows.map((r) => [r.execution_id, Number(r.epoch)]));
    let dropped = 0;
    for (const id of ids) {
      const held = this.epochs.get(id);
      if (owned.has(id) && owned.get(id) === held) continue;
      const last = ex.stateOf(id);
      ex.drop(id);
      if (last) this.#workers?.dropped(last);
      dropped++;
    }
    if (dropped > 0) {
      log.shared.warn("shared: dropped executions another node took over", {
        node_id: this.opts.nodeId,
        executions: dropped,
      });
    }
  }

  async #takeOver(): Promise<void> {
    await this.#recoverTakeovers();
    const dead = await this.#sql("hb")<{ root_id: string; node_id: string }>(q.DEAD_ROOTS, [
      this.opts.nodeId,
      this.opts.nodeTimeoutMs,
    ]);
    if (dead.length === 0) return;
    const nodes = await this.#sql("hb")<{ node_id: string; age_ms: number }>(q.LIST_NODES, [
      this.opts.nodeTimeoutMs,
    ]);
    const live = nodes.filter((n) => n.age_ms < this.opts.nodeTimeoutMs).map((n) => n.node_id);
    if (!live.includes(this.opts.nodeId)) live.push(this.opts.nodeId);
    const mine = new Map<string, string[]>();
    for (const d of dead) {
      if (rendezvousOwner(d.root_id, live) !== this.opts.nodeId) continue;
      let list = mine.get(d.node_id);
      if (!list) mine.set(d.node_id, list = []);
      list.push(d.root_id);
    }
    for (const [from, roots] of mine) {
      for (let i = 0; i < roots.length; i += TAKEOVER_BATCH) {
        const batch = roots.slice(i, i + TAKEOVER_BATCH);
        try {
          const rows = await this.#sql("hb")<{ execution_id: string; epoch: number }>(
            q.TAKE_OVER,
            [this.opts.nodeId, batch, from, this.now(), this.instance],
          );
          if (rows.length === 0) continue;
          log.shared.warn("shared: taking over executions of a node that stopped heartbeating", {
            from,
            executions: rows.length,
          });
          const r = await this.#adopt(rows, from);
          log.engine.info("shared: took ownership of executions", {
            executions: r.executions,
            in_flight: r.in_flight,
            from,
          });
          if (r.loaded < r.executions) {
            log.engine.info("shared: executions taken over that only wait stay out of memory", {
              executions: r.executions - r.loaded,
              from,
            });
          }
        } catch (e) {
          if (this.#lostTakeovers.length < LOST_TAKEOVERS_MAX) {
            this.#lostTakeovers.push({ from, roots: batch });
          }
          throw e;
        }
      }
    }
  }

  /**
   * Takeover batches that failed here: the statement may have committed with its answer lost
   * (a connection that broke after it), or the adoption failed halfway. Either way this node
   * may own executions at a new epoch that it never loaded, and nobody else takes them (this
   * node is alive): a task result or signal reaching them would still load them, but a queued
   * task claimed here would go back on the queue for ever ("not in memory yet") and a timer
   * would not fire. So on the next ticks, once the database answers, whatever this node owns
   * of those trees and does not hold at that epoch is adopted again.
   */
  async #recoverTakeovers(): Promise<void> {
    const ex = this.#rt!.executions;
    while (this.#lostTakeovers.length > 0) {
      const t = this.#lostTakeovers[0]!;
      const rows = await this.#sql("hb")<{ execution_id: string; epoch: number }>(
        q.OWNED_OF_ROOTS,
        [this.opts.nodeId, t.roots, this.instance],
      );
      const again = rows.filter((r) =>
        !(this.epochs.get(r.execution_id) === Number(r.epoch) && ex.holds(r.execution_id))
      );
      if (again.length > 0) {
        log.shared.warn("shared: adopting executions of a takeover whose answer was lost", {
          from: t.from,
          executions: again.length,
        });
        await this.#adopt(again, t.from);
        const [n] = await this.#sql("hb")<{ n: string | number }>(q.COUNT_OWNED_RUNNING, [
          this.opts.nodeId,
          this.instance,
        ]);
        ex.recount(Number(n?.n ?? 0));
      }
      this.#lostTakeovers.shift();
    }
  }

  /** Applies the inbox of the executions this node owns, in seq order (one drain at a time). */
  drain(): void {
    if (!this.#resumed || this.#stopped) return;
    if (this.#draining) {
      this.#drainAgain = true;
      return;
    }
    this.#draining = (async () => {
      try {
        do {
          this.#drainAgain = false;
          const entries = await this.#sql("hb")<InboxEntry>(q.READ_INBOX, [
            this.opts.nodeId,
            500,
          ]);
          // Entries of different executions apply concurrently (their appends share
          // commits); those of one execution one after another, in seq order.
          await this.#applyAll(entries);
          if (entries.length === 500) this.#drainAgain = true;
        } while (this.#drainAgain && !this.#stopped);
      } catch (e) {
        log.shared.warn("shared: cannot read the inbox; retrying", {
          error: (e as Error).message,
        });
      } finally {
        this.#draining = null;
      }
    })();
  }

  /**
   * Applies the pending entries of one execution this node owns now (a result that needs its
   * dispatch); answers how many there were.
   */
  async #drainExecution(id: string): Promise<number> {
    const entries = await this.#sql("req")<InboxEntry>(q.READ_INBOX_OF, [id, this.opts.nodeId]);
    await this.#applyAll(entries);
    return entries.length;
  }

  /** RemoteCommands: #drainExecution. */
  drainOwned(id: string): Promise<number> {
    return this.#drainExecution(id);
  }

  /** Entries in seq order: one execution's one after another, executions side by side. */
  async #applyAll(entries: InboxEntry[]): Promise<void> {
    const byExecution = new Map<string, InboxEntry[]>();
    for (const e of entries) {
      const list = byExecution.get(e.execution_id);
      if (list) list.push(e);
      else byExecution.set(e.execution_id, [e]);
    }
    await Promise.all([...byExecution.values()].map(async (list) => {
      for (const e of list) await this.#apply(e);
    }));
  }

  /**
   * A worker's result that came with its notification: applied at once, without reading the
   * inbox, when its execution is held here and the attempt it answers is recorded (so no
   * earlier entry of the execution, such as that attempt's `dispatched`, has to go first).
   * Anything else goes through the inbox read, in seq order.
   */
  #direct(e: InboxEntry): void {
    const token = e.payload?.token;
    const state = this.#rt?.executions.stateOf(e.execution_id);
    if (
      !this.#resumed || this.#stopped || !state || typeof token !== "string" ||
      (e.kind !== "complete" && e.kind !== "fail") || !stepOfToken(state, token)
    ) {
      return this.drain();
    }
    e.seq = Number(e.seq);
    this.#apply(e).catch((err) =>
      log.shared.warn("shared: cannot apply an inbox entry; the inbox read retries it", {
        execution_id: e.execution_id,
        error: (err as Error).message,
      })
    );
  }

  #markApplied(seq: number): void {
    this.#applied.add(seq);
    if (this.#applied.size > 100_000) {
      for (const s of this.#applied) {
        this.#applied.delete(s);
        if (this.#applied.size <= 90_000) break;
      }
    }
  }

  async #apply(e: InboxEntry): Promise<void> {
    if (this.#applying.has(e.seq) || this.#applied.has(e.seq)) return;
    this.#applying.add(e.seq);
    try {
      const ex = this.#rt!.executions;
      const cmd = commandOf(e);
      if (!cmd) {
        await this.#sql("hb")(q.DELETE_INBOX, [e.seq]);
        this.#markApplied(e.seq);
        return;
      }
      // Owned here (the inbox join says so) but perhaps not in memory: load it first.
      if (!(await ex.loadOwned(e.execution_id))) return;
      // A claim offers one unit (a queued row, lib/executions/shared_changes.ts). A row queued before the
      // attempt turned uncertain is not the unit the step waits for now: its worker was told
      // `redelivery: false`, so the offer is refused (the worker hears cancel) and the current
      // unit's row goes out with the flag the dispatch records.
      if (cmd.type === "dispatch" && e.payload.unit !== undefined) {
        // Memory tells which unit the step waits for only once no append of it is in doubt
        // (one that landed may have queued the unit this claim took); while that cannot be
        // found out, the entry stays for the next inbox read.
        try {
          await ex.settle(e.execution_id);
        } catch {
          return;
        }
        const s = ex.stateOf(e.execution_id);
        const st = s?.steps[cmd.step];
        if (s && st && unitOf(s, st) !== String(e.payload.unit)) {
          if (!(await this.#settle(e))) return;
          await this.#sql("hb")(q.CANCEL_TASK, [cmd.token]);
          this.#markApplied(e.seq);
          return;
        }
      }
      // A result forwarded with its worker's session: the step it makes ready goes to that
      // worker with the reply, as on one server.
      const take = (cmd.type === "complete" || cmd.type === "fail") && e.payload.take
        ? this.#workers?.eager(e.execution_id, e.payload.take as EagerSession)
        : undefined;
      let r;
      try {
        // Owned here: should it leave memory meanwhile (--cache-executions), it loads again.
        r = await ex.command(e.execution_id, cmd, take?.follow, [e.seq], true);
      } catch (err) {
        if (err instanceof InboxGoneError) {
          // Withdrawn by the server that forwarded it (it has answered its client), or applied
          // by an earlier commit that landed: nothing was written, nothing to answer.
          this.#markApplied(e.seq);
          return;
        }
        if (err instanceof OrbitError && err.status < 500 && (await this.#settle(e))) {
          this.#finish(e, { error: errorOf(err) });
        }
        return; // storage errors and fencing: the entry stays for the owner to apply
      }
      // Applied: the commit of its events deleted the entry, or it is deleted now (unless this
      // node turns out to have lost the execution: the new owner answers it then).
      if ((!r || r.events.length === 0) && !(await this.#settle(e))) return;
      this.#markApplied(e.seq);
      if (cmd.type === "dispatch" && !r?.accepted) {
        await this.#sql("hb")(q.CANCEL_TASK, [cmd.token]);
      }
      const m = this.#rt!.metrics;
      if (cmd.type === "complete" || cmd.type === "fail") {
        if (!r?.accepted) m.resultsIgnored.inc();
        else if (cmd.type === "fail") m.tasksFailed.inc();
        else m.tasksSucceeded.inc();
      }
      const reply = this.#replyOf(cmd, r ?? null, e.execution_id);
      if (take && r) {
        const tasks = take.tasks(r);
        if (tasks.length > 0) reply.tasks = tasks;
      }
      this.#finish(e, reply);
    } finally {
      this.#applying.delete(e.seq);
    }
  }

  #replyOf(
    cmd: Command,
    r: {
      accepted: boolean;
      state: ExecutionState;
      events: readonly { type: string; seq: number }[];
    } | null,
    id: string,
  ): Omit<Reply, "seq"> {
    if (!r) {
      return {
        error: {
          status: 409,
          code: "EXECUTION_FINISHED",
          message: `execution ${id} is not running`,
        },
      };
    }
    if (cmd.type === "signal") {
      const received = r.events.find((ev) => ev.type === "SignalReceived");
      if (!received) {
        return {
          error: {
            status: 409,
            code: "EXECUTION_FINISHED",
            message: `execution ${id} is already ${r.state.status}`,
            fields: { status: r.state.status },
          },
        };
      }
      return { accepted: true, signal_seq: received.seq, row: rowOf(r.state, this.now()) };
    }
    // A worker's result needs no row in its answer.
    if (cmd.type === "complete" || cmd.type === "fail") return { accepted: r.accepted };
    return { accepted: r.accepted, row: rowOf(r.state, this.now()) };
  }

  /**
   * Deletes an entry answered without an event (SETTLE_INBOX). False when another node owns
   * the execution, or this one at another epoch: memory here is stale (this node lost it and
   * has not noticed yet), so it is let go, and the entry stays for the owner.
   */
  async #settle(e: InboxEntry): Promise<boolean> {
    const id = e.execution_id;
    const held = this.epochs.get(id) ?? null;
    const gone = await this.#sql("hb")(q.SETTLE_INBOX, [e.seq, id, this.opts.nodeId, held]);
    if (gone.length > 0) return true;
    const [o] = await this.#sql("hb")<{ node_id: string; epoch: number }>(q.OWNER_OF, [id]);
    if (o && (o.node_id !== this.opts.nodeId || (held !== null && Number(o.epoch) !== held))) {
      if (this.#rt!.executions.holds(id)) await this.#dropLost([id]);
      return false;
    }
    // Gone already (withdrawn by its sender, or answered before): nothing more to send.
    this.#markApplied(e.seq);
    return false;
  }

  #finish(e: InboxEntry, reply: Omit<Reply, "seq">): void {
    if (!e.reply_to) return;
    let text = JSON.stringify({ seq: e.seq, ...reply });
    if (text.length * 3 > REPLY_MAX_BYTES && utf8.encode(text).length > REPLY_MAX_BYTES) {
      // NOTIFY payloads end at 8000 bytes: what the waiting node can read itself stays out.
      const small: Omit<Reply, "seq"> = { ...reply };
      if (small.row) {
        delete small.row;
        small.row_omitted = true;
      }
      if (small.tasks) {
        small.tasks = small.tasks.map((t) => ({ ...t, input: null }));
        small.inputs_omitted = true;
      }
      text = JSON.stringify({ seq: e.seq, ...small });
    }
    this.notify([{ channel: "orbit_reply", payload: `${e.reply_to} ${text}` }]);
  }

  /** Entries of executions nobody owns any more: answered as finished, then removed. */
  async #orphanInbox(): Promise<void> {
    const entries = await this.#sql("hb")<InboxEntry & { created_ms: number }>(
      `${q.ORPHAN_INBOX.replace("ORDER BY", "AND i.created_ms < $2 ORDER BY")}`,
      [100, this.now() - 2000],
    );
    for (const e of entries) {
      const gone = await this.#sql("hb")(q.DELETE_INBOX, [e.seq]);
      if (gone.length === 0) continue;
      if (e.kind === "dispatched") {
        await this.#sql("hb")(q.CANCEL_TASK, [String(e.payload.token)]);
      }
      if (e.kind === "complete" || e.kind === "fail") {
        this.#finish(e, { accepted: false });
      } else {
        this.#finish(e, {
          error: {
            status: 409,
            code: "EXECUTION_FINISHED",
            message: `execution ${e.execution_id} is no longer running`,
          },
        });
      }
    }
  }

  /**
   * RemoteCommands: applies `cmd` on the owner of `id`. Owned here but not loaded (a takeover
   * in progress): loads it and applies it here. Owned elsewhere: the owner's inbox, and its
   * reply (10 s at most). Null when nobody owns it.
   */
  async forward(
    id: string,
    cmd: Command,
    take?: EagerSession,
  ): Promise<
    { accepted: boolean; row?: ExecutionRow; seq?: number; tasks?: TaskPayload[] } | null
  > {
    const ex = this.#rt!.executions;
    const { kind, payload } = inboxOf(cmd);
    if (take && (cmd.type === "complete" || cmd.type === "fail")) payload.take = take;
    const waits = cmd.type !== "uncertain";
    // The owner, and the entry in its inbox when it is another node, in one statement.
    const [o] = await this.#sql("req")<
      { node_id: string; epoch: number; instance: string | null; seq: number | null }
    >(
      q.FORWARD,
      [this.opts.nodeId, id, kind, payload, this.now(), waits ? this.opts.nodeId : null],
    );
    if (!o) return null;
    if (o.node_id === this.opts.nodeId) {
      const epoch = o.instance === this.instance ? Number(o.epoch) : await this.#reclaim(id);
      if (epoch === null) throw this.#replacedError(id);
      if (!ex.holds(id)) this.epochs.set(id, epoch);
      let r = await ex.command(id, cmd, undefined, undefined, true);
      if (
        r && !r.accepted && r.events.length === 0 &&
        (cmd.type === "complete" || cmd.type === "fail") && (await this.#drainExecution(id)) > 0
      ) {
        // Loaded just now from history (a takeover in progress): the attempt's dispatch may
        // still be an entry of this node's inbox, written by another server's claim.
        r = await ex.command(id, cmd, undefined, undefined, true);
      }
      if (!r) return null;
      const reply = this.#replyOf(cmd, r, id);
      if (reply.error) {
        throw new OrbitError(
          reply.error.status,
          reply.error.code,
          reply.error.message,
          reply.error.fields ?? {},
        );
      }
      return {
        accepted: reply.accepted ?? false,
        ...(reply.row ? { row: reply.row } : {}),
        ...(reply.signal_seq !== undefined ? { seq: reply.signal_seq } : {}),
      };
    }
    const seq = Number(o.seq);
    this.#rt!.metrics.commandsForwarded.inc({ kind });
    // A result travels with its notification when it fits (the owner then needs no inbox
    // read); anything else only names the owner.
    let note = o.node_id;
    if (kind === "complete" || kind === "fail") {
      const text = `${o.node_id} ${
        JSON.stringify({ seq, execution_id: id, kind, payload, reply_to: this.opts.nodeId })
      }`;
      if (text.length * 3 <= REPLY_MAX_BYTES || utf8.encode(text).length <= REPLY_MAX_BYTES) {
        note = text;
      }
    }
    this.notify([{ channel: "orbit_inbox", payload: note }]);
    if (!waits) return { accepted: true };
    let reply = await this.#awaitReply(seq, FORWARD_WAIT_MS);
    if (!reply) {
      // Withdraw the entry: once it is deleted here, the owner's commit of it cannot land
      // (COMMIT_OWNED locks its entries and writes nothing for one gone), so a retry is safe.
      let withdrawn: number;
      try {
        withdrawn = (await this.#sql("req")(q.DELETE_INBOX, [seq])).length;
      } catch (err) {
        // The entry may still be there, and be applied later: not "nothing was applied".
        throw storageFailure(err) ?? storageError(err);
      }
      // Gone already: the owner applied or answered it; its reply is on its way (or was lost).
      if (withdrawn === 0) reply = await this.#awaitReply(seq, FORWARD_LATE_REPLY_MS);
      if (!reply && withdrawn > 0) {
        throw new OrbitError(
          503,
          "OWNER_UNAVAILABLE",
          `execution ${id} is owned by node \`${o.node_id}\`, which did not apply the request ` +
            "within 10 s (it may have stopped; another node takes its executions over after " +
            "--node-timeout); nothing was applied, retry",
          { owner_node: o.node_id, retry_after_s: 1 },
          { "retry-after": "1" },
        );
      }
      if (!reply) {
        throw new OrbitError(
          500,
          "STORAGE_ERROR",
          `STORAGE_ERROR: execution ${id} is owned by node \`${o.node_id}\`, which took the ` +
            "request but whose answer was lost: it may have been applied; read the execution " +
            "(its history) before retrying",
          { owner_node: o.node_id },
        );
      }
    }
    if (reply.error) {
      throw new OrbitError(
        reply.error.status,
        reply.error.code,
        reply.error.message,
        reply.error.fields ?? {},
      );
    }
    // A reply too large for a notification leaves out the row and the tasks' inputs (both
    // committed before the reply was sent): read them here.
    let row = reply.row;
    if (reply.row_omitted) row = (await this.#store!.getExecution(id)) ?? undefined;
    let tasks = reply.tasks ?? [];
    if (reply.inputs_omitted && tasks.length > 0) {
      const inputs = new Map(
        (await this.#sql("req")<{ token: string; input: unknown }>(q.TASK_INPUTS, [
          tasks.map((t) => t.token),
        ]).catch(() => [])).map((r) => [r.token, r.input]),
      );
      // A task whose row is gone is not handed out: its owner redelivers it when the worker's
      // heartbeats never list it.
      tasks = tasks.filter((t) => inputs.has(t.token)).map((t) => ({
        ...t,
        input: inputs.get(t.token),
      }));
    }
    return {
      accepted: reply.accepted ?? false,
      ...(row ? { row } : {}),
      ...(reply.signal_seq !== undefined ? { seq: reply.signal_seq } : {}),
      ...(tasks.length > 0 ? { tasks } : {}),
    };
  }

  #awaitReply(seq: number, ms: number): Promise<Reply | null> {
    const early = this.#early.get(seq);
    if (early) {
      this.#early.delete(seq);
      return Promise.resolve(early);
    }
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.#replies.delete(seq);
        resolve(null);
      }, ms);
      this.#replies.set(seq, (r) => {
        clearTimeout(timer);
        this.#replies.delete(seq);
        resolve(r);
      });
    });
  }

  /**
   * Graceful leave (SIGTERM): stop, let in-flight appends finish (until `deadline`, a
   * `Date.now()` time, when given), then set the heartbeat to 0 so that the others take the
   * executions over at once.
   */
  async stop(deadline?: number): Promise<void> {
    if (this.#stopped && !this.#tick) return;
    this.#stopped = true;
    clearInterval(this.#tick);
    clearInterval(this.#beat);
    this.#tick = undefined;
    const stopping = this.#rt?.stop().catch(() => {});
    if (deadline === undefined) await stopping;
    else if (!await settledBy(stopping ?? Promise.resolve(), deadline)) {
      // Fencing keeps a late append from writing over a takeover: leaving now is safe.
      log.shared.warn("shared: in-flight appends did not finish in time; leaving without them", {
        node_id: this.opts.nodeId,
      });
    }
    if (this.#joined) await this.#leave();
    await Promise.all(
      [this.#req, this.#hb, this.#listen].map((s) => s?.end({ timeout: 1 }).catch(() => {})),
    );
  }

  /**
   * Sets this node's heartbeat to 0, on the heartbeat connection, or on the requests' pool if
   * that one does not answer within LEAVE_WAIT_MS (a connection can be stuck behind a
   * statement PostgreSQL never received); failing both, the others take over after
   * --node-timeout.
   */
  async #leave(): Promise<void> {
    const params = [this.opts.nodeId, this.instance];
    let error: unknown;
    for (const role of ["hb", "req"] as const) {
      try {
        await withTimeout(this.#sql(role)(q.NODE_LEAVE, params), LEAVE_WAIT_MS);
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

  /** Closes the connections without leaving (a start that failed). */
  async abort(): Promise<void> {
    this.#stopped = true;
    clearInterval(this.#tick);
    clearInterval(this.#beat);
    await this.#rt?.stop().catch(() => {});
    await Promise.all(
      [this.#req, this.#hb, this.#listen].map((s) => s?.end({ timeout: 1 }).catch(() => {})),
    );
  }
}
