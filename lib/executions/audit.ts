/**
 * The audit of memory against the history (Executions.startAudit): every AUDIT_EVERY_MS,
 * executions whose queued task has waited AUDIT_AFTER_MS with memory unchanged are checked, a
 * few at a time, each once per such wait: when the history holds an event after memory's last
 * one, a commit landed that memory never installed (an outcome misread under cut connections),
 * and the execution is rebuilt from the history, its landed dispatch marked uncertain and
 * redelivered. Without it such an execution waits for ever: memory offers a task whose row a
 * worker holds already (issue 36, shared mode under db-cut-storm). One read per checked
 * execution, inside its turn; nothing while the queue moves.
 *
 * Shared mode also: a queued step whose row another process claimed, and whose dispatch never
 * reached this owner's history, goes back on the queue (#requeueStaleClaims).
 */
import type { HistoryEvent } from "../engine/events.ts";
import { type ExecutionState, queuedSteps } from "../engine/state.ts";
import { log } from "../log.ts";
import type { Metrics } from "../metrics.ts";
import { unitOf } from "./shared_changes.ts";
import type { Ownership } from "./types.ts";

const AUDIT_EVERY_MS = 5_000;
const AUDIT_AFTER_MS = 5_000;
const AUDIT_BATCH = 32;
/** How often an execution still waiting is checked again. */
const AUDIT_AGAIN_MS = 15_000;
/** Shared mode: a claim not recorded nor confirmed for this long is stale (see staleClaims). */
const STALE_CLAIM_MS = 10_000;

/** The audit's view of one execution with a queued task. */
interface AuditEntry {
  run: string;
  seq: number;
  /** When memory was first seen at this run and seq. */
  at: number;
  /** When it was last checked (0: not yet). */
  checkedAt: number;
}

/** What the audit reads of the executions memory holds (Executions' public API). */
export interface AuditedMemory {
  heldStates(): IterableIterator<ExecutionState>;
  stateOf(id: string): ExecutionState | undefined;
  inDoubt(id: string): boolean;
  serial<T>(id: string, fn: () => Promise<T>): Promise<T>;
}

export interface AuditOptions {
  readHistory(run: string, afterSeq: number, limit: number): Promise<HistoryEvent[]>;
  /** Memory is behind the history: rebuild the execution from it. */
  behind(id: string): void;
  metrics: Metrics;
  ownership: Ownership | null;
  now(): number;
}

export class MemoryAudit {
  #timer: ReturnType<typeof setInterval> | undefined;
  #running = false;
  #stopped = false;
  #seen = new Map<string, AuditEntry>();

  constructor(readonly memory: AuditedMemory, readonly opts: AuditOptions) {}

  start(): void {
    if (this.#timer !== undefined || this.#stopped) return;
    this.#timer = setInterval(() => {
      this.once().catch((e) =>
        log.engine.warn("cannot check memory against the history; trying again", {
          error: (e as Error).message,
        })
      );
    }, AUDIT_EVERY_MS);
  }

  stop(): void {
    this.#stopped = true;
    clearInterval(this.#timer);
  }

  /** One pass (every AUDIT_EVERY_MS). */
  async once(): Promise<void> {
    if (this.#running || this.#stopped) return;
    this.#running = true;
    const mem = this.memory;
    try {
      const now = this.opts.now();
      const seen = new Map<string, AuditEntry>();
      const due: Array<[string, AuditEntry]> = [];
      for (const state of mem.heldStates()) {
        const id = state.execution_id;
        if (mem.inDoubt(id) || queuedSteps(state).length === 0) continue;
        const prev = this.#seen.get(id);
        const entry = prev && prev.run === state.run_id && prev.seq === state.last_seq
          ? prev
          : { run: state.run_id, seq: state.last_seq, at: now, checkedAt: 0 };
        seen.set(id, entry);
        if (now - entry.at >= AUDIT_AFTER_MS && now - entry.checkedAt >= AUDIT_AGAIN_MS) {
          due.push([id, entry]);
        }
      }
      this.#seen = seen;
      // The longest unchecked first, a few per pass.
      due.sort((x, y) => x[1].checkedAt - y[1].checkedAt);
      const units: Array<{ execution_id: string; unit: string }> = [];
      for (const [id, entry] of due.slice(0, AUDIT_BATCH)) {
        await mem.serial(id, async () => {
          const state = mem.stateOf(id);
          if (
            this.#stopped || !state || mem.inDoubt(id) || state.run_id !== entry.run ||
            state.last_seq !== entry.seq
          ) {
            return;
          }
          const ahead = await this.opts.readHistory(entry.run, entry.seq, 1);
          entry.checkedAt = this.opts.now();
          if (ahead.length === 0) {
            for (const st of queuedSteps(state)) {
              units.push({ execution_id: id, unit: unitOf(state, st) });
            }
            return;
          }
          log.engine.warn("memory is behind the history; rebuilding the execution from it", {
            execution_id: id,
            last_seq: entry.seq,
            next_event: ahead[0]!.type,
          });
          this.opts.metrics.memoryBehindHistory.inc();
          this.opts.behind(id);
        });
      }
      await this.#requeueStaleClaims(units, now - STALE_CLAIM_MS);
    } finally {
      this.#running = false;
    }
  }

  /**
   * Shared mode: a queued step whose row another process claimed, and whose dispatch never
   * reached this owner's history (the claim's `dispatched` entry or its own recording lost
   * with a connection or a takeover), goes back on the queue: nothing else would hand it out
   * again. A worker that held it hears cancel; one that ran it already had its result refused
   * (the history never named its token), so the task runs again, with the same idempotency key.
   */
  async #requeueStaleClaims(
    units: Array<{ execution_id: string; unit: string }>,
    before: number,
  ): Promise<void> {
    const own = this.opts.ownership;
    const mem = this.memory;
    if (!own?.staleClaims || !own.requeue || units.length === 0) return;
    for (const c of await own.staleClaims(units, before)) {
      await mem.serial(c.execution_id, async () => {
        const state = mem.stateOf(c.execution_id);
        if (!state || mem.inDoubt(c.execution_id)) return;
        const st = queuedSteps(state).find((x) => unitOf(state, x) === c.unit);
        if (!st) return;
        if (await own.requeue!(c.token)) {
          this.opts.metrics.staleClaimsRequeued.inc();
          log.engine.warn("a claim whose dispatch was never recorded goes back on the queue", {
            execution_id: c.execution_id,
            step: st.id,
            token: c.token,
          });
        }
      });
    }
  }
}
