/// <reference lib="dom" />
/**
 * The timeline of an execution, folded from its history: one row per step (compensations,
 * parallel branches and handler runs each on their own row, so what ran at the same time is
 * drawn side by side), one bar segment per attempt (queued, then running), retries as gaps.
 */
import type { HistoryEvent } from "../api.ts";
import { duration, html } from "../ui.ts";

export interface Attempt {
  attempt: number;
  start: number;
  /** When a worker took it (the last dispatch of the attempt). */
  dispatched: number | null;
  end: number | null;
  outcome: "succeeded" | "failed" | "cancelled" | "open";
  worker: string | null;
  redeliveries: number;
  error: string | null;
}

export interface Row {
  step: string;
  /** Task name, or the kind of step that no worker runs. */
  what: string;
  /** Where it runs: `main`, `branch all[1]`, `handler @7`. */
  lane: string;
  compensation: boolean;
  attempts: Attempt[];
}

export function timelineRows(events: HistoryEvent[]): Row[] {
  const rows = new Map<string, Row>();
  const row = (e: HistoryEvent): Row | undefined => rows.get(String(e.step));
  for (const e of events) {
    const step = typeof e.step === "string" ? e.step : null;
    if (step === null) continue;
    const open = (what: string, attempt: number) => {
      let r = rows.get(step);
      if (!r) {
        const frame = typeof e.frame === "string" ? e.frame : "$";
        r = {
          step,
          what,
          lane: step.includes("@")
            ? `handler ${step.slice(step.indexOf("@"))}`
            : frame === "$"
            ? "main"
            : `branch ${frame}`,
          compensation: e.compensation === true,
          attempts: [],
        };
        rows.set(step, r);
      }
      if (!r.attempts.some((a) => a.attempt === attempt)) {
        r.attempts.push({
          attempt,
          start: e.time_ms,
          dispatched: null,
          end: null,
          outcome: "open",
          worker: null,
          redeliveries: 0,
          error: null,
        });
      }
    };
    const current = () => row(e)?.attempts.at(-1);
    const close = (outcome: Attempt["outcome"], error: string | null = null) => {
      const a = current();
      if (a && a.outcome === "open") {
        a.end = e.time_ms;
        a.outcome = outcome;
        a.error = error;
      }
    };
    switch (e.type) {
      case "StepScheduled":
        open(
          e.kind === "http" ? "http" : `${e.task}@${e.contract}`,
          Number(e.attempt ?? 1),
        );
        break;
      case "StepStarted":
        open(String(e.kind) + (e.signal ? ` ${e.signal}` : ""), Number(e.attempt ?? 1));
        break;
      case "VarsAssigned":
        open("assign", Number(e.attempt ?? 1));
        close("succeeded");
        break;
      case "StepDispatched": {
        const a = current();
        if (a) {
          a.dispatched = e.time_ms;
          a.worker = String(e.worker_id);
        }
        break;
      }
      case "StepAttemptUncertain": {
        const a = current();
        if (a) a.redeliveries++;
        break;
      }
      case "StepSucceeded":
        close("succeeded");
        break;
      case "StepFailed": {
        const err = e.error as { code?: string; message?: string } | undefined;
        close("failed", err ? `${err.code}: ${err.message}` : null);
        break;
      }
      case "StepCancelled":
        close("cancelled", String(e.reason ?? ""));
        break;
    }
  }
  return [...rows.values()];
}

export function Timeline(
  { events, now }: { events: HistoryEvent[]; now: number },
) {
  const rows = timelineRows(events);
  if (rows.length === 0) return html`<p class="muted">No steps yet.</p>`;
  const t0 = events[0]?.time_ms ?? now;
  const last = events.at(-1)!;
  const closed = /^Workflow(Completed|Failed|Cancelled|TimedOut|ContinuedAsNew)$/.test(last.type);
  const t1 = Math.max(t0 + 1, closed ? last.time_ms : now);
  const pct = (t: number) => `${((t - t0) / (t1 - t0)) * 100}%`;
  const width = (a: number, b: number) => `${Math.max(0.4, ((b - a) / (t1 - t0)) * 100)}%`;
  return html`
    <div class="table-scroll">
      <table class="timeline">
        <thead>
          <tr>
            <th>Step</th>
            <th>Task or kind</th>
            <th>Attempts, time</th>
            <th class="bars-h">0 <span class="muted">→</span> ${duration(t1 - t0)}</th>
          </tr>
        </thead>
        <tbody>
        ${rows.map((r) => {
          const first = r.attempts[0]!;
          const lastA = r.attempts.at(-1)!;
          const took = (lastA.end ?? now) - first.start;
          const retries = r.attempts.length - 1;
          const redeliveries = r.attempts.reduce((n, a) => n + a.redeliveries, 0);
          return html`
            <tr class=${r.compensation ? "comp" : ""}>
              <th scope="row" class=${r.lane === "main" ? "" : "nested"}><span class="step">${r
                .step}</span>
                          ${r.compensation
                            ? html`
                              <span class="tag">compensation</span>
                            `
                            : null}
                          <div class="muted small">${r.lane}</div></th>
              <td>${r.what}</td>
              <td>${r.attempts.length}${retries > 0
                ? html`
                  <span class="tag">${retries} retr${retries === 1 ? "y" : "ies"}</span>
                `
                : null}
                          ${redeliveries > 0
                            ? html`
                              <span class="tag">${redeliveries} redelivered</span>
                            `
                            : null}
                          <div class="muted small">${duration(took)}${lastA.outcome === "open"
                            ? " so far"
                            : ""}</div></td>
              <td class="bars">
                          ${r.attempts.map((a) => {
                            const end = a.end ?? now;
                            const title = `attempt ${a.attempt}: ${a.outcome}` +
                              (a.worker ? ` on ${a.worker}` : "") + `, ${duration(end - a.start)}` +
                              (a.error ? ` — ${a.error}` : "");
                            return html`
                              <div class=${`bar o-${a.outcome}`} title=${title}
                                style=${{ left: pct(a.start), width: width(a.start, end) }}>
                                                ${a.dispatched !== null
                                                  ? html`<div class="run" style=${{
                                                    left: `${
                                                      ((a.dispatched - a.start) /
                                                        Math.max(1, end - a.start)) * 100
                                                    }%`,
                                                  }}></div>`
                                                  : null}
                                              </div>
                            `;
                          })}
                        </td>
            </tr>
          `;
        })}
      </tbody>
      </table>
    </div>
  `;
}
