/**
 * Which executions the engine shell (lib/executions/executions.ts) may let go of, and when it must hold
 * them again. An execution that only waits — for a signal, for a timer that is not due soon,
 * for a sleep — needs nothing in memory: everything that can happen to it (a signal, a cancel,
 * a wait, a start of its id, its timer coming due) rebuilds it from history first. Anything
 * else keeps it: a task queued or dispatched (the worker service holds its tokens), an HTTP
 * call in flight, a child running (the child coordinator hands the parent its result), a
 * child itself (its parent's coordinator watches it), a handler or step still moving.
 *
 * `wakeAt` is written with every commit (`workflow_executions.wake_at_ms`), so the store
 * answers which executions must be in memory: at start-up those with work in flight or a
 * timer due soon, and, every second, those whose timer comes due (`listWaking`).
 *
 * ```ts
 * import { wakeAt } from "./cache.ts";
 * import { emptyState } from "../engine/state.ts";
 * console.log(wakeAt({ ...emptyState(), phase: "closed" })); // null
 * ```
 */
import { type ExecutionState, isOpenStatus } from "../engine/state.ts";
import { wakeups } from "../engine/decide.ts";

/** The default of `--cache-executions`: idle executions held in memory beyond which they go. */
export const DEFAULT_CACHE_EXECUTIONS = 10_000;

/** How far ahead of a timer the poll loads its execution (and start-up loads due ones). */
export const WAKE_AHEAD_MS = 5_000;

/** An execution whose next timer is nearer than this stays in memory. */
export const EVICT_HORIZON_MS = 60_000;

/** How often the store is asked for executions whose timers come due. */
export const WAKE_POLL_MS = 1_000;

/** Step kinds that wait without anything in flight (their step is `waiting`). */
const QUIET_KINDS = new Set(["wait_signal", "sleep", "if", "parallel"]);

/**
 * When the execution must be in memory again: 0 now and always while it has work in flight
 * (or is a child), the time of its next timer, or null when only an outside event moves it
 * (and when it is closed).
 */
export function wakeAt(s: ExecutionState): number | null {
  if (s.phase === "closed") return null;
  if (s.phase !== "running" || s.parent_id !== null) return 0;
  let waiting = 0;
  for (const st of Object.values(s.steps)) {
    if (!isOpenStatus(st.status)) continue;
    if (st.status !== "waiting" || !QUIET_KINDS.has(st.kind)) return 0;
    waiting++;
  }
  if (waiting === 0) return 0;
  let at: number | null = null;
  for (const w of wakeups(s)) if (at === null || w.at < at) at = w.at;
  // A timer at 0 would read as "in flight"; no clock reads 0.
  return at === null ? null : Math.max(1, at);
}

/** Whether an idle execution in this state may leave memory at `now`. */
export function evictable(s: ExecutionState, now: number): boolean {
  const at = wakeAt(s);
  return at === null || (at > 0 && at - now >= EVICT_HORIZON_MS);
}
