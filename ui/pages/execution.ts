/// <reference lib="dom" />
/**
 * One execution (`/executions/{id}`): what it is, why it waits (the pending reasons), the
 * timeline of its steps, its history with every payload expandable, and the actions:
 * signal, cancel, queries evaluated on demand. Refreshes itself while it runs.
 */
import { useRef, useState } from "preact/hooks";
import {
  type Definition,
  enc,
  type Execution,
  get,
  type HistoryEvent,
  type Pending,
  post,
} from "../api.ts";
import { ActionButton, ErrorBox, html, Json, short, Status, Time, useLoad } from "../ui.ts";
import { dateTime, duration, relative } from "../ui.ts";
import { Timeline } from "./timeline.ts";

/** The events of one run after `after` (every page). */
async function historyAfter(id: string, runId: string, after: number): Promise<HistoryEvent[]> {
  const events: HistoryEvent[] = [];
  for (;;) {
    const page = await get<{ events: HistoryEvent[]; next_after_seq?: number }>(
      `/v1/executions/${enc(id)}/history?run_id=${enc(runId)}&after_seq=${after}`,
    );
    events.push(...page.events);
    if (!page.next_after_seq || page.events.length === 0) return events;
    after = page.next_after_seq;
  }
}

interface Loaded {
  execution: Execution;
  events: HistoryEvent[];
  pending: Pending | null;
  now: number;
}

export function ExecutionPage({ id }: { id: string }) {
  // A closed execution never changes: the timer's refreshes stop asking once it is. While it
  // runs, each refresh reads only the events after the last one seen (of the same run).
  const closed = useRef<Loaded | null>(null);
  const last = useRef<Loaded | null>(null);
  const data = useLoad<Loaded>(
    async () => {
      if (closed.current?.execution.execution_id === id) return closed.current;
      const execution = await get<Execution>(`/v1/executions/${enc(id)}`);
      const prev = last.current?.execution.execution_id === id &&
          last.current.execution.run_id === execution.run_id
        ? last.current.events
        : [];
      const [events, pending] = await Promise.all([
        historyAfter(id, execution.run_id, prev.at(-1)?.seq ?? 0).then((more) => [
          ...prev,
          ...more,
        ]),
        execution.status === "running"
          ? get<Pending>(`/v1/executions/${enc(id)}/pending`)
          : Promise.resolve(null),
      ]);
      const loaded = { execution, events, pending, now: Date.now() };
      last.current = loaded;
      if (execution.status !== "running") closed.current = loaded;
      return loaded;
    },
    [id],
    2000,
  );
  const x = data.data?.execution;
  const def = useLoad(
    () =>
      x
        ? get<Definition>(`/v1/workflows/${enc(x.workflow)}/${enc(x.version)}`)
        : Promise.resolve(null),
    [x?.workflow, x?.version],
  );
  if (!x) {
    return html`<h1 class="id">${id}</h1>
      ${
      data.loading ? html`<p class="muted">Loading…</p>` : html`<${ErrorBox} error=${data.error} />`
    }`;
  }
  const { events, pending, now } = data.data!;
  const running = x.status === "running";
  const doc = def.data?.document;
  return html`
    <h1><span class="id">${x.execution_id}</span> <${Status} status=${x.status} /></h1>
    <${ErrorBox} error=${data.error} />
    <dl class="facts">
      <dt>Workflow</dt><dd><a href=${`/workflows/${enc(x.workflow)}/${enc(x.version)}`}>${x
        .workflow}</a> ${x.version}</dd>
      <dt>Run</dt><dd><code>${x.run_id}</code></dd>
      ${x.parent_id
        ? html`
          <dt>Parent</dt>
          <dd><a href=${`/executions/${enc(x.parent_id)}`}>${x.parent_id}</a></dd>
        `
        : null}
      <dt>Created</dt><dd><${Time} ms=${x.created_ms} /></dd>
      <dt>Closed</dt><dd><${Time} ms=${x.closed_ms} />${x.closed_ms
        ? html`
          <span class="muted">(took ${duration(x.closed_ms - x.created_ms)})</span>
        `
        : null}</dd>
    </dl>
    ${x.error
      ? html`<div class="error"><code class="code">${x.error.code ?? "ERROR"}</code> ${
        x.error.message ?? short(x.error)
      }</div>`
      : null}
    <details>
      <summary>Input</summary>
      <${Json} value=${x.input} />
    </details>
    ${x.output !== null && x.output !== undefined
      ? html`
        <details open>
          <summary>Output</summary>
          <${Json} value=${x.output} />
        </details>
      `
      : null}
    ${running && pending ? html`<${PendingList} pending=${pending} now=${now} />` : null}
    ${running
      ? html`
        <section aria-labelledby="actions-h">
          <h2 id="actions-h">Actions</h2>
          <div class="actions">
            ${doc && !doc.signals
              ? html`<span class="muted">${doc.ir} declares no signals.</span>`
              : html`
                <${SignalForm} id=${x.execution_id} signals=${Object.keys(doc?.signals ?? {})}
                  done=${data.reload} />
              `}
            <${ActionButton} label="Cancel execution" className="danger"
              confirm=${`Cancel execution ${x.execution_id}? Its compensations run.`}
              run=${async () => {
                await post(`/v1/executions/${enc(x.execution_id)}/cancel`, {
                  reason: "cancelled from the console",
                });
                await data.reload();
              }} />
          </div>
        </section>
      `
      : null}
    ${Object.keys(doc?.queries ?? {}).length > 0
      ? html`<${Queries} id=${x.execution_id} names=${Object.keys(doc!.queries!)} />`
      : null}

    <section aria-labelledby="timeline-h">
      <h2 id="timeline-h">Timeline</h2>
      <${Timeline} events=${events} now=${now} />
    </section>
    <section aria-labelledby="history-h">
      <h2 id="history-h">History <span class="muted">(${events.length} events)</span></h2>
      <${HistoryTable} events=${events} now=${now} />
    </section>
  `;
}

