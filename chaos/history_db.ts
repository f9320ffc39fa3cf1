/**
 * Reads what the checker needs straight from the database (SQLite file or PostgreSQL), not
 * through a server: the executions whose ids start with the run's tag, every event of their
 * runs, the run's schedule, and the standby cluster row. An attached run without a database
 * URL reads the same through the HTTP API instead (`readSnapshotHttp`).
 */
import postgres from "postgres";
import { DatabaseSync } from "node:sqlite";
import { retry } from "./http.ts";

export interface ExecRow {
  execution_id: string;
  run_id: string;
  workflow: string;
  status: string;
  /** Read from the database (not through the API): the row's output, error and last_seq. */
  output?: unknown;
  error?: unknown;
  last_seq?: number;
}

// deno-lint-ignore no-explicit-any
export type Event = Record<string, any> & { seq: number; type: string; run_id: string };

export interface ScheduleRow {
  schedule_id: string;
  fired: number;
  skipped: number;
  created_ms: number;
  paused: boolean;
}

export interface Snapshot {
  executions: ExecRow[];
  /** Events by execution id, ordered by run then seq (runs in order of their first event). */
  events: Map<string, Event[]>;
  schedules: ScheduleRow[];
  cluster: { term: number; leader_node: string | null } | null;
}

const isPg = (db: string) => /^postgres(ql)?:\/\//.test(db);

export async function readSnapshot(db: string, tag: string): Promise<Snapshot> {
  const like = `${tag}%`;
  let executions: ExecRow[];
  let raw: { execution_id: string; run_id: string; seq: number; data: unknown }[];
  let schedules: ScheduleRow[];
  let cluster: Snapshot["cluster"] = null;
  if (isPg(db)) {
    const sql = postgres(db, { max: 1, onnotice: () => {} });
    try {
      executions = await sql.unsafe<ExecRow[]>(
        `SELECT execution_id, run_id, workflow, status, output, error, last_seq::int AS last_seq
           FROM workflow_executions WHERE execution_id LIKE $1`,
        [like],
      );
      raw = await sql.unsafe<typeof raw>(
        `SELECT execution_id, run_id, seq::int AS seq, data FROM execution_events
          WHERE execution_id LIKE $1 ORDER BY execution_id, time_ms, run_id, seq`,
        [like],
      );
      schedules = (await sql.unsafe(
        `SELECT schedule_id, fired::int AS fired, skipped::int AS skipped,
                created_ms::float8 AS created_ms, paused FROM orbit_schedules
          WHERE schedule_id LIKE $1`,
        [like],
      )) as unknown as ScheduleRow[];
      const c = await sql.unsafe(`SELECT term::int AS term, leader_node FROM orbit_cluster`);
      cluster = (c[0] as unknown as Snapshot["cluster"]) ?? null;
    } finally {
      await sql.end({ timeout: 5 });
    }
  } else {
    const d = new DatabaseSync(db, { readOnly: true });
    try {
      executions = (d.prepare(
        `SELECT execution_id, run_id, workflow, status, output, error, last_seq
           FROM workflow_executions WHERE execution_id LIKE ?`,
      ).all(like) as unknown as ExecRow[]).map((r) => ({
        ...r,
        output: typeof r.output === "string" ? JSON.parse(r.output) : r.output,
        error: typeof r.error === "string" ? JSON.parse(r.error) : r.error,
        last_seq: Number(r.last_seq),
      }));
      raw = d.prepare(
        `SELECT execution_id, run_id, seq, data FROM execution_events
          WHERE execution_id LIKE ? ORDER BY execution_id, time_ms, run_id, seq`,
      ).all(like) as unknown as typeof raw;
      schedules = (d.prepare(
        `SELECT schedule_id, fired, skipped, created_ms, paused FROM orbit_schedules
          WHERE schedule_id LIKE ?`,
      ).all(like) as unknown as ScheduleRow[]).map((s) => ({ ...s, paused: Boolean(s.paused) }));
    } finally {
      d.close();
    }
  }
  // Group by execution, then by run (runs in the order their first event was written).
  const byRun = new Map<string, Map<string, Event[]>>();
  for (const r of raw) {
    const data = typeof r.data === "string" ? JSON.parse(r.data) : r.data;
    let runs = byRun.get(r.execution_id);
    if (!runs) byRun.set(r.execution_id, runs = new Map());
    let list = runs.get(r.run_id);
    if (!list) runs.set(r.run_id, list = []);
    list.push({ ...(data as object), seq: Number(r.seq), run_id: r.run_id } as Event);
  }
  const events = new Map<string, Event[]>();
  for (const [id, runs] of byRun) {
    const all: Event[] = [];
    for (const list of runs.values()) all.push(...list.sort((a, b) => a.seq - b.seq));
    events.set(id, all);
  }
  return { executions, events, schedules, cluster };
}

/**
 * Attach mode without a database URL: the same snapshot read through the HTTP API (with the
 * driver's token), for the executions the run started (`ids`) and the schedule's occurrences
 * (`<schedule_id>@…`, found by listing the schedule's workflow). Each execution's current run
 * is read whole (the chaos workflows never continue as new); a request that fails is repeated
 * until `deadline`.
 */
export async function readSnapshotHttp(
  base: string,
  ids: string[],
  schedule: { schedule_id: string; workflow: string } | null,
  deadline: number,
): Promise<Snapshot> {
  const get = async (path: string) => {
    const r = await retry(() => base, "GET", path, undefined, deadline);
    if (r.status !== 200 && r.status !== 404) {
      throw new Error(`GET ${path}: ${r.status} ${JSON.stringify(r.body).slice(0, 300)}`);
    }
    return r;
  };
  const all = new Set(ids);
  const schedules: ScheduleRow[] = [];
  if (schedule) {
    let cursor: string | null = null;
    do {
      const q: string = `/v1/executions?workflow=${encodeURIComponent(schedule.workflow)}` +
        `&limit=1000${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`;
      const page = (await get(q)).body;
      for (const e of page?.executions ?? []) {
        if (e.execution_id.startsWith(`${schedule.schedule_id}@`)) all.add(e.execution_id);
      }
      cursor = page?.next_cursor ?? null;
    } while (cursor);
    const s = await get(`/v1/schedules/${encodeURIComponent(schedule.schedule_id)}`);
    if (s.status === 200) {
      const b = s.body;
      schedules.push({
        schedule_id: b.schedule_id,
        fired: Number(b.fired ?? 0),
        skipped: Number(b.skipped ?? 0),
        created_ms: Number(b.created_ms),
        paused: b.paused === true,
      });
    }
  }
  const executions: ExecRow[] = [];
  const events = new Map<string, Event[]>();
  const queue = [...all];
  const reader = async () => {
    for (let id = queue.shift(); id !== undefined; id = queue.shift()) {
      const path = `/v1/executions/${encodeURIComponent(id)}`;
      const row = await get(path);
      if (row.status === 404) continue; // a start that never landed
      const { execution_id, run_id, workflow, status } = row.body;
      const list: Event[] = [];
      for (let after = 0;;) {
        const page = (await get(`${path}/history?run_id=${run_id}&after_seq=${after}&limit=1000`))
          .body;
        for (const e of page?.events ?? []) list.push({ ...e, run_id } as Event);
        if (page?.next_after_seq === undefined) break;
        after = page.next_after_seq;
      }
      executions.push({ execution_id, run_id, workflow, status });
      events.set(execution_id, list);
    }
  };
  await Promise.all(Array.from({ length: 8 }, reader));
  return { executions, events, schedules, cluster: null };
}
