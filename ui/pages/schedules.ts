/// <reference lib="dom" />
/** Schedules: timing, next fire, fired and skipped counts; pause, resume, trigger. */
import { enc, get, post } from "../api.ts";
import { ActionButton, ErrorBox, html, relative, Time, useLoad } from "../ui.ts";

interface Schedule {
  schedule_id: string;
  workflow: string;
  version?: string;
  every_s?: number;
  cron?: string;
  timezone?: string;
  overlap: string;
  paused: boolean;
  next_fire_ms: number | null;
  fired: number;
  skipped: number;
  last_execution_id: string | null;
}

export function SchedulesPage() {
  const list = useLoad(() => get<{ schedules: Schedule[] }>("/v1/schedules"), [], 5000);
  const act = (id: string, what: "pause" | "resume" | "trigger") => async () => {
    await post(`/v1/schedules/${enc(id)}/${what}`, {});
    await list.reload();
  };
  const rows = list.data?.schedules ?? [];
  return html`
    <h1>Schedules</h1>
    <${ErrorBox} error=${list.error} />
    <div class="table-scroll">
      <table class="list">
        <thead>
          <tr>
            <th>Schedule</th>
            <th>Workflow</th>
            <th>When</th>
            <th>Overlap</th>
            <th>Next fire</th>
            <th>Fired</th>
            <th>Skipped</th>
            <th>Last execution</th>
            <th>Actions</th>
          </tr>
        </thead>
        <tbody>
            ${rows.map((s) =>
              html`
                <tr key=${s.schedule_id} data-schedule=${s.schedule_id}>
                  <td class="id">${s.schedule_id}</td>
                  <td><a href=${`/workflows/${enc(s.workflow)}`}>${s.workflow}</a>
                              ${s.version
                                ? html`
                                  <span class="muted">${s.version}</span>
                                `
                                : null}</td>
                  <td>${s.cron
                    ? html`<code>${s.cron}</code> ${s.timezone ?? ""}`
                    : `every ${s.every_s} s`}</td>
                  <td>${s.overlap}</td>
                  <td>${s.paused
                    ? html`<span class="status s-paused">paused</span>`
                    : html`<${Time} ms=${s.next_fire_ms} />${
                      s.next_fire_ms
                        ? html`
                          <span class="muted small">(${relative(s.next_fire_ms)})</span>
                        `
                        : null
                    }`}</td>
                  <td>${s.fired}</td>
                  <td>${s.skipped}</td>
                  <td>${s.last_execution_id
                    ? html`<a href=${`/executions/${
                      enc(s.last_execution_id)
                    }`}>${s.last_execution_id}</a>`
                    : html`<span class="muted">–</span>`}</td>
                  <td class="row-actions">
                              ${s.paused
                                ? html`<${ActionButton} label="Resume" run=${
                                  act(s.schedule_id, "resume")
                                } />`
                                : html`<${ActionButton} label="Pause" run=${
                                  act(s.schedule_id, "pause")
                                } />`}
                              <${ActionButton} label="Trigger now" run=${act(
                                s.schedule_id,
                                "trigger",
                              )} />
                            </td>
                </tr>
              `
            )}
            ${!list.loading && rows.length === 0
              ? html`
                <tr>
                  <td colspan="9" class="muted">No schedules (<code>orbit schedules create</code>).</td>
                </tr>
              `
              : null}
          </tbody>
      </table>
    </div>
  `;
}
