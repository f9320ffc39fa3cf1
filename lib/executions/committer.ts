/**
 * Commit batching. Appends of executions that are ready at the same moment go into one store
 * transaction: while a commit is in flight, new appends wait and then go together in the next
 * one (group commit). A batch that fails is retried item by item, so one bad append cannot fail
 * the others; a fenced store fails them all. In shared mode the store answers which executions
 * were fenced (owned elsewhere): those items fail, the others are committed.
 */
import { setImmediate } from "node:timers";
import type { AppendItem, Store } from "../store/store.ts";
import { FencedError, mayHaveCommitted } from "../store/store.ts";
import type { Metrics } from "../metrics.ts";

interface Pending {
  item: AppendItem;
  resolve: () => void;
  reject: (e: unknown) => void;
}

/**
 * The most appends one commit takes. A batch's answers, and what they set off (the next
 * decisions, the appends they queue), run in one turn of the event loop: this bounds how long
 * a flood of appends (a tree of child executions doubling at every level) holds a request
 * back. 500 let one turn run 0.2-0.8 s on SQLite under such a tree; 64 keeps it near 0.1 s
 * and the bench's throughput unchanged.
 */
const MAX_BATCH = 64;

/**
 * Under load, the least time between the starts of two commits (milliseconds). A commit costs
 * the server and PostgreSQL about the same whatever it carries (on PostgreSQL ≈ 0.6 ms of the
 * server's CPU and ≈ 0.5 ms of the database's, its WAL flush included: docs/performance-log.md),
 * so a server that is busy anyway commits less often and carries more in each commit. Measured
 * with three shared servers each capped at a quarter of a core (issue 39): 1.3 → 1.0 commits
 * per order; the throughput changed within the host's noise (docs/performance-log.md).
 */
export const COMMIT_PACE_MS = 10;

/**
 * How late (milliseconds, a moving average) the committer's own turns must run for the server to
 * count as busy. An idle or lightly loaded server runs them on time (a timer within its
 * millisecond) and commits at once; a server short of CPU (its cgroup's quota spent, its cores
 * taken by others) runs them late, and there a commit that waits costs no latency the requests
 * were not paying already.
 */
export const BUSY_LAG_MS = 2;

/** Weight of the newest sample in the moving average of the turns' lateness. */
const LAG_WEIGHT = 0.2;

/**
 * When the next commit may start: at once, unless the server is busy (see BUSY_LAG_MS), then no
 * sooner than `paceMs` after the previous commit started. Pure: the caller passes the clock.
 */
export class CommitPacer {
  #lagMs = 0;
  #lastStartMs = -Infinity;

  /** `paceMs` 0 turns pacing off. */
  constructor(readonly paceMs = COMMIT_PACE_MS, readonly busyLagMs = BUSY_LAG_MS) {}

  /** A turn the committer scheduled ran `lateMs` after it was due. */
  observe(lateMs: number): void {
    this.#lagMs += LAG_WEIGHT * (Math.max(0, lateMs) - this.#lagMs);
  }

  /** The moving average of the turns' lateness (milliseconds). */
  get lagMs(): number {
    return this.#lagMs;
  }

  get busy(): boolean {
    return this.paceMs > 0 && this.#lagMs >= this.busyLagMs;
  }

  /** A commit started at `nowMs`. */
  started(nowMs: number): void {
    this.#lastStartMs = nowMs;
  }

  /** How long a commit that could start at `nowMs` waits first (0: it starts now). */
  delayMs(nowMs: number): number {
    if (!this.busy) return 0;
    return Math.max(0, this.#lastStartMs + this.paceMs - nowMs);
  }
}

export class GroupCommitter {
  #pending: Pending[] = [];
  #inFlight = 0;
  #scheduled = false;
  /** A commit ran and more appends were waiting when it ended: the next one is chained. */
  #chained = false;
  #idle: Array<() => void> = [];

  /**
   * `lanes`: how many commits may be in flight at once. The runtime uses one on every store
   * and mode (more lanes made more, smaller commits and no shorter cycle, on one server and in
   * shared mode alike). The appends of one execution never overlap (the shell serializes
   * them), so more lanes would be safe. `pacer`: when a commit may start (CommitPacer).
   */
  constructor(
    readonly store: Store,
    readonly metrics: Metrics,
    readonly lanes = 1,
    readonly pacer = new CommitPacer(),
  ) {}

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
  // would otherwise commit every request on its own). From idle that is an immediate, not a
  // timer: chained timers are clamped to milliseconds. But Deno runs the immediates that
  // immediates queue before it looks at sockets again (measured: a chain of 20 ms immediates
  // kept an HTTP request waiting 3 s, the same chain on setTimeout 16 ms), so a commit that
  // follows another one straight away waits for a timer turn, which lets the sockets in: under
  // a flood of appends the server still answers (issue 37: a doubling tree of children held
  // /v1/health for 2.7-15 s; now 0.12-0.16 s, docs/performance-log.md). A busy server waits
  // longer (CommitPacer); how late the turn runs is what tells it that it is busy.
  #schedule(): void {
    if (this.#scheduled || this.#inFlight >= this.lanes || this.#pending.length === 0) return;
    this.#scheduled = true;
    const now = performance.now();
    const delay = this.pacer.delayMs(now);
    const due = now + delay;
    const run = () => {
      this.pacer.observe(performance.now() - due);
      this.#scheduled = false;
      while (this.#pending.length > 0 && this.#inFlight < this.lanes) {
        const batch = this.#pending.splice(0, MAX_BATCH);
        this.#inFlight++;
        this.#commit(batch).finally(() => {
          this.#inFlight--;
          this.#chained = this.#pending.length > 0;
          this.#schedule();
          if (this.#pending.length === 0 && this.#inFlight === 0) {
            for (const r of this.#idle.splice(0)) r();
          }
        });
      }
    };
    if (delay > 0 || this.#chained) setTimeout(run, delay);
    else setImmediate(run);
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
    this.pacer.started(started);
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
