/**
 * A server in standby mode: the strategy that puts the same engine and store behind an
 * election (cluster/standby.ts). It holds two runtimes:
 *
 *   standby runtime — over the plain store, never started: it loads no executions and cannot
 *     write; GET routes read the database (waits re-read it every second). Always present.
 *   leader runtime — built on election over a *fenced* store (every append checks the term),
 *     recovered from history, then served. Dropped on step-down; its fenced store is closed.
 *
 * The HTTP handler serves the app of whichever runtime is current, and both apps run the
 * cluster gate (routes/gate.ts), which answers 503 NOT_LEADER to every non-GET request unless
 * this server is the leader within its lease. Metrics and worker sessions live in the runtime,
 * so they start from zero on a new leader, as the reference page says.
 */
import type { Hono } from "hono";
import { Elector } from "./standby.ts";
import type { AdvertisedAddrs, ClusterView, LeaderInfo } from "../lib/cluster_view.ts";
import type { Runtime } from "../lib/runtime.ts";
import type { Store } from "../lib/store/store.ts";
import { log } from "../lib/log.ts";

export interface StandbyNodeOptions {
  url: string;
  nodeId: string;
  /** Opens the store; with `term`, a fenced one. */
  openStore(term: number | null): Promise<Store>;
  /** Builds a runtime over a store (`readOnly` for the standby one). */
  runtime(store: Store, readOnly: boolean): Runtime;
  app(rt: Runtime): Hono;
  /** The clock of the election's lease (tests). */
  now?: () => number;
}

export class StandbyNode implements ClusterView {
  #elector: Elector | null = null;
  #standby: { rt: Runtime; app: Hono } | null = null;
  #leading: { rt: Runtime; app: Hono; store: Store } | null = null;
  #advertise: AdvertisedAddrs = { http: null, grpc: null };

  constructor(readonly opts: StandbyNodeOptions) {}

  get nodeId(): string {
    return this.opts.nodeId;
  }
  role(): "leader" | "standby" {
    return this.#leading && this.serving() ? "leader" : "standby";
  }
  term(): number | null {
    return this.#elector?.term ?? null;
  }
  leader(): LeaderInfo | null {
    return this.#elector?.leader ?? null;
  }
  serving(): boolean {
    return this.#leading !== null && (this.#elector?.serving() ?? false);
  }

  /** The runtime requests see now. */
  get runtime(): Runtime {
    return (this.#leading ?? this.#standby!).rt;
  }

  /** Opens the read-only side; the server can listen once this resolves. */
  async open(): Promise<void> {
    const store = await this.opts.openStore(null);
    const rt = this.opts.runtime(store, true);
    this.#standby = { rt, app: this.opts.app(rt) };
  }

  readonly fetch = (req: Request, info: Deno.ServeHandlerInfo): Response | Promise<Response> =>
    (this.#leading ?? this.#standby!).app.fetch(req, info);

  /**
   * Joins the election (after the listeners are bound and the advertised addresses, HTTP and
   * gRPC, are known: an elected server records both for the standbys to hand out).
   */
  start(advertise: AdvertisedAddrs | null): void {
    this.#advertise = advertise ?? { http: null, grpc: null };
    this.#elector = new Elector({
      url: this.opts.url,
      nodeId: this.opts.nodeId,
      advertiseAddr: this.#advertise.http,
      grpcAdvertiseAddr: this.#advertise.grpc,
      onElected: (term) => this.#lead(term),
      onLost: () => this.#stepDown(),
      ...(this.opts.now ? { now: this.opts.now } : {}),
    });
    this.#elector.start();
  }

  async #lead(term: number): Promise<void> {
    const started = performance.now();
    const store = await this.opts.openStore(term);
    const rt = this.opts.runtime(store, false);
    // Past its lease a leader may have been replaced (it was paused, or lost its session) and
    // not know yet: its memory answers no query or /pending then; they replay the history.
    rt.executions.memoryCurrent = () => this.#elector?.serving() ?? false;
    try {
      await rt.start();
    } catch (e) {
      await rt.stop().catch(() => {});
      throw e;
    }
    this.#leading = { rt, app: this.opts.app(rt), store };
    log.cluster.info("cluster: leader is serving", {
      node_id: this.opts.nodeId,
      term,
      active_executions: rt.executions.heldCount,
      recovery_ms: Math.round(performance.now() - started),
    });
  }

  async #stepDown(): Promise<void> {
    const old = this.#leading;
    this.#leading = null;
    // A read-only engine serves from here on; the old one stops and its fenced store closes.
    if (old) await old.rt.stop().catch(() => {});
  }

  /** Graceful stop: leave the election (releasing the lock) and stop both runtimes. */
  async stop(): Promise<void> {
    await this.#elector?.stop();
    await this.#stepDown();
    await this.#standby?.rt.stop().catch(() => {});
  }

  get advertiseAddr(): string | null {
    return this.#advertise.http;
  }
  get grpcAdvertiseAddr(): string | null {
    return this.#advertise.grpc;
  }
}
