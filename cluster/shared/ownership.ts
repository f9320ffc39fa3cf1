/**
 * Shared mode's ownership: the epochs this process holds (the one place that writes them:
 * hold/release/epochOf), and how executions come and go — resumed after a restart, adopted at
 * a takeover of a dead node's trees, reclaimed from a replaced process of this node id,
 * dropped when another node took them (reconcile after a silence). Implements the engine's
 * `Ownership` hooks (lib/executions/executions.ts).
 */
import { liveTokens } from "../../lib/engine/state.ts";
import type { Ownership as OwnershipHooks } from "../../lib/executions/types.ts";
import { log } from "../../lib/log.ts";
import type { WakingRow } from "../../lib/store/store.ts";
import * as q from "../../sql/postgres/shared/mod.ts";
import type { SharedContext } from "./context.ts";
import type { Notifier } from "./notify.ts";
import { rendezvousOwner } from "./placement.ts";

const TAKEOVER_BATCH = 100;
/** Failed takeover batches kept for recoverTakeovers (one a tick at most). */
const LOST_TAKEOVERS_MAX = 1000;

type Owned = { execution_id: string; epoch: number };

export class Ownership implements OwnershipHooks {
  readonly #epochs = new Map<string, number>();
  /** Takeover batches whose statement or adoption failed here (recoverTakeovers). */
  #lostTakeovers: Array<{ from: string; roots: string[] }> = [];
  /** Something showed this node id held by another process (Membership.checkReplaced). */
  onReplaced: () => void = () => {};

  constructor(readonly ctx: SharedContext, readonly notifier: Notifier) {}

  get nodeId(): string {
    return this.ctx.nodeId;
  }
  get instance(): string {
    return this.ctx.instance;
  }

  epochOf(id: string): number | undefined {
    return this.#epochs.get(id);
  }
  hold(id: string, epoch: number): void {
    this.#epochs.set(id, epoch);
  }
  release(id: string): void {
    this.#epochs.delete(id);
  }

  async ownerOf(
    execId: string,
  ): Promise<{ node_id: string; epoch: number; instance: string | null } | null> {
    const [o] = await this.ctx.sql("req")<
      { node_id: string; epoch: number; instance: string | null }
    >(q.OWNER_OF, [execId]);
    return o ? { node_id: o.node_id, epoch: Number(o.epoch), instance: o.instance } : null;
  }

  staleClaims(
    units: Array<{ execution_id: string; unit: string }>,
    before: number,
  ): Promise<Array<{ execution_id: string; unit: string; token: string }>> {
    return this.ctx.sql("req")<{ execution_id: string; unit: string; token: string }>(
      q.STALE_CLAIMS,
      [units.map((u) => u.unit), before],
    );
  }

  async requeue(token: string): Promise<boolean> {
    const r = await this.ctx.sql("req")(q.REQUEUE_STALE_CLAIM, [token]);
    if (r.length > 0) this.ctx.workers?.requeued();
    return r.length > 0;
  }

  replaced(): void {
    this.onReplaced();
  }

  async listWaking(
    before: number,
    after: WakingRow | null,
    limit: number,
  ): Promise<Array<WakingRow & { epoch: number }>> {
    const rows = await this.ctx.sql("req")<
      { execution_id: string; wake_at_ms: string | number; epoch: string | number }
    >(q.LIST_WAKING_OWNED, [
      this.ctx.nodeId,
      before,
      after?.wake_at_ms ?? 0,
      after?.execution_id ?? "",
      Math.max(1, Math.floor(limit)),
      this.ctx.instance,
    ]);
    return rows.map((r) => ({
      execution_id: r.execution_id,
      wake_at_ms: Number(r.wake_at_ms),
      epoch: Number(r.epoch),
    }));
  }

  onDone(execId: string, wake: () => void): () => void {
    return this.notifier.onDone(execId, wake);
  }

  /** A restart under the same node id: bump the epochs it owns (fencing the old process). */
  async resume(): Promise<{ executions: number; in_flight: number }> {
    const c = this.ctx;
    const rows = await c.sql("hb")<Owned>(q.BUMP_OWN_EPOCHS, [c.nodeId, c.now(), c.instance]);
    return await this.adopt(rows, c.nodeId);
  }

