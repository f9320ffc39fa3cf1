/** Rule 12, `signal-once`. */
import type { CheckInput } from "../check_input.ts";
import type { Add, ExecById } from "./common.ts";

export function checkSignals(input: CheckInput, add: Add, execById: ExecById): void {
  const { snapshot } = input;
  // 12. A signal is recorded once when it was answered, never twice unless a try's outcome
  // was unknown (no answer, or 500).
  for (const s of input.starts) {
    if (!s.signals || s.signals.length === 0 || !execById.has(s.id)) continue;
    const received = new Map<string, number>();
    for (const e of snapshot.events.get(s.id) ?? []) {
      if (e.type !== "SignalReceived" || e.carried_over === true) continue;
      const i = (e.payload as { i?: unknown } | null)?.i;
      if (typeof i !== "number") continue;
      const k = `${e.signal} ${i}`;
      received.set(k, (received.get(k) ?? 0) + 1);
    }
    for (const sig of s.signals) {
      const n = received.get(`${sig.signal} ${sig.key}`) ?? 0;
      const unknown = sig.statuses.some((st) => st === 0 || (st >= 500 && st !== 503));
      const tries = `tries answered ${sig.statuses.join(", ")}`;
      if (n > 1 && !unknown) {
        add(
          "signal-once",
          s.id,
          `signal ${sig.signal} {"i": ${sig.key}} recorded ${n} times; ${tries}`,
        );
      }
      if (n === 0 && sig.statuses.some((st) => st === 200 || st === 201)) {
        add(
          "signal-once",
          s.id,
          `signal ${sig.signal} {"i": ${sig.key}} answered but not recorded; ${tries}`,
        );
      }
    }
  }
}