function PendingList({ pending, now }: { pending: Pending; now: number }) {
  return html`<section aria-labelledby="pending-h" class="pending">
    <h2 id="pending-h">Why is it waiting?</h2>
    ${
    pending.pending.length === 0
      ? html`<p class="muted">Nothing is pending right now.</p>`
      : html`<ul>
        ${
        pending.pending.map((p) =>
          html`<li key=${p.step}>
            <span class=${`reason r-${p.reason}`}>${p.reason}</span>
            <strong class="step">${p.step}</strong>
            ${
            p.attempt > 1
              ? html`
                <span class="muted">attempt ${p.attempt}</span>
              `
              : null
          }
            <div>${p.message}</div>
                ${
            typeof p.child_execution_id === "string"
              ? html`<div class="small">child: <a href=${`/executions/${
                enc(p.child_execution_id)
              }`}>${p.child_execution_id}</a></div>`
              : null
          }
            ${
            p.since_ms !== null
              ? html`<div class="muted small">since <${Time} ms=${p.since_ms} /> (${
                relative(p.since_ms, now)
              })</div>`
              : null
          }
          </li>`
        )
      }
      </ul>`
  }
    ${
    pending.timeout_at_ms
      ? html`<p class="muted small">The workflow times out at <${Time} ms=${pending.timeout_at_ms} />.</p>`
      : null
  }
  </section>`;
}

