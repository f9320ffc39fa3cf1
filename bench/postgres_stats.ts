/**
 * Where PostgreSQL's time goes in a benchmark run: the CPU of its processes grouped by the role
 * of the connection (`application_name` up to the colon: `orbit-store`, `orbit-requests`,
 * `orbit-listen`, `orbit-heartbeat` in shared mode, `orbit` for a single server; `background`
 * for PostgreSQL's own processes), and with `--pg-statements` the statements from
 * `pg_stat_statements` (the harness's PostgreSQL then loads the extension), both per order.
 */
import postgres from "postgres";

/** PostgreSQL's settings for `--pg-statements` (ORBIT_TEST_PG_OPTIONS, tests/support/pg.ts). */
export const PG_STATEMENTS_OPTIONS = "-c shared_preload_libraries=pg_stat_statements";

export interface StatementCost {
  /** The statement's first words, whitespace collapsed; variants with the same start summed. */
  statement: string;
  calls_per_order: number;
  /** Mean execution time of one call inside PostgreSQL (planning, parsing and commit not included). */
  ms_per_call: number;
  ms_per_order: number;
  /** WAL the statement wrote per call (its records, full-page images included), in KB. */
  wal_kb_per_call: number;
}

interface Backend {
  role: string;
  cpu: number;
}

const round = (x: number, digits: number) => Math.round(x * 10 ** digits) / 10 ** digits;

/** User + system CPU seconds of a process, or NaN once it is gone. */
function processCpu(pid: number): number {
  try {
    const f = Deno.readTextFileSync(`/proc/${pid}/stat`).split(") ")[1]!.split(" ");
    return (Number(f[11]) + Number(f[12])) / 100;
  } catch {
    return NaN;
  }
}

export class PostgresStats {
  readonly #sql: postgres.Sql;
  readonly #statements: boolean;
  #before = new Map<number, Backend>();
  #walBefore = "0/0";

  constructor(url: string, opts: { statements: boolean }) {
    this.#sql = postgres(url, {
      max: 1,
      onnotice: () => {},
      connection: { application_name: "bench" },
    });
    this.#statements = opts.statements;
  }

  async #backends(): Promise<Map<number, Backend>> {
    const rows = await this.#sql<{ pid: number; name: string; type: string }[]>`
      SELECT pid, application_name AS name, backend_type AS type FROM pg_stat_activity
      WHERE pid <> pg_backend_pid()`;
    const out = new Map<number, Backend>();
    for (const r of rows) {
      const role = r.type !== "client backend" ? "background" : r.name.split(":")[0] || "other";
      const cpu = processCpu(r.pid);
      if (!Number.isNaN(cpu)) out.set(r.pid, { role, cpu });
    }
    return out;
  }

  /** Marks the start of the measured run (and clears the statement counters). */
  async start(): Promise<void> {
    if (this.#statements) {
      await this.#sql`CREATE EXTENSION IF NOT EXISTS pg_stat_statements`;
      await this.#sql`SELECT pg_stat_statements_reset()`;
    }
    this.#before = await this.#backends();
    const [w] = await this.#sql<{ lsn: string }[]>`SELECT pg_current_wal_lsn()::text AS lsn`;
    this.#walBefore = w!.lsn;
  }

  /**
   * CPU milliseconds per order by role since start() (a connection opened since counts whole;
   * one closed since is not counted), and the statements by execution time.
   */
  async finish(orders: number): Promise<{
    byRole: Record<string, number>;
    statements: StatementCost[] | null;
    statementsPerOrder: number | null;
    walKbPerOrder: number;
  }> {
    const after = await this.#backends();
    const [w] = await this.#sql<{ bytes: string }[]>`
      SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), ${this.#walBefore}::pg_lsn)::text AS bytes`;
    const walKbPerOrder = round(Number(w!.bytes) / 1024 / orders, 2);
    if (Deno.env.get("ORBIT_BENCH_WAL_STATS")) {
      await this.#sql`CREATE EXTENSION IF NOT EXISTS pg_walinspect`;
      const recs = await this.#sql<{ rec: string; n: string; bytes: string; fpi: string }[]>`
        SELECT "resource_manager/record_type" AS rec, count::text AS n,
          combined_size::text AS bytes, fpi_size::text AS fpi
        FROM pg_get_wal_stats(${this.#walBefore}::pg_lsn, pg_current_wal_lsn(), true)
        WHERE count > 0 ORDER BY combined_size DESC LIMIT 25`;
      for (const r of recs) {
        console.log(
          `  WAL ${r.rec.padEnd(28)} ${(Number(r.n) / orders).toFixed(2)}/order ${
            (Number(r.bytes) / 1024 / orders).toFixed(2)
          } KB/order (fpi ${(Number(r.fpi) / 1024 / orders).toFixed(2)})`,
        );
      }
    }
    const byRole: Record<string, number> = {};
    for (const [pid, b] of after) {
      const cpu = b.cpu - (this.#before.get(pid)?.cpu ?? 0);
      byRole[b.role] = (byRole[b.role] ?? 0) + cpu;
    }
    for (const k of Object.keys(byRole)) byRole[k] = round((byRole[k]! * 1000) / orders, 2);
    let statements: StatementCost[] | null = null;
    let statementsPerOrder: number | null = null;
    if (this.#statements) {
      const rows = await this.#sql<{ query: string; calls: number; ms: number; wal: number }[]>`
        SELECT query, calls::float8 AS calls, total_exec_time AS ms, wal_bytes::float8 AS wal
        FROM pg_stat_statements
        WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND query NOT LIKE '%pg_stat_statements%' AND query NOT LIKE '%pg_stat_activity%'`;
      const by = new Map<string, { calls: number; ms: number; wal: number }>();
      for (const r of rows) {
        const key = r.query.replace(/\s+/g, " ").trim().slice(0, 72);
        const s = by.get(key) ?? { calls: 0, ms: 0, wal: 0 };
        s.calls += Number(r.calls);
        s.ms += Number(r.ms);
        s.wal += Number(r.wal);
        by.set(key, s);
      }
      statementsPerOrder = round([...by.values()].reduce((n, s) => n + s.calls, 0) / orders, 2);
      statements = [...by].sort((a, b) => b[1].ms - a[1].ms).slice(0, 12).map(([k, s]) => ({
        statement: k,
        calls_per_order: round(s.calls / orders, 3),
        ms_per_call: round(s.ms / Math.max(1, s.calls), 3),
        ms_per_order: round(s.ms / orders, 3),
        wal_kb_per_call: round(s.wal / 1024 / Math.max(1, s.calls), 2),
      }));
    }
    return { byRole, statements, statementsPerOrder, walKbPerOrder };
  }

  async close(): Promise<void> {
    await this.#sql.end({ timeout: 5 });
  }
}
