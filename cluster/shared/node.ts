/**
 * Shared mode: every server active on one PostgreSQL (reference page, "Shared mode (several
 * active servers)"). A strategy over the same engine and store: the engine appends with an
 * ownership fence per execution (lib/executions/executions.ts `Ownership`,
 * sql/postgres/shared/commit.ts COMMIT_OWNED), workers use the shared queue (workers.ts), and
 * commands for executions owned elsewhere go through the owner's inbox (forward.ts, inbox.ts).
 * This file composes the roles; each has its own file:
 *
 *   context.ts     options, identity, connections, life-cycle flags
 *   membership.ts  join, heartbeat, replacement, the nodes' list, leave
 *   ownership.ts   epochs held; resume, takeover, reclaim, reconcile
 *   inbox.ts       the owner applies forwarded commands and replies
 *   forward.ts     the sender forwards a command and waits for the reply
 *   notify.ts      NOTIFY outbox and the five channels listened on
 *   workers.ts     worker sessions, polls, claims and results over the shared tables
 *   messages.ts, placement.ts  inbox messages; rendezvous placement and timings
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
 * Failure handling. Each role has its own postgres.js client (context.ts, Connections): the
 * store (history appends, 1 connection), requests (claims, forwarding, sessions, 4), heartbeat
 * (heartbeats, takeovers, inbox, 1) and listen (NOTIFY, 1). postgres.js reconnects each on its
 * own, with a short backoff. A forwarded command waits up to 10 s for the owner's reply; if
 * none came, its inbox entry is withdrawn (so it is never applied later) and the request
 * answers 503 OWNER_UNAVAILABLE with retry-after.
 */
import type { Hono } from "hono";
import type { Command } from "../../lib/engine/decide.ts";
import type { RemoteCommands } from "../../lib/executions/types.ts";
import type { AdvertisedAddrs, ClusterView } from "../../lib/cluster_view.ts";
import { log } from "../../lib/log.ts";
import type { Runtime } from "../../lib/runtime.ts";
import { openStore } from "../../lib/store/open.ts";
import { settledBy } from "../../lib/with_timeout.ts";
import type { EagerSession } from "../../lib/workers/sessions.ts";
import * as q from "../../sql/postgres/shared/mod.ts";
import { Connections, SharedContext, type SharedNodeOptions } from "./context.ts";
import { type Forwarded, Forwarder } from "./forward.ts";
import { Inbox } from "./inbox.ts";
import { Membership, TICK_MS } from "./membership.ts";
import { listen, Notifier, tasksPayload } from "./notify.ts";
import { Ownership } from "./ownership.ts";
import { SharedWorkers } from "./workers.ts";

export type { SharedNodeOptions } from "./context.ts";

export class SharedNode implements ClusterView, RemoteCommands {
  readonly ctx: SharedContext;
  readonly notifier: Notifier;
  readonly ownership: Ownership;
  readonly membership: Membership;
  readonly inbox: Inbox;
  readonly forwarder: Forwarder;
  #app: Hono | null = null;
  #ticking = false;
  #ticks = 0;
  #tick: ReturnType<typeof setInterval> | undefined;
  #beat: ReturnType<typeof setInterval> | undefined;

  constructor(readonly opts: SharedNodeOptions) {
    const ctx = this.ctx = new SharedContext(opts);
    this.notifier = new Notifier(ctx);
    this.ownership = new Ownership(ctx, this.notifier);
    this.membership = new Membership(ctx, {
      reconcile: () => this.ownership.reconcile(),
      replaced: (message) => {
        for (const id of ctx.rt!.executions.heldIds()) ctx.rt!.executions.drop(id);
        opts.onFatal(message);
      },
    });
    this.membership.onAlone = (alone) => this.notifier.alone = alone;
    this.ownership.onReplaced = () => this.membership.checkReplaced();
    this.inbox = new Inbox(ctx, this.ownership, this.notifier);
    this.forwarder = new Forwarder(ctx, {
      ownership: this.ownership,
      inbox: this.inbox,
      membership: this.membership,
      notifier: this.notifier,
    });
  }

