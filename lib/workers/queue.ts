/**
 * The task queue (SPEC §4): which scheduled steps wait for a worker, per task and contract.
 *
 * The queue is derived from execution state: a step whose status is `scheduled` is queued.
 * `enqueue()` is called with every installed state and adds the steps not queued yet; `take()`
 * is synchronous, so two polls never take the same task; an entry whose step is no longer
 * scheduled at that attempt (dispatched eagerly, cancelled, timed out) is dropped when met.
 *
 * `MemoryTaskQueue` is the single server's (and standby mode's) queue. Shared mode keeps its
 * own queue over the `orbit_tasks` table, in cluster/shared/claims.ts: there a claim is one
 * `FOR UPDATE SKIP LOCKED` statement, asynchronous, and not an implementation of this
 * interface; a `MemoryTaskQueue` there mirrors the rows of the executions the server owns, so
 * that a result can hand its freed slot one of them in its own commit.
 */
import { type ExecutionState, queuedSteps } from "../engine/state.ts";
import type { Executions } from "../executions/executions.ts";
import { languageFits, type Session } from "./sessions.ts";

/** A queued step at one attempt. */
export interface QueuedTask {
  execution_id: string;
  step: string;
  attempt: number;
  language: string | null;
  /** Put back after a refused dispatch (`requeue` with a hold): not taken before this time. */
  heldUntilMs?: number;
}

export interface TaskQueue {
  /** Queues the scheduled steps of `state` not queued yet; whether it queued any. */
  enqueue(state: ExecutionState): boolean;
  /** Takes up to `max` queued tasks `s` serves (synchronously: no double take). */
  take(s: Pick<Session, "tasks" | "runtime">, max: number): QueuedTask[];
  /**
   * Puts tasks taken but not dispatched back in front, those still scheduled at that attempt;
   * with `holdUntilMs`, no take gets them before that time (they keep their place).
   */
  requeue(items: readonly QueuedTask[], holdUntilMs?: number): void;
  /** How many steps of a task and contract wait in the queue. */
  depth(task: string, contract: string): number;
}

const queuedId = (q: QueuedTask) => `${q.execution_id}\u0000${q.step}\u0000${q.attempt}`;
const key = (task: string, contract: string) => `${task}\u0000${contract}`;

/** The task queue in memory, for one server. */
export class MemoryTaskQueue implements TaskQueue {
  #queue = new Map<string, QueuedTask[]>();
  #queued = new Set<string>();

  /** `now`: the clock of `requeue`'s holds (milliseconds). */
  constructor(
    readonly executions: Pick<Executions, "stateOf">,
    readonly now: () => number = Date.now,
  ) {}

  enqueue(state: ExecutionState): boolean {
    let added = false;
    for (const st of queuedSteps(state)) {
      const item = {
        execution_id: state.execution_id,
        step: st.id,
        attempt: st.attempt,
        language: st.language,
      };
      if (this.#queued.has(queuedId(item))) continue;
      this.#queued.add(queuedId(item));
      const k = key(st.task, st.contract);
      let q = this.#queue.get(k);
      if (!q) this.#queue.set(k, q = []);
      q.push(item);
      added = true;
    }
    return added;
  }

  take(s: Pick<Session, "tasks" | "runtime">, max: number): QueuedTask[] {
    const out: QueuedTask[] = [];
    let now: number | undefined;
    for (const reg of s.tasks) {
      const q = this.#queue.get(key(reg.name, reg.contract));
      if (!q) continue;
      for (let i = 0; i < q.length && out.length < max;) {
        const item = q[i]!;
        if (!this.#current(item)) {
          q.splice(i, 1);
          this.#queued.delete(queuedId(item));
          continue;
        }
        if (!languageFits(item.language, reg, s)) {
          i++;
          continue;
        }
        if (item.heldUntilMs !== undefined) {
          if (item.heldUntilMs > (now ??= this.now())) {
            i++;
            continue;
          }
          delete item.heldUntilMs;
        }
        q.splice(i, 1);
        this.#queued.delete(queuedId(item));
        out.push(item);
      }
      if (out.length >= max) break;
    }
    return out;
  }

  requeue(items: readonly QueuedTask[], holdUntilMs?: number): void {
    for (const q of items) {
      const st = this.executions.stateOf(q.execution_id)?.steps[q.step];
      if (!st || st.status !== "scheduled" || st.attempt !== q.attempt) continue;
      const k = key(st.task, st.contract);
      if (this.#queued.has(queuedId(q))) continue;
      this.#queued.add(queuedId(q));
      if (holdUntilMs !== undefined) q.heldUntilMs = holdUntilMs;
      let list = this.#queue.get(k);
      if (!list) this.#queue.set(k, list = []);
      list.unshift(q);
    }
  }

  /**
   * Drops the entries no longer queued. `take` drops them as it meets them; a queue no session
   * takes from (shared mode's mirror of its own rows, whose tasks other servers claim) needs
   * this now and then.
   */
  prune(): void {
    for (const [k, list] of this.#queue) {
      const keep = list.filter((item) => {
        if (this.#current(item)) return true;
        this.#queued.delete(queuedId(item));
        return false;
      });
      if (keep.length === 0) this.#queue.delete(k);
      else this.#queue.set(k, keep);
    }
  }

  depth(task: string, contract: string): number {
    let n = 0;
    for (const item of this.#queue.get(key(task, contract)) ?? []) if (this.#current(item)) n++;
    return n;
  }

  /** Whether the queued step is still scheduled at the queued attempt. */
  #current(item: QueuedTask): boolean {
    const st = this.executions.stateOf(item.execution_id)?.steps[item.step];
    return st !== undefined && st.status === "scheduled" && st.attempt === item.attempt;
  }
}
