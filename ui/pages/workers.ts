/// <reference lib="dom" />
/** Worker sessions: who, which tasks, slots in use, last contact. */
import { get } from "../api.ts";
import { ErrorBox, html, relative, Time, useLoad } from "../ui.ts";

interface Worker {
  session_id: string;
  worker_id: string;
  runtime: string;
  tasks: Array<{ name: string; contract: string; language?: string }>;
  concurrency: number;
  created_ms: number;
  last_contact_ms: number;
  in_flight: number;
}

export function WorkersPage() {
  const list = useLoad(() => get<{ workers: Worker[] }>("/v1/workers"), [], 3000);
  const rows = list.data?.workers ?? [];
  const now = Date.now();
  return html`
    <h1>Workers</h1>
    <${ErrorBox} error=${list.error} />
    <div class="table-scroll">
      <table class="list">
        <thead>
          <tr>
            <th>Worker</th>
            <th>Runtime</th>
            <th>Tasks</th>
            <th>In flight</th>
            <th>Last contact</th>
            <th>Registered</th>
            <th>Session</th>
          </tr>
        </thead>
        <tbody>
            ${rows.map((w) =>
              html`
                <tr key=${w.session_id}>
                  <td class="id">${w.worker_id}</td>
                  <td>${w.runtime}</td>
                  <td>${w.tasks.map((t) =>
                    html`
                      <span class="chip">${t.name}@${t.contract}${t.language
                        ? ` (${t.language})`
                        : ""}</span>
                    `
                  )}</td>
                  <td><meter min="0" max=${w.concurrency} value=${w.in_flight}></meter>
                              ${w.in_flight} / ${w.concurrency}</td>
                  <td><${Time} ms=${w.last_contact_ms} /> <span class="muted small">(${relative(
                    w.last_contact_ms,
                    now,
                  )})</span></td>
                  <td>
                    <${Time} ms=${w.created_ms} />
                  </td>
                  <td><code class="small">${w.session_id}</code></td>
                </tr>
              `
            )}
            ${!list.loading && rows.length === 0
              ? html`
                <tr>
                  <td colspan="7" class="muted">No worker is registered.</td>
                </tr>
              `
              : null}
          </tbody>
      </table>
    </div>
  `;
}
