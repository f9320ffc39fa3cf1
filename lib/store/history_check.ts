/**
 * What a stored execution must look like, whatever happened to the server that wrote it: the
 * one check behind the chaos checker's `history` rule and the store conformance suite.
 *
 * - the run's seqs are exactly 1..n;
 * - the row equals a replay of the run's history: the same status, and for a closed run the
 *   same output (completed) and error code; the row's `last_seq` is never past the history's
 *   end (a steady append leaves the row's behind it), and equals it once the run closed;
 * - at most one `StepSucceeded` per step of the run.
 *
 * Pure: a caller reads the row and the events of its current run and prints what comes back.
 *
 * ```ts
 * const problems = historyProblems(row, await readRun(store, row.run_id));
 * if (problems.length > 0) throw new Error(problems.join("; "));
 * ```
 */
import { isDeepStrictEqual } from "node:util";
import type { HistoryEvent } from "../engine/events.ts";
import { replay } from "../engine/state.ts";

/** The columns of a stored execution the check compares (undefined: not read, not compared). */
export interface StoredRow {
  execution_id: string;
  run_id: string;
  status: string;
  output?: unknown;
  error?: unknown;
  /** The row's own column (not the history's end that the stores' reads answer). */
  last_seq?: number;
}

/** Problems of one execution's current run, each a sentence; empty when it is whole. */
export function historyProblems(row: StoredRow, events: readonly HistoryEvent[]): string[] {
  const out: string[] = [];
  const run = events.filter((e) =>
    (e as { run_id?: string }).run_id === undefined ||
    (e as { run_id?: string }).run_id === row.run_id
  );
  for (const [i, e] of run.entries()) {
    if (e.seq !== i + 1) {
      out.push(`run ${row.run_id}: seq ${e.seq} at position ${i + 1} (a gap or a repeat)`);
      break;
    }
  }
  if (run.length === 0) {
    out.push(`run ${row.run_id}: no events`);
    return out;
  }
  const succeeded = new Map<string, number>();
  for (const e of run) {
    if (e.type !== "StepSucceeded") continue;
    const step = String((e as { step?: unknown }).step);
    succeeded.set(step, (succeeded.get(step) ?? 0) + 1);
  }
  for (const [step, n] of succeeded) {
    if (n > 1) out.push(`step ${step} succeeded ${n} times`);
  }
  let state;
  try {
    state = replay(run);
  } catch (e) {
    out.push(`the history does not replay: ${(e as Error).message}`);
    return out;
  }
  if (state.status !== row.status) {
    out.push(`row status ${row.status}, but the history replays to ${state.status}`);
  }
  const closed = state.phase === "closed";
  if (closed && row.output !== undefined && state.status === "completed") {
    if (!isDeepStrictEqual(row.output, state.output)) {
      out.push(
        `row output ${JSON.stringify(row.output)}, but the history completed with ` +
          JSON.stringify(state.output),
      );
    }
  }
  if (closed && row.error !== undefined && row.error !== null && state.error) {
    const code = (row.error as { code?: unknown }).code;
    if (code !== state.error.code) {
      out.push(`row error ${String(code)}, but the history ended with ${state.error.code}`);
    }
  }
  if (row.last_seq !== undefined) {
    if (row.last_seq > state.last_seq) {
      out.push(`row last_seq ${row.last_seq} is past the history's end (seq ${state.last_seq})`);
    } else if (closed && row.last_seq !== state.last_seq) {
      out.push(`row last_seq ${row.last_seq}, but the closed run ends at seq ${state.last_seq}`);
    }
  }
  return out;
}
