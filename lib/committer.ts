/**
 * Commit batching. Appends of executions that are ready at the same moment go into one store
 * transaction: while a commit is in flight, new appends wait and then go together in the next
 * one (group commit). A batch that fails is retried item by item, so one bad append cannot fail
 * the others; a fenced store fails them all.
 */
import type { AppendItem, Store } from "./store/store.ts";
import { FencedError } from "./store/store.ts";
import type { Metrics } from "./metrics.ts";

interface Pending {
  item: AppendItem;
  resolve: () => void;
  reject: (e: unknown) => void;
}

const MAX_BATCH = 500;

export class GroupCommitter {
  #pending: Pending[] = [];
  #running: Promise<void> | null = null;

  constructor(readonly store: Store, readonly metrics: Metrics) {}

  append(item: AppendItem): Promise<void> {
    return new Promise((resolve, reject) => {
      this.#pending.push({ item, resolve, reject });
      if (!this.#running) this.#running = this.#drain();
    });
  }

  /** Resolves when every append queued so far has been committed or refused. */
  async idle(): Promise<void> {
    while (this.#running) await this.#running;
  }

  async #drain(): Promise<void> {
    try {
      while (this.#pending.length > 0) {
        // Yield one macrotask first: requests that are already readable get to run and queue
        // their appends, so they share this commit (a synchronous driver such as SQLite would
        // otherwise commit every request on its own).
        await new Promise((r) => setTimeout(r, 0));
        const batch = this.#pending.splice(0, MAX_BATCH);
        await this.#commit(batch);
      }
    } finally {
      this.#running = null;
    }
  }

  async #commit(batch: Pending[]): Promise<void> {
    const started = performance.now();
    try {
      await this.store.commit(batch.map((p) => p.item));
    } catch (e) {
      if (batch.length === 1 || e instanceof FencedError) {
        for (const p of batch) p.reject(e);
        return;
      }
      for (const p of batch) await this.#commit([p]);
      return;
    }
    this.metrics.appendLatency.observe((performance.now() - started) / 1000);
    this.metrics.commits.inc();
    let events = 0;
    for (const p of batch) events += p.item.events.length;
    this.metrics.eventsAppended.inc({}, events);
    for (const p of batch) p.resolve();
  }
}