  get instance(): string {
    return this.ctx.instance;
  }
  get now(): () => number {
    return this.ctx.now;
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
  serving(): boolean {
    return this.membership.serving();
  }
  memoryCurrent(): boolean {
    return this.membership.memoryCurrent();
  }
  get runtime(): Runtime {
    return this.ctx.runtime;
  }
  get advertiseAddr(): string | null {
    return this.membership.advertiseAddr;
  }

  async details(): Promise<Record<string, unknown>> {
    const read = await this.membership.readNodes();
    const rt = this.ctx.rt;
    // Another node's count is the one it wrote with its last heartbeat; this node's is now.
    const mine = rt?.executions.running;
    const nodes = read.rows
      .map((n) => {
        const age = Math.max(0, Number(n.age_ms) + read.staleMs);
        return {
          node_id: n.node_id,
          addr: n.addr,
          // Present for a node that serves gRPC (recorded when it joined).
          ...(n.grpc_addr ? { grpc_addr: n.grpc_addr } : {}),
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
      owned_executions: rt?.executions.running ?? 0,
      tasks_claimed: this.ctx.workers?.tasksClaimed ?? 0,
      nodes,
    };
  }

  /**
   * The app; once another process took this node id (Membership), every request but a read
   * answers 503 NODE_REPLACED until the server exits (main.ts: onFatal), so that nothing is
   * written meanwhile.
   */
  readonly fetch = (req: Request, info: Deno.ServeHandlerInfo): Response | Promise<Response> => {
    if (this.ctx.replaced && req.method !== "GET" && req.method !== "HEAD") {
      const e = this.membership.replacedError();
      return new Response(JSON.stringify(e.toBody()), {
        status: e.status,
        headers: { "content-type": "application/json", ...e.headers },
      });
    }
    return this.#app!.fetch(req, info);
  };

  /** Opens the connections and builds the runtime; the server can listen once this resolves. */
  async open(): Promise<void> {
    const ctx = this.ctx;
    const id = this.opts.nodeId;
    ctx.store = await openStore(this.opts.url, {
      max: 1,
      applicationName: `orbit-store:${id}`,
      settings: q.SHARED_CONNECTION_SETTINGS, // kept plans stay on their indexes; no JIT
      afterCommit: ({ queued, closed }) => {
        // The end of an execution a client waits for on another server (orbit_wait); the
        // clients waiting here are woken below.
        const n = this.notifier.waitedElsewhere(closed).map((payload) => ({
          channel: "orbit_done",
          payload,
        }));
        // The payload names the node (its own listener knows these rows are in its memory) and
        // tells the others whether workers poll it, i.e. whether to leave the rows to it a while.
        if (queued > 0) {
          if (ctx.workers?.pollsHere(this.opts.sessionTimeoutMs)) {
            this.notifier.announceServed(tasksPayload(id, true));
          } else n.push({ channel: "orbit_tasks", payload: tasksPayload(id, false) });
        }
        this.notifier.notify(n);
        // Local waiters and polls need no round trip through the database.
        if (queued > 0) ctx.workers?.wake();
        for (const execId of closed) this.notifier.wakeDone(execId);
      },
    });
    const conns = ctx.conns = new Connections(this.opts);
    const rt = this.opts.runtime(ctx.store, {
      ownership: this.ownership,
      workers: (executions, metrics) =>
        ctx.workers = new SharedWorkers(executions, metrics, {
          nodeId: id,
          sessionTimeoutMs: this.opts.sessionTimeoutMs,
          now: ctx.now,
          newId: ctx.newId,
          sql: conns.req,
          drainInbox: async (execId) => {
            await this.inbox.drainExecution(execId);
          },
          healthySince: () => this.membership.healthySince,
          notify: (list) => this.notifier.notify(list),
        }),
      recover: () => this.ownership.resume(),
    });
    rt.executions.remote = this;
    rt.executions.memoryCurrent = () => this.memoryCurrent();
    ctx.rt = rt;
    this.#app = this.opts.app(rt);
    const got = (channel: string) => rt.metrics.notificationsReceived.inc({ channel });
    await listen(conns.listen, id, {
      tasks: (announced) => {
        got("orbit_tasks");
        if (announced === "own") ctx.workers?.wake();
        else if (announced === "served") ctx.workers?.wakeForeign();
        else ctx.workers?.wakeRemote();
      },
      tasksMissed: () => ctx.workers?.wakeRemote(),
      inbox: (entry) => {
        got("orbit_inbox");
        entry ? this.inbox.direct(entry) : this.inbox.drain();
      },
      done: (execId) => {
        got("orbit_done");
        this.notifier.wakeDone(execId);
      },
      wait: (execId) => {
        got("orbit_wait");
        this.notifier.waited(execId);
      },
      defs: (name) => name === null ? rt.definitions.forgetAll() : rt.definitions.forget(name),
      reply: (text) => {
        got("orbit_reply");
        this.forwarder.onReply(text);
      },
    });
  }

  /** Sends notifications after a write (never inside it): see Notifier. */
  notify(list: Array<{ channel: string; payload: string }>): void {
    this.notifier.notify(list);
  }

  /**
   * Joins under the node id with its advertised addresses (HTTP, gRPC; null: none), resumes what
   * it owns, and serves (after the listeners are bound).
   */
  async start(advertise: AdvertisedAddrs | null): Promise<void> {
    const rt = this.ctx.rt!;
    await this.membership.join(advertise ?? { http: null, grpc: null });
    this.#beat = setInterval(() => this.membership.beat(), TICK_MS);
    this.#tick = setInterval(() => this.#onTick(), TICK_MS);
    await rt.start();
    rt.executions.startCache();
    rt.executions.startAudit();
    this.ctx.resumed = true;
    log.shared.info("shared: node is serving", {
      node_id: this.opts.nodeId,
      resumed: rt.executions.running,
    });
    this.inbox.drain();
  }

  /** Cluster maintenance, every second: takeovers, reclaims, the inbox, orphaned entries. */
  async #onTick(): Promise<void> {
    if (this.#ticking || this.ctx.stopped) return;
    this.#ticking = true;
    try {
      if (this.ctx.stopped || !this.serving()) return;
      await this.ownership.takeOver();
      await this.ownership.reclaimStale();
      this.inbox.drain();
      if (++this.#ticks % 5 === 0) await this.inbox.orphans();
    } catch (e) {
      log.shared.warn("shared: cluster maintenance failed", { error: (e as Error).message });
    } finally {
      this.#ticking = false;
    }
  }

  /** RemoteCommands: see Forwarder.forward. */
  forward(id: string, cmd: Command, take?: EagerSession): Promise<Forwarded | null> {
    return this.forwarder.forward(id, cmd, take);
  }

  /** RemoteCommands: applies the pending inbox entries of one execution owned here. */
  drainOwned(id: string): Promise<number> {
    return this.inbox.drainExecution(id);
  }

  /** Applies the inbox of the executions this node owns (see Inbox.drain). */
  drain(): void {
    this.inbox.drain();
  }

  /**
   * Graceful leave (SIGTERM): stop, let in-flight appends finish (until `deadline`, a
   * `Date.now()` time, when given), then set the heartbeat to 0 so that the others take the
   * executions over at once.
   */
  async stop(deadline?: number): Promise<void> {
    if (this.ctx.stopped && !this.#tick) return;
    this.ctx.stopped = true;
    clearInterval(this.#tick);
    clearInterval(this.#beat);
    this.notifier.stop();
    this.#tick = undefined;
    const stopping = this.ctx.rt?.stop().catch(() => {});
    if (deadline === undefined) await stopping;
    else if (!await settledBy(stopping ?? Promise.resolve(), deadline)) {
      // Fencing keeps a late append from writing over a takeover: leaving now is safe.
      log.shared.warn("shared: in-flight appends did not finish in time; leaving without them", {
        node_id: this.opts.nodeId,
      });
    }
    if (this.ctx.joined) await this.membership.leave();
    await this.ctx.conns?.end();
  }

  /** Closes the connections without leaving (a start that failed). */
  async abort(): Promise<void> {
    this.ctx.stopped = true;
    clearInterval(this.#tick);
    clearInterval(this.#beat);
    this.notifier.stop();
    await this.ctx.rt?.stop().catch(() => {});
    await this.ctx.conns?.end();
  }
}
