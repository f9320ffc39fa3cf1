/**
 * One chaos run: PostgreSQL (started here, or `db` given), the deployment of the mode, the
 * workload, the seeded fault schedule for `seconds`, then the faults stop, everything is
 * healed and settles, and the checker reads the database and the workers' logs.
 *
 * Attach mode (`mode: "attach"`, `attach: URL`) runs against a deployment someone else runs:
 * no server and no PostgreSQL are started; the run deploys its workflows there, starts its own
 * workers behind its worker-link fault proxy, injects only worker and worker-link faults, and
 * reads the history from `db` when given, else through the HTTP API.
 *
 * ```ts
 * import { runChaos } from "./run.ts";
 * const report = await runChaos({ mode: "standby", seconds: 60, seed: 42 });
 * if (report.violations.length > 0) Deno.exit(1);
 * ```
 */
import { type PgServer, startPostgres } from "../tests/support/pg.ts";
import {
  type AppendRecord,
  type Attempt,
  check,
  type CheckResult,
  type FaultRecord,
  formatViolation,
  parseAppendLine,
  type Violation,
} from "./checker.ts";
import { Deployment, type Mode } from "./deployment.ts";
import {
  Driver,
  type DriverStats,
  FLOW_WORKFLOW,
  ORDER_WORKFLOW,
  SCHEDULE_EVERY_S,
  TICK_WORKFLOW,
} from "./driver.ts";
import { call, retry, useToken } from "./http.ts";
import { type FaultProxy, startFaultProxy } from "./fault_proxy.ts";
import { ATTACH_FAULTS, type FaultKind, FaultScheduler, faultsFor } from "./faults.ts";
import { readSnapshot, readSnapshotHttp } from "./history_db.ts";
import { rng } from "./rng.ts";

export interface ChaosOptions {
  mode: Mode | "attach";
  /** Attach mode: the base URL of the deployment to run against. */
  attach?: string;
  /** Attach mode: the bearer token of its API, for the driver and the workers. */
  token?: string;
  seconds: number;
  seed?: number;
  /** Servers in the cluster modes (default 2 for standby, 3 for shared). */
  servers?: number;
  workers?: number;
  /** Python workers (chaos/worker.py) beside them (default 1 when python3 is installed). */
  pythonWorkers?: number;
  /** Concurrent order clients (default 4). */
  clients?: number;
  /**
   * A PostgreSQL URL to use instead of starting one (its database must be ORBIT's or empty);
   * attach mode: where the checker reads the history (a PostgreSQL URL or a SQLite file).
   */
  db?: string;
  /** Only these fault kinds (default: every kind the mode allows). */
  faults?: FaultKind[];
  /**
   * The servers' `--cache-executions` (default: theirs): a small cap makes waiting executions
   * leave memory and load again on whatever reaches them, under the faults.
   */
  cacheExecutions?: number;
  /** Apply `faults` in their order, cycling (default: at random). */
  inOrder?: boolean;
  /** How long to wait for everything to finish after the faults stop (default 180 s). */
  settleSeconds?: number;
  /** Keep the run's directory (logs, SQLite file). */
  keep?: boolean;
  log?: (line: string) => void;
}

export interface ChaosReport {
  mode: Mode | "attach";
  /** Attach mode: the role the deployment's /v1/health answered (single, leader, shared…). */
  role?: string;
  seed: number;
  seconds: number;
  tag: string;
  driver: DriverStats;
  faults: Record<string, number>;
  faultCount: number;
  /** Longest time from a fault to the system serving again (ms). */
  slowestRecoveryMs: number;
  /** Connections the workers opened per link (`entry`, and each server's in shared mode). */
  workerConnections: Record<string, number>;
  check: CheckResult;
  violations: Violation[];
  /** Each violation with its events and the faults around it. */
  details: string[];
  elapsedMs: number;
}

async function readAttempts(files: { worker: string; file: string }[]): Promise<Attempt[]> {
  const out: Attempt[] = [];
  for (const { worker, file } of files) {
    let text = "";
    try {
      text = await Deno.readTextFile(file);
    } catch { /* the worker never ran an attempt */ }
    for (const line of text.split("\n")) {
      if (!line.trim()) continue;
      try {
        out.push({ ...JSON.parse(line), worker });
      } catch { /* a line cut by SIGKILL mid-write: its attempt never reported */ }
    }
  }
  return out;
}