function SignalForm(
  { id, signals, done }: { id: string; signals: string[]; done: () => Promise<void> },
) {
  const [name, setName] = useState("");
  const [payload, setPayload] = useState("");
  const [result, setResult] = useState<string | null>(null);
  const [error, setError] = useState<unknown>(null);
  const chosen = name || signals[0] || "";
  const send = async (e: Event) => {
    e.preventDefault();
    setError(null);
    setResult(null);
    try {
      const body = payload.trim() ? { payload: JSON.parse(payload) } : {};
      const r = await post<{ seq: number }>(
        `/v1/executions/${enc(id)}/signals/${enc(chosen)}`,
        body,
      );
      setResult(`signal ${chosen} recorded as event ${r.seq}`);
      await done();
    } catch (err) {
      setError(err);
    }
  };
  return html`<form class="signal" onSubmit=${send} aria-label="Send a signal">
    <label>Signal
      ${
    signals.length > 0
      ? html`
        <select name="signal" value=${chosen}
          onChange=${(e: Event) => setName((e.target as HTMLSelectElement).value)}>
                    ${signals.map((s) => html`<option value=${s}>${s}</option>`)}</select>
      `
      : html`
        <input name="signal" required value=${name}
          onInput=${(e: Event) => setName((e.target as HTMLInputElement).value)} />
      `
  }
    </label>
    <label>Payload (JSON)
      <textarea name="payload" rows="2" placeholder='{"approved": true}' value=${payload}
        onInput=${(e: Event) => setPayload((e.target as HTMLTextAreaElement).value)}></textarea>
    </label>
    <button type="submit" disabled=${!chosen}>Send signal</button>
    ${result ? html`<span class="ok" role="status">${result}</span>` : null}
    <${ErrorBox} error=${error} />
  </form>`;
}

function Queries({ id, names }: { id: string; names: string[] }) {
  const [results, setResults] = useState<Record<string, { value?: unknown; error?: unknown }>>(
    {},
  );
  const run = async (name: string) => {
    try {
      const r = await get<{ result: unknown }>(
        `/v1/executions/${enc(id)}/queries/${enc(name)}`,
      );
      setResults((s) => ({ ...s, [name]: { value: r.result } }));
    } catch (error) {
      setResults((s) => ({ ...s, [name]: { error } }));
    }
  };
  return html`<section aria-labelledby="queries-h">
    <h2 id="queries-h">Queries</h2>
    ${
    names.map((n) =>
      html`<div class="query" key=${n}>
        <button type="button" onClick=${() => run(n)}>Run ${n}</button>
        ${results[n]?.error ? html`<${ErrorBox} error=${results[n]!.error} />` : null}
        ${results[n] && !results[n]!.error ? html`<${Json} value=${results[n]!.value} />` : null}
      </div>`
    )
  }
  </section>`;
}

/** What an event carries, in a line; the whole event opens below it. */
function detail(e: HistoryEvent, now: number): string {
  const pick = (k: string) => (e[k] !== undefined ? `${k} ${short(e[k], 60)}` : "");
  switch (e.type) {
    case "StepScheduled":
      return `task ${e.task}@${e.contract}` + (e.redelivery ? " (redelivery)" : "");
    case "StepDispatched":
      return `worker ${e.worker_id}`;
    case "StepFailed":
    case "WorkflowFailed":
    case "WorkflowTimedOut": {
      const err = e.error as { code?: string; message?: string } | undefined;
      return `${err?.code}: ${err?.message}` + (e.will_retry ? " (will retry)" : "");
    }
    case "TimerStarted": {
      // The date too: a 24-hour timer's time of day alone reads as today's.
      const at = Number(e.fire_at_ms);
      return `${e.purpose} until ${dateTime(at)} (${relative(at, now)})`;
    }
    case "SignalReceived":
      return `${e.signal} ${short(e.payload, 60)}`;
    default:
      return pick("output") || pick("input") || pick("reason") || pick("kind");
  }
}

function HistoryTable({ events, now }: { events: HistoryEvent[]; now: number }) {
  return html`
    <div class="table-scroll">
      <table class="history">
        <thead>
          <tr>
            <th>Seq</th>
            <th>Time</th>
            <th>Type</th>
            <th>Step</th>
            <th>Detail</th>
          </tr>
        </thead>
        <tbody>
          ${events.map((e) =>
            html`
              <tr key=${e.seq}>
                <td>${e.seq}</td>
                <td>
                  <${Time} ms=${e.time_ms} />
                </td>
                <td class=${`ev ev-${e.type}`}>${e.type}</td>
                <td>${e.step ?? ""}${e.attempt
                  ? html`
                    <span class="muted">#${e.attempt}</span>
                  `
                  : null}</td>
                <td>
                  <details>
                    <summary>${detail(e, now) || "event"}</summary>
                    <${Json} value=${e} />
                  </details>
                </td>
              </tr>
            `
          )}
        </tbody>
      </table>
    </div>
  `;
}
