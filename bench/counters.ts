/**
 * The counters of a server's /v1/metrics the benchmark reads before and after a run (summed over
 * the servers of a cluster by bench/throughput.ts).
 */
import type { api } from "../tests/support/server.ts";

/** Counters of the server's /v1/metrics this benchmark reads. */
export async function serverCounters(c: ReturnType<typeof api>) {
  const r = await c.call("GET", "/v1/metrics");
  const text = String(r.body);
  const read = (name: string) =>
    Number(text.match(new RegExp(`^${name} (\\S+)$`, "m"))?.[1] ?? NaN);
  /** A counter summed over its labels (0 when it has none yet). */
  const sum = (name: string) =>
    [...text.matchAll(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, "gm"))]
      .reduce((n, m) => n + Number(m[1]), 0);
  return {
    forwards: sum("orbit_commands_forwarded_total"),
    claims: sum("orbit_task_claims_total"),
    refusedTakes: sum("orbit_task_takes_refused_total"),
    notifications: sum("orbit_notifications_sent_total"),
    requests: sum("orbit_http_requests_total"),
    commits: read("orbit_commits_total"),
    events: read("orbit_events_appended_total"),
    commitSeconds: read("orbit_append_latency_seconds_sum"),
  };
}