export async function runChaos(o: ChaosOptions): Promise<ChaosReport> {
  const log = o.log ?? ((l: string) => console.log(l));
  const seed = o.seed ?? Math.floor(Math.random() * 2 ** 31);
  const started = Date.now();
  const tag = `chaos-${seed}-${started.toString(36)}`;
  log(
    `chaos: mode=${o.mode} seconds=${o.seconds} seed=${seed} tag=${tag}` +
      (o.cacheExecutions !== undefined ? ` cache-executions=${o.cacheExecutions}` : ""),
  );
  const dir = await Deno.makeTempDir({ prefix: "orbit-chaos-" });
  const attached = o.mode === "attach";
  if (attached && !o.attach) throw new Error("attach mode needs the deployment's URL");
  const bad = attached ? (o.faults ?? []).filter((k) => !ATTACH_FAULTS.includes(k)) : [];
  if (bad.length > 0) throw new Error(`attach mode cannot inject ${bad.join(", ")}`);
  const usesPg = !attached && o.mode !== "single-sqlite";
  let pg: PgServer | null = null;
  let dbLink: FaultProxy | null = null;
  let directDb: string | null = null;
  let serverDb = `${dir}/orbit.db`;
  let deployment: Deployment | null = null;
  let scheduler: FaultScheduler | null = null;
  try {
    if (attached) {
      useToken(o.token ?? null);
      directDb = o.db ?? null;
    } else if (usesPg) {
      if (o.db) {
        directDb = o.db;
      } else {
        pg = await startPostgres();
        directDb = await pg.createDatabase();
      }
      const u = new URL(directDb);
      dbLink = startFaultProxy({ hostname: u.hostname, port: Number(u.port || 5432) });
      u.hostname = "127.0.0.1";
      u.port = String(dbLink.port);
      serverDb = u.toString();
    }
    const servers = o.servers ?? (o.mode === "shared" ? 3 : o.mode === "standby" ? 2 : 1);
    const python = o.pythonWorkers ?? (await hasPython() ? 1 : 0);
    deployment = new Deployment(
      o.mode,
      serverDb,
      dir,
      servers,
      o.workers ?? 2,
      python,
      attached ? { url: o.attach!, token: o.token ?? null } : null,
      o.cacheExecutions ?? null,
    );
    await deployment.start();
    const d = deployment;
    const entry = () => d.entry;
    const setupDeadline = Date.now() + 60_000;
    // What the checker judges the history as: an attached shared cluster may hand a worker an
    // attempt its owner refuses to record (the other modes' rules hold for every deployment).
    let checkMode: string = o.mode;
    let role: string | undefined;
    if (attached) {
      const h = await retry(entry, "GET", "/v1/health", undefined, setupDeadline);
      if (h.status !== 200) throw new Error(`${d.entry}/v1/health answered ${h.status}`);
      role = String(h.body?.role ?? "single");
      checkMode = role === "shared" ? "shared" : "attach";
      log(`chaos: attached to ${d.entry} (role ${role}); worker and worker-link faults only`);
    }
    for (const wf of [ORDER_WORKFLOW, FLOW_WORKFLOW, TICK_WORKFLOW]) {
      const r = await retry(entry, "POST", "/v1/workflows", wf, setupDeadline);
      if (r.status !== 201 && r.status !== 200) {
        throw new Error(`Cannot deploy ${wf.name}: ${r.status} ${JSON.stringify(r.body)}`);
      }
    }
    const scheduleId = `${tag}-tick`;
    const sched = await retry(entry, "POST", "/v1/schedules", {
      schedule_id: scheduleId,
      workflow: "ChaosTick",
      every_s: SCHEDULE_EVERY_S,
      overlap: "allow_all",
      catch_up: "all",
      catch_up_window_s: 3600,
    }, setupDeadline);
    if (sched.status !== 201 && sched.status !== 200) {
      throw new Error(`Cannot create the schedule: ${sched.status} ${JSON.stringify(sched.body)}`);
    }
    const scheduleCreated = Number(sched.body?.created_ms ?? Date.now());

    const random = rng(seed);
    const driver = new Driver(entry, tag, rng(seed ^ 0x5bd1e995), o.clients ?? 4);
    driver.start();
    const kinds = o.faults ?? faultsFor(o.mode, pg !== null);
    scheduler = new FaultScheduler(
      { deployment: d, dbLink, directDb: attached ? null : directDb, pg },
      random,
      kinds,
      log,
      o.inOrder === true,
    );
    scheduler.start(Date.now() + o.seconds * 1000);
    // The fault window.
    const windowEnd = Date.now() + o.seconds * 1000;
    while (Date.now() < windowEnd) await new Promise((r) => setTimeout(r, 250));
    log("chaos: fault window over; stopping faults and healing");
    await scheduler.stop();
    const settleDeadline = Date.now() + (o.settleSeconds ?? 180) * 1000;
    while (!await d.ready() && Date.now() < settleDeadline) {
      await new Promise((r) => setTimeout(r, 200));
    }
    log("chaos: settling (no new starts; waiting for open executions)");
    await driver.finish(settleDeadline);
    // Every occurrence before the schedule's next fire time has been started (or counted as
    // skipped): read that time, pause the schedule, then let the started occurrences finish.
    const sched2 = await retry(
      entry,
      "GET",
      `/v1/schedules/${scheduleId}`,
      undefined,
      settleDeadline,
    );
    const nextFire = Number(sched2.body?.next_fire_ms ?? Date.now());
    const pause = await retry(
      entry,
      "POST",
      `/v1/schedules/${scheduleId}/pause`,
      {},
      settleDeadline,
    );
    if (pause.status !== 200) log(`chaos: cannot pause the schedule: ${pause.status}`);
    await waitTicksDone(entry, tag, settleDeadline);

    // Appends first: each line was logged after its commit answered, so a snapshot read after
    // it holds every event a line names.
    const appends = o.mode === "shared"
      ? (await d.appendLines()).map(({ node, line }) => parseAppendLine(node, line)).filter(
        (a): a is AppendRecord => a !== null,
      )
      : undefined;
    const snapshot = attached && !directDb
      ? await readSnapshotHttp(
        d.entry,
        [...new Set(driver.starts.map((s) => s.id))],
        { schedule_id: scheduleId, workflow: TICK_WORKFLOW.name },
        Date.now() + 180_000,
      )
      : await readSnapshot(directDb ?? serverDb, tag);
    const attempts = await readAttempts(
      d.workers.map((w) => ({ worker: w.id, file: w.logFile })),
    );
    const result = check({
      mode: checkMode,
      snapshot,
      attempts,
      starts: driver.starts,
      faults: scheduler.faults,
      serverLogs: d.serverLogs(),
      ...(appends ? { appends } : {}),
      schedule: {
        schedule_id: scheduleId,
        every_s: SCHEDULE_EVERY_S,
        created_ms: scheduleCreated,
        next_fire_ms: nextFire,
      },
    });
    const details = result.violations.map((v) => formatViolation(v, snapshot, scheduler!.faults));
    const recoveries = scheduler.faults.map((f) => f.recovery_ms ?? 0);
    const report: ChaosReport = {
      mode: o.mode,
      ...(role !== undefined ? { role } : {}),
      seed,
      seconds: o.seconds,
      tag,
      driver: driver.stats,
      faults: scheduler.counts,
      faultCount: scheduler.faults.length,
      slowestRecoveryMs: Math.max(0, ...recoveries),
      workerConnections: deployment.workerConnections(),
      check: result,
      violations: result.violations,
      details,
      elapsedMs: Date.now() - started,
    };
    for (const line of details) log(line);
    log(summary(report));
    if (o.keep) log(`chaos: run directory kept: ${dir}`);
    return report;
  } finally {
    if (attached) useToken(null);
    await scheduler?.stop().catch(() => {});
    if (o.keep) await keepLogs(dir, deployment, scheduler?.faults ?? []);
    await deployment?.close();
    await dbLink?.close();
    await pg?.stop();
    if (!o.keep) await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
}

async function hasPython(): Promise<boolean> {
  try {
    const out = await new Deno.Command("python3", {
      args: ["-c", "import sys; sys.exit(0 if sys.version_info >= (3, 9) else 1)"],
      stdout: "null",
      stderr: "null",
    }).output();
    return out.success;
  } catch {
    return false;
  }
}

/** Waits until no tick occurrence of the run is running (they have no waits). */
async function waitTicksDone(entry: () => string, tag: string, deadline: number): Promise<void> {
  while (Date.now() < deadline) {
    const r = await call(
      entry(),
      "GET",
      `/v1/executions?workflow=ChaosTick&status=running&limit=50`,
    );
    // deno-lint-ignore no-explicit-any
    const mine = (r.body?.executions ?? []).filter((e: any) => e.execution_id.startsWith(tag));
    if (r.status === 200 && mine.length === 0) return;
    await new Promise((res) => setTimeout(res, 500));
  }
}

export function summary(r: ChaosReport): string {
  const faults = Object.entries(r.faults).map(([k, n]) => `${k}=${n}`).join(" ");
  const status = Object.entries(r.check.byStatus).map(([k, n]) => `${k}=${n}`).join(" ");
  return [
    `chaos: mode=${r.mode}${
      r.role ? ` (role ${r.role})` : ""
    } seed=${r.seed} ran ${r.seconds} s of faults (${Math.round(r.elapsedMs / 1000)} s in all)`,
    `  orders started=${r.driver.ordersStarted} finished=${r.driver.ordersDone}; flows=${r.driver.flowsStarted} signals=${r.driver.signals} cancels=${r.driver.cancels}; schedule occurrences=${r.check.occurrences}`,
    `  executions=${r.check.executions} (${status}) events=${r.check.events} attempts logged=${r.check.attempts} redeliveries=${r.check.redeliveries}${
      r.mode === "shared" || r.role === "shared"
        ? ` unrecorded claims=${r.check.unrecordedClaims}`
        : ""
    }${
      r.check.appends !== null ? ` appends logged=${r.check.appends}` : ""
    } timers fired=${r.check.timersFired} wait answers checked=${r.check.waitsChecked}`,
    `  faults=${r.faultCount} (${
      faults || "none"
    }); slowest recovery ${r.slowestRecoveryMs} ms; longest stall of orders ${r.driver.longestStallMs} ms${
      r.driver.longestStallFromMs
        ? ` (from ${new Date(r.driver.longestStallFromMs).toISOString()})`
        : ""
    }`,
    `  worker connections: ${
      Object.entries(r.workerConnections).map(([k, v]) => `${k}=${v}`).join(" ")
    }`,
    `  requests unanswered before their deadline=${r.driver.unanswered}; violations=${r.violations.length}`,
  ].join("\n");
}

/**
 * `--keep`: each server's log lines (`server-<node>.log`, every process that ran under the node
 * id, in order) and the faults with their times (`faults.log`, ISO times, so that a slow
 * recovery can be read against the servers' lines).
 */
async function keepLogs(
  dir: string,
  deployment: Deployment | null,
  faults: readonly FaultRecord[],
): Promise<void> {
  const byNode = new Map<string, string[]>();
  for (const { node, line } of deployment?.serverLogs() ?? []) {
    let lines = byNode.get(node);
    if (!lines) byNode.set(node, lines = []);
    lines.push(line);
  }
  for (const [node, lines] of byNode) {
    await Deno.writeTextFile(`${dir}/server-${node}.log`, lines.join("\n") + "\n").catch(() => {});
  }
  const text = faults.map((f) =>
    `${new Date(f.at_ms).toISOString()} ${f.kind} ${f.target}: ${f.end_ms - f.at_ms} ms` +
    (f.recovery_ms !== null ? `, serving again after ${f.recovery_ms} ms` : "")
  ).join("\n");
  await Deno.writeTextFile(`${dir}/faults.log`, text + "\n").catch(() => {});
}
