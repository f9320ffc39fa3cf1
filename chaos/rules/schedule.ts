/** Rule 9, `schedule`: every occurrence between the creation and the pause started once. */
import type { CheckInput } from "../check_input.ts";
import type { Add } from "./common.ts";

/** Returns the number of occurrences the run started. */
export function checkSchedule(input: CheckInput, add: Add): number {
  const { snapshot } = input;
  // 9. Schedule occurrences.
  let occurrences = 0;
  if (input.schedule) {
    const s = input.schedule;
    const every = s.every_s * 1000;
    const ids = snapshot.executions.map((e) => e.execution_id).filter((id) =>
      id.startsWith(`${s.schedule_id}@`)
    );
    occurrences = ids.length;
    const at = ids.map((id) => Date.parse(id.slice(id.indexOf("@") + 1))).sort((a, b) => a - b);
    const row = snapshot.schedules.find((r) => r.schedule_id === s.schedule_id);
    const skipped = row?.skipped ?? 0;
    if (skipped > 0) {
      add("schedule", null, `${skipped} occurrences skipped (catch_up all, allow_all)`);
    }
    for (let i = 0; i < at.length; i++) {
      if (at[i]! % every !== 0) {
        add(
          "schedule",
          null,
          `occurrence ${new Date(at[i]!).toISOString()} is off the ${s.every_s} s grid`,
        );
      }
      if (i > 0 && at[i] === at[i - 1]) {
        add("schedule", null, `occurrence ${new Date(at[i]!).toISOString()} started twice`);
      }
    }
    // Every grid point after the creation and before the next fire time was started.
    const first = Math.ceil((s.created_ms + 1) / every) * every + every;
    const last = s.next_fire_ms - every;
    const have = new Set(at);
    const missing: string[] = [];
    for (let t = first; t <= last; t += every) {
      if (!have.has(t)) missing.push(new Date(t).toISOString());
    }
    if (missing.length > 0) {
      add(
        "schedule",
        null,
        `${missing.length} occurrences never started: ${missing.slice(0, 10).join(", ")}${
          missing.length > 10 ? ", …" : ""
        }`,
      );
    }
  }
  return occurrences;
}
