import type { Event } from "../history_db.ts";
import type { Add } from "./common.ts";

/**
 * 13. `timer-fire`: the engine emits `TimerFired` only for a timer its state holds (started,
 * not fired, not dropped by its step's `StepCancelled`) and only when `fire_at_ms <= now`, and
 * stamps the event's `time_ms` with that same `now` (lib/engine/decide.ts `timer`,
 * lib/engine/builder.ts). So `time_ms >= fire_at_ms` holds exactly, with no tolerance: even when
 * the timer was started on another server (a takeover, a restart) whose clock differs, the
 * comparison and the stamp both use the firing server's clock. Returns the TimerFired count.
 */
export function checkTimers(
  id: string,
  runId: string,
  run: Event[],
  add: Add,
): number {
  /** Started and not yet fired or dropped: timer id → its TimerStarted. */
  const pending = new Map<string, Event>();
  /** Fired or dropped: timer id → the event that closed it. */
  const closed = new Map<string, Event>();
  let fired = 0;
  for (const e of run) {
    if (e.type === "TimerStarted") {
      pending.set(e.timer_id, e);
      closed.delete(e.timer_id);
    } else if (e.type === "StepCancelled") {
      for (const [tid, t] of pending) {
        if (t.step === e.step) {
          pending.delete(tid);
          closed.set(tid, e);
        }
      }
    } else if (e.type === "TimerFired") {
      fired++;
      const where = `run ${runId} seq ${e.seq} TimerFired ${e.timer_id}`;
      const t = pending.get(e.timer_id);
      if (!t) {
        const c = closed.get(e.timer_id);
        add(
          "timer-fire",
          id,
          c
            ? `${where}: the timer was already ${
              c.type === "TimerFired" ? "fired" : "dropped"
            } at seq ${c.seq} (${c.type})`
            : `${where}: no TimerStarted of that id before it in the run`,
          e.time_ms,
        );
        continue;
      }
      if (e.time_ms < t.fire_at_ms) {
        add(
          "timer-fire",
          id,
          `${where} at ${new Date(e.time_ms).toISOString()}, ${
            t.fire_at_ms - e.time_ms
          } ms before the fire_at_ms ${
            new Date(t.fire_at_ms).toISOString()
          } its TimerStarted seq ${t.seq} recorded`,
          e.time_ms,
        );
      }
      if (e.step !== undefined && t.step !== undefined && e.step !== t.step) {
        add(
          "timer-fire",
          id,
          `${where}: names step ${e.step}, its TimerStarted seq ${t.seq} step ${t.step}`,
          e.time_ms,
        );
      }
      pending.delete(e.timer_id);
      closed.set(e.timer_id, e);
    }
  }
  return fired;
}
