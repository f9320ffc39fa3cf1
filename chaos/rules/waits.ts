/** Rule 14, `wait-answer`. */
import { isDeepStrictEqual } from "node:util";
import type { CheckInput } from "../check_input.ts";
import { type Add, type ExecById, TERMINAL_EVENT, TERMINAL_EVENT_OF } from "./common.ts";

/** Returns the number of wait answers checked. */
export function checkWaits(input: CheckInput, add: Add, execById: ExecById): number {
  const { snapshot } = input;
  // 14. A wait answered with a terminal status agrees with the history's end of that run.
  let waitsChecked = 0;
  for (const s of input.starts) {
    const w = s.waited;
    if (!w || !(w.status in TERMINAL_EVENT_OF)) continue;
    waitsChecked++;
    const ex = execById.get(s.id);
    const answered = `the wait answered ${w.status}${w.run_id ? ` for run ${w.run_id}` : ""} at ${
      new Date(w.at_ms).toISOString()
    }`;
    if (!ex) {
      add("wait-answer", s.id, `${answered}, but there is no such execution`, w.at_ms);
      continue;
    }
    const runId = w.run_id ?? ex.run_id;
    const run = (snapshot.events.get(s.id) ?? []).filter((e) => e.run_id === runId);
    const end = run.findLast((e) => TERMINAL_EVENT.has(e.type));
    const want = TERMINAL_EVENT_OF[w.status]!;
    if (!end) {
      add(
        "wait-answer",
        s.id,
        `${answered}, but run ${runId} has no terminal event (${run.length} events, last ${
          run.at(-1)?.type ?? "none"
        }; the execution reads ${ex.status})`,
        w.at_ms,
      );
      continue;
    }
    if (end.type !== want) {
      add(
        "wait-answer",
        s.id,
        `${answered}, but run ${runId} ended with ${end.type} seq ${end.seq}`,
        end.time_ms,
      );
      continue;
    }
    if (w.status === "completed" && "output" in w && !isDeepStrictEqual(w.output, end.output)) {
      add(
        "wait-answer",
        s.id,
        `${answered} with output ${JSON.stringify(w.output)}, but ${end.type} seq ${end.seq} ` +
          `recorded ${JSON.stringify(end.output)}`,
        end.time_ms,
      );
    }
    const code = end.error?.code;
    if (w.error_code !== undefined && typeof code === "string" && w.error_code !== code) {
      add(
        "wait-answer",
        s.id,
        `${answered} with error ${w.error_code}, but ${end.type} seq ${end.seq} recorded ${code}`,
        end.time_ms,
      );
    }
  }
  return waitsChecked;
}
