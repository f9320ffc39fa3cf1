/**
 * Rules 1–6 over each execution and each of its runs: `started-exists`, `history` (the row
 * equals a replay of its current run), `terminal` (or running only on a declared signal wait),
 * `seq-contiguous`, `after-terminal`, `event-order`, `one-success`, `compensation`; and, per
 * run, rule 13 (chaos/rules/timers.ts). Collects every dispatched token for rule 8.
 */
import type { Event } from "../history_db.ts";
import { historyProblems } from "../../lib/store/history_check.ts";
import type { HistoryEvent } from "../../lib/engine/events.ts";
import type { CheckInput } from "../check_input.ts";
import {
  type Add,
  type Dispatch,
  type ExecById,
  TERMINAL_EVENT,
  TERMINAL_STATUS,
} from "./common.ts";
import { checkTimers } from "./timers.ts";

interface StepTrack {
  kind: "task" | "http" | "started";
  attempt: number;
  key: string | null;
  status: "scheduled" | "dispatched" | "open" | "succeeded" | "failed" | "backoff" | "cancelled";
  /** An attempt was reported uncertain in this attempt: later dispatches are redeliveries. */
  uncertain: boolean;
  tokens: Map<string, { uncertain: boolean; redelivery: boolean; attempt: number }>;
  succeeded: number;
  succeededSeq: number | null;
}

export function checkExecutions(
  input: CheckInput,
  add: Add,
  execById: ExecById,
): { dispatched: Map<string, Dispatch>; eventCount: number; timersFired: number } {
  const { snapshot } = input;
  const startById = new Map(input.starts.map((s) => [s.id, s]));

  // 1. Terminal, or waiting on purpose.
  for (const s of input.starts) {
    if (s.answered && !execById.has(s.id)) {
      add("started-exists", s.id, "the start was answered but there is no such execution");
    }
  }
  // Every dispatched token, by execution: token → its dispatch and the step's key.
  const dispatched = new Map<string, Dispatch>();
  let eventCount = 0;
  let timersFired = 0;

  for (const ex of snapshot.executions) {
    const events = snapshot.events.get(ex.execution_id) ?? [];
    eventCount += events.length;
    const current = events.filter((e) => e.run_id === ex.run_id) as unknown as HistoryEvent[];
    for (const p of historyProblems(ex, current)) add("history", ex.execution_id, p);
    if (!TERMINAL_STATUS.has(ex.status)) {
      const declared = startById.get(ex.execution_id)?.declaredWait === true;
      const waiting = openSignalWait(events.filter((e) => e.run_id === ex.run_id));
      if (!(ex.status === "running" && declared && waiting)) {
        add(
          "terminal",
          ex.execution_id,
          `status ${ex.status}${waiting ? " on a wait the driver did not declare" : ""}`,
        );
      }
    }
    // 2–6, per run.
    const runs = new Map<string, Event[]>();
    for (const e of events) {
      let l = runs.get(e.run_id);
      if (!l) runs.set(e.run_id, l = []);
      l.push(e);
    }
    for (const [runId, run] of runs) {
      checkRun(ex.execution_id, runId, run, add, dispatched);
      // 13. Timers fire once, and not before they are due.
      timersFired += checkTimers(ex.execution_id, runId, run, add);
    }
  }
  return { dispatched, eventCount, timersFired };
}

