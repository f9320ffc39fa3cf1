/**
 * Commit batching. Appends of executions that are ready at the same moment go into one store
 * transaction: while a commit is in flight, new appends wait and then go together in the next
 * one (group commit). A batch that fails is retried item by item, so one bad append cannot fail
 * the others; a fenced store fails them all. In shared mode the store answers which executions
 * were fenced (owned elsewhere): those items fail, the others are committed.
 */
import { setImmediate } from "node:timers";
import type { AppendItem, Store } from "./store/store.ts";
import { FencedError, mayHaveCommitted } from "./store/store.ts";
import type { Metrics } from "./metrics.ts";

interface Pending {
  item: AppendItem;
  resolve: () => void;
  reject: (e: unknown) => void;
}

const MAX_BATCH = 500;

export class GroupCommitter {
  #pending: Pending[] = [];
  #inFlight = 0;
  #scheduled = false;
  #idle: Array<() => void> = [];

  /**
   * `lanes`: how many commits may be in flight at once. The runtime uses one on every store
   * and mode (more lanes made more, smaller commits and no shorter cycle, on one server and in
   * shared mode alike). The appends of one execution never overlap (the shell serializes
   * them), so more lanes would be safe.
   */
  constructor(readonly store: Store, readonly metrics: Metrics, readonly lanes = 1) {}

  append(item: AppendItem): Promise<void> {
    return new Promise((resolve, reject) => {
      this.#pending.push({ item, resolve, reject });
      this.#schedule();
    });
  }

  /** Resolves when every append queued so far has been committed or refused. */
  idle(): Promise<void> {
    if (this.#pending.length === 0 && this.#inFlight === 0) return Promise.resolve();
    return new Promise((resolve) => this.#idle.push(resolve));
  }

  // Yield one macrotask before taking a batch: requests that are already readable get to run
  // and queue their appends, so they share the commit (a synchronous driver such as SQLite
  // would otherwise commit every request on its own). setImmediate, not setTimeout: chained
  // timers are clamped to milliseconds.
  #schedule(): void {
    if (this.#scheduled || this.#inFlight >= this.lanes || this.#pending.length === 0) return;
    this.#scheduled = true;
    setImmediate(() => {
      this.#scheduled = false;
      while (this.#pending.length > 0 && this.#inFlight < this.lanes) {
        const batch = this.#pending.splice(0, MAX_BATCH);
        this.#inFlight++;
        this.#commit(batch).finally(() => {
          this.#inFlight--;
          this.#schedule();
          if (this.#pending.length === 0 && this.#inFlight === 0) {
            for (const r of this.#idle.splice(0)) r();
          }
        });
      }
    });
  }

  /** This is an item of a failed batch that may have been written (see #commit). */
  #inDoubt(batchError: unknown): boolean {
    return batchError !== undefined && mayHaveCommitted(batchError);
  }

  /**
   * `batchError`: this is an item of a failed batch, retried alone. That batch may have landed
   * although it reported an error (a connection lost in its commit): a create then fails here
   * as a duplicate of itself, which would tell its caller that another start made it, and an
   * append that applied inbox entries finds them gone, and one that takes a queued task row
   * finds it taken (the batch, still in flight, held the row: this statement read the row as
   * queued before it, then found it claimed), either of which would tell it that nothing was
   * written (shared mode: the owner's memory stayed behind a dispatch that landed, the
   * worker's result for it was refused, or nobody got the task at all); so would any refusal
   * by the database itself (a deadlock, a conflict), which says nothing of the batch. It gets
   * the batch's error instead, whose outcome is unknown: the caller resolves it
   * (Executions.#recommit) and rebuilds from the history. A batch the database refused whole
   * (its error says so: mayHaveCommitted) left nothing, and its items' own errors stand.
   */
  async #commit(batch: Pending[], batchError?: unknown): Promise<void> {
    const started = performance.now();
    let result;
    try {
      result = await this.store.commit(batch.map((p) => p.item));
    } catch (e) {
      if (batch.length === 1 || e instanceof FencedError) {
        // What the batch would have done had it landed (the create's row exists, the inbox
        // entries it applied are gone) is no answer here: the outcome is the batch's, unknown.
        const landedBatch = !(e instanceof FencedError) && !mayHaveCommitted(e);
        const error = this.#inDoubt(batchError) && landedBatch ? batchError : e;
        for (const p of batch) p.reject(error);
        return;
      }
      for (const p of batch) await this.#commit([p], e);
      return;
    }
    this.metrics.appendLatency.observe((performance.now() - started) / 1000);
    this.metrics.commits.inc();
    // Shared mode: an execution owned elsewhere is fenced alone, an append whose queued task
    // another server claimed is refused alone; the rest committed.
    const fenced = result?.fenced;
    const lost = result?.lost;
    let events = 0;
    for (const p of batch) {
      const id = p.item.row.execution_id;
      const refused = fenced?.get(id) ?? lost?.get(id);
      if (refused) {
        // After a failed batch an inbox entry gone may be the batch's own doing (see above).
        p.reject(
          this.#inDoubt(batchError) && !(refused instanceof FencedError) ? batchError : refused,
        );
        continue;
      }
      events += p.item.events.length;
      p.resolve();
    }
    this.metrics.eventsAppended.inc({}, events);
  }
}