  /**
   * Loads executions this node now owns at the given epochs (with `--cache-executions` those
   * with work due; the rest load on demand); rebuilds their queue rows.
   */
  async adopt(
    rows: Owned[],
    from: string,
  ): Promise<{ executions: number; in_flight: number; loaded: number }> {
    if (rows.length === 0) return { executions: 0, in_flight: 0, loaded: 0 };
    const c = this.ctx;
    const ex = c.rt!.executions;
    // Held here at another epoch: this node lost it (another took it over while this one was
    // silent) and takes it back before it noticed; that memory misses what the other wrote.
    // Let it go: the load below rebuilds it from history.
    let stale = 0;
    for (const r of rows) {
      const id = r.execution_id;
      if (!ex.holds(id) || this.#epochs.get(id) === Number(r.epoch)) continue;
      const last = ex.stateOf(id);
      ex.drop(id);
      if (last) c.workers?.dropped(last);
      stale++;
    }
    if (stale > 0) {
      log.shared.warn("shared: rebuilding executions taken back that memory held from before", {
        node_id: c.nodeId,
        executions: stale,
      });
    }
    for (const r of rows) this.#epochs.set(r.execution_id, Number(r.epoch));
    const ids = rows.map((r) => r.execution_id);
    const wake = ex.caches
      ? new Map(
        (await c.sql("hb")<
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
    c.rt!.children.afterRecovery(ids);
    // Claims the previous owner made for itself and had not recorded as dispatched go back on
    // the queue (a claim for another owner wrote its `dispatched` inbox entry with it).
    const tasks = await c.sql("hb")<
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
        await c.sql("hb")(q.REQUEUE_TASK, [t.token]);
        requeued = true;
      }
    }
    if (requeued) c.workers?.requeued(); // one announcement for all of them
    // Attempts the previous owner handed out itself (its claims and eager dispatches; a row
    // gone too) are redelivered after a session timeout unless their result comes: the answer
    // that carried one may have died with it. Those another server handed out stay in flight
    // while their workers are alive, watched like any other (the page's "Ownership").
    const orphans = [...live].filter((t) => {
      const by = claimedBy.get(t);
      return by === undefined || by === null || by === from;
    });
    c.workers?.adoptOrphans(orphans);
    return loaded;
  }

  /**
   * The tree of `id`, whose row names this node id for another process of it, is taken if
   * this process holds the node id (RECLAIM); the other executions of the tree are adopted as
   * at a takeover. Null: this process was replaced (it checks its heartbeat), or the row moved.
   */
  async reclaim(id: string): Promise<number | null> {
    const c = this.ctx;
    const rows = await c.sql("req")<Owned>(q.RECLAIM, [c.nodeId, id, c.instance, c.now()]);
    const mine = rows.find((r) => r.execution_id === id);
    if (!mine) {
      // Taken back meanwhile (reclaimStale), or this process was replaced.
      const [o] = await c.sql("req")<{ node_id: string; epoch: number; instance: string }>(
        q.OWNER_OF,
        [id],
      );
      if (o?.node_id === c.nodeId && o.instance === c.instance) return Number(o.epoch);
      this.onReplaced();
      return null;
    }
    log.shared.warn("shared: took back executions a replaced process of this node id created", {
      node_id: c.nodeId,
      executions: rows.length,
    });
    // The caller loads `id` itself (inside its serial chain); the rest of the tree loads here.
    const others = rows.filter((r) => r.execution_id !== id);
    if (others.length > 0) {
      this.adopt(others, "").catch((e) =>
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
  async reclaimStale(): Promise<void> {
    const c = this.ctx;
    const stale = await c.sql("hb")<{ root_id: string }>(q.STALE_ROOTS, [c.nodeId, c.instance]);
    if (stale.length === 0) return;
    const rows = await c.sql("hb")<Owned>(
      q.RECLAIM_ROOTS,
      [c.nodeId, stale.map((r) => r.root_id), c.instance, c.now()],
    );
    if (rows.length === 0) return this.onReplaced();
    log.shared.warn("shared: took back executions a replaced process of this node id created", {
      node_id: c.nodeId,
      executions: rows.length,
    });
    await this.adopt(rows, "");
  }

  /** After a silence: drop what this node no longer owns (at the epoch it holds). */
  async reconcile(): Promise<void> {
    const c = this.ctx;
    const ex = c.rt!.executions;
    const ids = ex.heldIds();
    if (ids.length > 0) await this.dropLost(ids);
    // Executions memory did not hold (`--cache-executions`) may have been taken over as well.
    await this.#recount();
  }

  async #recount(): Promise<void> {
    const c = this.ctx;
    const [n] = await c.sql("hb")<{ n: string | number }>(q.COUNT_OWNED_RUNNING, [
      c.nodeId,
      c.instance,
    ]);
    c.rt!.executions.recount(Number(n?.n ?? 0));
  }

  async dropLost(ids: string[]): Promise<void> {
    const c = this.ctx;
    const ex = c.rt!.executions;
    const rows = await c.sql("hb")<Owned>(q.OWNED_AMONG, [c.nodeId, ids, c.instance]);
    const owned = new Map(rows.map((r) => [r.execution_id, Number(r.epoch)]));
    let dropped = 0;
    for (const id of ids) {
      const held = this.#epochs.get(id);
      if (owned.has(id) && owned.get(id) === held) continue;
      const last = ex.stateOf(id);
      ex.drop(id);
      if (last) c.workers?.dropped(last);
      dropped++;
    }
    if (dropped > 0) {
      log.shared.warn("shared: dropped executions another node took over", {
        node_id: c.nodeId,
        executions: dropped,
      });
    }
  }

  /** Takes over this node's rendezvous share of the trees of dead nodes (batches of 100). */
  async takeOver(): Promise<void> {
    const c = this.ctx;
    await this.#recoverTakeovers();
    const dead = await c.sql("hb")<{ root_id: string; node_id: string }>(q.DEAD_ROOTS, [
      c.nodeId,
      c.opts.nodeTimeoutMs,
    ]);
    if (dead.length === 0) return;
    const nodes = await c.sql("hb")<{ node_id: string; age_ms: number }>(q.LIST_NODES, [
      c.opts.nodeTimeoutMs,
    ]);
    const live = nodes.filter((n) => n.age_ms < c.opts.nodeTimeoutMs).map((n) => n.node_id);
    if (!live.includes(c.nodeId)) live.push(c.nodeId);
    const mine = new Map<string, string[]>();
    for (const d of dead) {
      if (rendezvousOwner(d.root_id, live) !== c.nodeId) continue;
      let list = mine.get(d.node_id);
      if (!list) mine.set(d.node_id, list = []);
      list.push(d.root_id);
    }
    for (const [from, roots] of mine) {
      for (let i = 0; i < roots.length; i += TAKEOVER_BATCH) {
        const batch = roots.slice(i, i + TAKEOVER_BATCH);
        try {
          const rows = await c.sql("hb")<Owned>(
            q.TAKE_OVER,
            [c.nodeId, batch, from, c.now(), c.instance],
          );
          if (rows.length === 0) continue;
          log.shared.warn("shared: taking over executions of a node that stopped heartbeating", {
            from,
            executions: rows.length,
          });
          const r = await this.adopt(rows, from);
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
    const c = this.ctx;
    const ex = c.rt!.executions;
    while (this.#lostTakeovers.length > 0) {
      const t = this.#lostTakeovers[0]!;
      const rows = await c.sql("hb")<Owned>(q.OWNED_OF_ROOTS, [c.nodeId, t.roots, c.instance]);
      const again = rows.filter((r) =>
        !(this.#epochs.get(r.execution_id) === Number(r.epoch) && ex.holds(r.execution_id))
      );
      if (again.length > 0) {
        log.shared.warn("shared: adopting executions of a takeover whose answer was lost", {
          from: t.from,
          executions: again.length,
        });
        await this.adopt(again, t.from);
        await this.#recount();
      }
      this.#lostTakeovers.shift();
    }
  }
}