/** True when the run's last event leaves a `wait_signal` step open. */
function openSignalWait(run: Event[]): boolean {
  const open = new Set<string>();
  for (const e of run) {
    if (e.type === "StepStarted" && e.kind === "wait_signal") open.add(e.step);
    if ((e.type === "StepSucceeded" || e.type === "StepFailed" || e.type === "StepCancelled")) {
      open.delete(e.step);
    }
  }
  return open.size > 0;
}
function checkRun(
  id: string,
  runId: string,
  run: Event[],
  add: Add,
  dispatched: Map<string, Dispatch>,
): void {
  const where = (e: Event) =>
    `run ${runId} seq ${e.seq} ${e.type}${e.step ? ` step ${e.step} attempt ${e.attempt}` : ""}`;
  run.forEach((e, i) => {
    if (e.seq !== i + 1) {
      add("seq-contiguous", id, `run ${runId}: seq ${e.seq} at position ${i + 1}`, e.time_ms);
    }
  });
  const steps = new Map<string, StepTrack>();
  let terminalAt: number | null = null;
  const compensations: Event[] = [];
  for (const e of run) {
    if (terminalAt !== null) {
      add(
        "after-terminal",
        id,
        `${where(e)} after the terminal event seq ${terminalAt}`,
        e.time_ms,
      );
    }
    if (TERMINAL_EVENT.has(e.type)) terminalAt = e.seq;
    if (e.type === "CompensationStarted") compensations.push(e);
    if (typeof e.step !== "string" || e.type === "TimerFired" || e.type === "TimerStarted") {
      continue;
    }
    const st = steps.get(e.step);
    const bad = (msg: string) => add("event-order", id, `${where(e)}: ${msg}`, e.time_ms);
    switch (e.type) {
      case "StepScheduled": {
        if (st && !(st.status === "backoff" && e.attempt === st.attempt + 1)) {
          bad(`scheduled again while the step is ${st.status} at attempt ${st.attempt}`);
        } else if (!st && e.attempt !== 1) {
          bad("first schedule of the step is not attempt 1");
        }
        if (st && st.key !== e.idempotency_key) {
          bad(`idempotency key changed from ${st.key} to ${e.idempotency_key}`);
        }
        steps.set(e.step, {
          kind: e.kind === "http" ? "http" : "task",
          attempt: e.attempt,
          key: e.idempotency_key,
          status: "scheduled",
          uncertain: false,
          tokens: st?.tokens ?? new Map(),
          succeeded: st?.succeeded ?? 0,
          succeededSeq: st?.succeededSeq ?? null,
        });
        break;
      }
      case "StepStarted":
        if (st) bad(`started while the step is ${st.status}`);
        steps.set(e.step, {
          kind: "started",
          attempt: e.attempt,
          key: null,
          status: "open",
          uncertain: false,
          tokens: new Map(),
          succeeded: 0,
          succeededSeq: null,
        });
        break;
      case "StepDispatched": {
        if (!st || st.kind === "started") {
          bad("dispatched without a schedule");
          break;
        }
        if (st.status !== "scheduled") bad(`dispatched while ${st.status}`);
        if (st.attempt !== e.attempt) {
          bad(`dispatched attempt ${e.attempt}, scheduled ${st.attempt}`);
        }
        if (st.tokens.has(e.token) || dispatched.has(e.token)) {
          bad(`token ${e.token} dispatched twice`);
        }
        if ((e.redelivery === true) !== st.uncertain) {
          bad(
            `redelivery ${e.redelivery === true} but an uncertain attempt before: ${st.uncertain}`,
          );
        }
        st.tokens.set(e.token, {
          uncertain: false,
          redelivery: e.redelivery === true,
          attempt: e.attempt,
        });
        dispatched.set(e.token, {
          step: e.step,
          attempt: e.attempt,
          redelivery: e.redelivery === true,
          key: st.key,
          uncertainBefore: st.uncertain,
        });
        st.status = "dispatched";
        break;
      }
      case "StepAttemptUncertain": {
        const t = st?.tokens.get(e.token);
        if (!st || !t) {
          bad(`uncertain for a token never dispatched (${e.token})`);
          break;
        }
        if (st.status !== "dispatched") bad(`uncertain while ${st.status}`);
        if (t.uncertain) bad(`token ${e.token} reported uncertain twice`);
        if (t.attempt !== e.attempt || st.attempt !== e.attempt) {
          bad("uncertain for another attempt");
        }
        t.uncertain = true;
        st.uncertain = true;
        st.status = "scheduled";
        break;
      }
      case "StepSucceeded":
      case "StepFailed": {
        if (!st) {
          // A step that runs in the engine alone (assign, return) may finish without a start.
          if (e.type === "StepSucceeded") {
            steps.set(e.step, {
              kind: "started",
              attempt: e.attempt,
              key: null,
              status: "succeeded",
              uncertain: false,
              tokens: new Map(),
              succeeded: 1,
              succeededSeq: e.seq,
            });
          }
          break;
        }
        const open = st.status === "scheduled" || st.status === "dispatched" ||
          st.status === "open";
        if (!open) bad(`a result while the step is ${st.status} (a result applied twice?)`);
        if (st.attempt !== e.attempt) bad(`result for attempt ${e.attempt}, current ${st.attempt}`);
        if (e.token) {
          const t = st.tokens.get(e.token);
          if (!t) bad(`result by token ${e.token}, never dispatched for this step`);
          else if (t.attempt !== e.attempt) bad(`result by a token of attempt ${t.attempt}`);
        }
        if (e.type === "StepSucceeded") {
          st.succeeded++;
          st.succeededSeq = e.seq;
          if (st.succeeded > 1) {
            add(
              "one-success",
              id,
              `${where(e)}: StepSucceeded number ${st.succeeded} for step ${e.step}`,
              e.time_ms,
            );
          }
          st.status = "succeeded";
        } else {
          st.status = e.will_retry ? "backoff" : "failed";
        }
        st.uncertain = false;
        break;
      }
      case "StepCancelled":
        if (st) st.status = "cancelled";
        break;
    }
  }
  // Compensations: only completed steps, in reverse order of completion.
  for (const c of compensations) {
    // The event names the compensation steps (`<step>.compensate`).
    const listed: string[] = (c.steps ?? []).map((s: string) =>
      s.endsWith(".compensate") ? s.slice(0, -".compensate".length) : s
    );
    for (const s of listed) {
      const st = steps.get(s);
      if (!st || st.succeededSeq === null || st.succeededSeq > c.seq) {
        add(
          "compensation",
          id,
          `run ${runId}: CompensationStarted seq ${c.seq} lists ${s}, which had not completed`,
          c.time_ms,
        );
      }
    }
    const expected = listed.filter((s) => steps.get(s)?.succeededSeq != null)
      .sort((a, b) => steps.get(b)!.succeededSeq! - steps.get(a)!.succeededSeq!);
    const scheduled = run.filter((e) =>
      e.type === "StepScheduled" && e.seq > c.seq && e.attempt === 1 &&
      e.step.endsWith(".compensate")
    ).map((e) => e.step.slice(0, -".compensate".length));
    const compensable = expected.filter((s) => scheduled.includes(s));
    if (scheduled.join(",") !== compensable.join(",")) {
      add(
        "compensation",
        id,
        `run ${runId}: compensations scheduled for [${
          scheduled.join(", ")
        }], expected the reverse completion order [${expected.join(", ")}]`,
        c.time_ms,
      );
    }
  }
}
