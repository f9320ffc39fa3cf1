/// <reference lib="dom" />
/**
 * Cluster and metrics: this server's role, term and leader (standby mode) or the nodes
 * (shared mode) from /v1/health, and a few key counters read from /v1/metrics.
 */
import { get, metricsText } from "../api.ts";
import { ErrorBox, html, useLoad } from "../ui.ts";

interface Health {
  status: string;
  runtime_version: string;
  api_version: string;
  active_executions: number;
  worker_sessions: number;
  role: string;
  node_id: string | null;
  term: number | null;
  leader: { node_id: string; addr: string | null } | null;
  /** Shared mode: executions this node owns, tasks it claimed. */
  owned_executions?: number;
  tasks_claimed?: number;
  nodes?: Array<{
    node_id: string;
    addr: string | null;
    live: boolean;
    heartbeat_age_ms: number;
    owned_executions: number;
  }>;
}

const KEY_METRICS: Array<[string, string]> = [
  ["orbit_executions_started_total", "Executions started"],
  ["orbit_executions_closed_total", "Executions closed"],
  ["orbit_tasks_dispatched_total", "Tasks dispatched"],
  ["orbit_tasks_succeeded_total", "Tasks succeeded"],
  ["orbit_tasks_failed_total", "Tasks failed"],
  ["orbit_tasks_redelivered_total", "Tasks redelivered"],
  ["orbit_schedules_fired_total", "Schedule occurrences fired"],
  ["orbit_events_appended_total", "Events appended"],
  ["orbit_commits_total", "Commits"],
];

/** Sums every series of each metric (labels folded together). */
export function parseMetrics(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    out.set(m[1]!, (out.get(m[1]!) ?? 0) + Number(m[3]));
  }
  return out;
}

export function ClusterPage() {
  const health = useLoad(() => get<Health>("/v1/health"), [], 3000);
  const metrics = useLoad(async () => parseMetrics(await metricsText()), [], 5000);
  const h = health.data;
  const m = metrics.data;
  const avg = (name: string) => {
    const sum = m?.get(`${name}_sum`), count = m?.get(`${name}_count`);
    return sum !== undefined && count ? `${((sum / count) * 1000).toFixed(1)} ms` : "–";
  };
  return html`<h1>Cluster</h1>
    <${ErrorBox} error=${health.error} />
    ${
    h
      ? html`
        <dl class="facts">
          <dt>Role</dt>
          <dd><span class="status s-${h.role}">${h.role}</span></dd>
          <dt>Node</dt>
          <dd>${h.node_id ?? html`<span class="muted">– (no --cluster)</span>`}</dd>
          <dt>Term</dt>
          <dd>${h.term ?? "–"}</dd>
          <dt>Leader</dt>
          <dd>${h.leader
            ? html`${h.leader.node_id} <span class="muted">${h.leader.addr ?? ""}</span>`
            : "–"}</dd>
          <dt>Active executions</dt>
          <dd>${h.active_executions}</dd>
          <dt>Worker sessions</dt>
          <dd>${h.worker_sessions}</dd>
          ${h.owned_executions !== undefined
            ? html`
              <dt>Owned executions</dt>
              <dd>${h.owned_executions}</dd>
            `
            : null}
          ${h.tasks_claimed !== undefined
            ? html`
              <dt>Tasks claimed</dt>
              <dd>${h.tasks_claimed}</dd>
            `
            : null}
          <dt>Version</dt>
          <dd>${h.runtime_version} <span class="muted">(${h.api_version})</span></dd>
        </dl>
      `
      : null
  }
    ${
    h?.nodes
      ? html`
        <h2>Nodes</h2>
        <div class="table-scroll">
          <table class="list">
            <thead>
              <tr>
                <th>Node</th>
                <th>Address</th>
                <th>Live</th>
                <th>Heartbeat age</th>
                <th>Owned executions</th>
              </tr>
            </thead>
            <tbody>${h.nodes.map((n) =>
              html`
                <tr key=${n.node_id}>
                  <td>${n.node_id}</td>
                  <td>${n.addr ?? "–"}</td>
                  <td>${n.live ? "live" : html`<span class="status s-failed">dead</span>`}</td>
                  <td>${n.heartbeat_age_ms} ms</td>
                  <td>${n.owned_executions}</td>
                </tr>
              `
            )}</tbody>
          </table>
        </div>
      `
      : null
  }
    <h2>Metrics</h2>
    <${ErrorBox} error=${metrics.error} />
    <div class="cards">
      ${
    KEY_METRICS.map(([name, label]) =>
      html`
        <div class="card">
          <div class="muted small">${label}</div>
          <div class="big">${m?.get(name) ?? "–"}</div>
        </div>
      `
    )
  }
      <div class="card"><div class="muted small">Average commit</div>
        <div class="big">${avg("orbit_append_latency_seconds")}</div></div>
      <div class="card"><div class="muted small">Average poll</div>
        <div class="big">${avg("orbit_poll_latency_seconds")}</div></div>
    </div>`;
}
