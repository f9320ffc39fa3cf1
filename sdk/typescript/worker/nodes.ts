/**
 * Worker role, the router: in a cluster in shared mode, which server each slot talks to.
 *
 * Every server of a shared cluster accepts every request, and one whose poll hands out a task
 * prefers the executions it owns; the result then goes back on the same connection, to the
 * owner. A worker that reaches the cluster through one address (a load balancer) has its slots
 * wherever the balancer put their connections. This role reads `/v1/health` of that address,
 * learns the live servers and their advertised addresses (`nodes[].addr`), and spreads the
 * slots over them: slot `i` talks to node `(i + offset) % n`, the offset random per worker so
 * that workers with few slots do not all start on the same node. A node whose address does not
 * answer (advertised addresses the worker cannot reach, a node that died) is set aside for
 * {@link UNREACHABLE_MS} and its slots use the configured address meanwhile; a node that leaves
 * the live list has its slots' polls ended so that they move at once, and the results on their
 * way to it sent to the configured address instead (a paused node would hold them until the
 * request's timeout, past the new owner's redelivery of their attempts). Anything else (a single
 * server, a standby cluster, a health answer without addresses) keeps every slot on the
 * configured address.
 */

import type { WorkerCore } from "./common.ts";

/** How long a node whose address failed is left out before its slots try it again. */
export const UNREACHABLE_MS = 10_000;

/** What the router needs of `/v1/health`. */
interface HealthAnswer {
  role?: unknown;
  nodes?: unknown;
}

/** A poll ended because its slot's node left the cluster's live list. */
export class Rerouted extends Error {
  constructor() {
    super("node left");
    this.name = "Rerouted";
  }
}

/** The live nodes' advertised addresses (`http:`/`https:` URLs) of a health answer, sorted. */
export function liveAddresses(health: unknown): string[] {
  const h = health as HealthAnswer | null;
  if (!h || h.role !== "shared" || !Array.isArray(h.nodes)) return [];
  const out = new Set<string>();
  for (const n of h.nodes as { live?: unknown; addr?: unknown }[]) {
    if (!n || n.live !== true || typeof n.addr !== "string") continue;
    let url: URL;
    try {
      url = new URL(n.addr);
    } catch {
      continue;
    }
    if (url.protocol !== "http:" && url.protocol !== "https:") continue;
    out.add(n.addr.replace(/\/+$/, ""));
  }
  return [...out].sort();
}

export class Nodes {
  readonly #core: WorkerCore;
  readonly #enabled: boolean;
  readonly #refreshMs: number;
  readonly #now: () => number;
  /** Called with the addresses that left the live list. */
  readonly #onLeft: (left: Set<string>) => void;
  readonly #offset: number;
  #addrs: string[] = [];
  readonly #unreachable = new Map<string, number>();
  #timer: ReturnType<typeof setTimeout> | undefined;
  #stopped = false;

  constructor(
    core: WorkerCore,
    options: {
      enabled: boolean;
      refreshMs: number;
      onLeft: (left: Set<string>) => void;
      now?: () => number;
      offset?: number;
    },
  ) {
    this.#core = core;
    this.#enabled = options.enabled;
    this.#refreshMs = options.refreshMs;
    this.#onLeft = options.onLeft;
    this.#now = options.now ?? Date.now;
    this.#offset = options.offset ?? Math.floor(Math.random() * 1024);
  }

  /** The live nodes' addresses as last read (empty when not spreading). */
  get addresses(): readonly string[] {
    return this.#addrs;
  }

  /** Reads the live nodes now, then every `refreshMs` until {@link stop}. */
  async start(): Promise<void> {
    if (!this.#enabled) return;
    await this.refresh();
    const tick = async () => {
      await this.refresh();
      if (!this.#stopped) this.#timer = setTimeout(tick, this.#refreshMs);
    };
    if (!this.#stopped) this.#timer = setTimeout(tick, this.#refreshMs);
  }

  stop(): void {
    this.#stopped = true;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
  }

  /** One read of `/v1/health`; a failed read keeps the last list. */
  async refresh(): Promise<void> {
    let health: unknown;
    try {
      health = await this.#core.transport.get("/v1/health", {
        signal: this.#core.hbStop,
        timeoutMs: Math.min(this.#core.requestTimeoutMs, 10_000),
      });
    } catch (err) {
      this.#core.logger.debug(`cannot read the cluster's nodes: ${String(err)}`);
      return;
    }
    this.update(liveAddresses(health));
  }

  /** Takes a new live list; the slots of nodes that left it are told at once. */
  update(addrs: string[]): void {
    const before = this.#addrs;
    this.#addrs = addrs;
    if (before.join(" ") === addrs.join(" ")) return;
    this.#core.logger.info(
      addrs.length > 0
        ? `slots spread over ${addrs.length} node(s): ${addrs.join(", ")}`
        : "slots use the configured address",
    );
    const left = new Set(before.filter((a) => !addrs.includes(a)));
    if (left.size > 0) this.#onLeft(left);
  }

  /** The address slot `index` talks to, or null for the configured address. */
  targetFor(index: number): string | null {
    const n = this.#addrs.length;
    if (n === 0) return null;
    const addr = this.#addrs[(index + this.#offset) % n]!;
    const until = this.#unreachable.get(addr);
    if (until === undefined) return addr;
    if (this.#now() < until) return null;
    this.#unreachable.delete(addr);
    return addr;
  }

  /** A request to `addr` failed to connect: its slots use the configured address for a while. */
  unreachable(addr: string, why: string): void {
    if (this.#unreachable.has(addr)) return;
    this.#unreachable.set(addr, this.#now() + UNREACHABLE_MS);
    this.#core.logger.warn(
      `node ${addr} did not answer (${why}); its slots use ${this.#core.server} for ${
        UNREACHABLE_MS / 1000
      } s`,
    );
  }
}
