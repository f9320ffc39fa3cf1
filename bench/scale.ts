/**
 * Scale benchmark: many executions that only wait. Deploys a workflow that waits for a signal,
 * starts N executions of it from concurrent clients, reads the server's resident memory,
 * restarts the server (SIGTERM, then a new process on the same database) and times it to
 * `/v1/ready` 200, then signals every execution and checks that each one completed exactly
 * once (one `WorkflowCompleted` in its history, every row `completed`).
 *
 *   deno task bench:scale [--n 100000] [--clients 64] [--store sqlite|postgres]
 *                         [--server-args="--cache-executions 10000"]
 *                         [--deno-args="--v8-flags=--optimize-for-size"]
 *
 * Prints starts per second, RSS after the starts (VmRSS, and the peak VmHWM), the time from
 * the restart's spawn to ready and the RSS after it, the drain rate (signals answered per
 * second until the last execution is completed) and the exactly-once check.
 */
import { parseArgs } from "node:util";
import { DatabaseSync } from "node:sqlite";
import { api, type ServerProcess, startServer, tempDir } from "../tests/support/server.ts";
import { sharedPostgres, stopSharedPostgres } from "../tests/support/pg.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: {
    n: { type: "string", default: "100000" },
    clients: { type: "string", default: "64" },
    store: { type: "string", default: "sqlite" },
    "server-args": { type: "string", default: "" },
    // Flags for `deno run` of the server, e.g. --deno-args="--v8-flags=--optimize-for-size".
    "deno-args": { type: "string", default: "" },
  },
});
const N = Number(values.n);
const CLIENTS = Number(values.clients);
const SERVER_ARGS = values["server-args"].split(" ").filter(Boolean);
const DENO_ARGS = values["deno-args"].split(" ").filter(Boolean);

const WORKFLOW = {
  name: "ScaleWait",
  version: "1.0.0",
  ir: "orbit-ir/2",
  signals: { go: {} },
  steps: [
    { id: "wait", wait_signal: "go" },
    { id: "done", return: { ok: true } },
  ],
};

function procMb(pid: number, field: "VmRSS" | "VmHWM"): number {
  try {
    const m = Deno.readTextFileSync(`/proc/${pid}/status`).match(
      new RegExp(`${field}:\\s+(\\d+) kB`),
    );
    return m ? Math.round(Number(m[1]) / 1024) : NaN;
  } catch {
    return NaN;
  }
}

function loadAvg(): string {
  try {
    return Deno.readTextFileSync("/proc/loadavg").split(" ").slice(0, 3).join(" ");
  } catch {
    return "?";
  }
}

/** Runs `fn(i)` for i in [0, n) from `clients` concurrent loops; returns the seconds taken. */
async function fanOut(n: number, clients: number, fn: (i: number) => Promise<void>) {
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: clients }, async () => {
      while (next < n) await fn(next++);
    }),
  );
  return (performance.now() - t0) / 1000;
}

/** Polls until `/v1/ready` answers 200; the milliseconds since `since`. */
async function readyAfter(url: string, since: number): Promise<number> {
  for (;;) {
    try {
      const r = await fetch(`${url}/v1/ready`);
      await r.body?.cancel();
      if (r.status === 200) return performance.now() - since;
    } catch { /* not listening yet */ }
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** Settles the server's heap a little before reading RSS (one second of quiet). */
async function rssAfterQuiet(pid: number): Promise<{ rss: number; hwm: number }> {
  await new Promise((r) => setTimeout(r, 1000));
  return { rss: procMb(pid, "VmRSS"), hwm: procMb(pid, "VmHWM") };
}

async function count(db: string, sql: string): Promise<Record<string, number>> {
  if (db.startsWith("postgres")) {
    const { default: postgres } = await import("postgres");
    const pg = postgres(db, { max: 1, onnotice: () => {} });
    try {
      const rows = await pg.unsafe(sql);
      return Object.fromEntries(Object.entries(rows[0]!).map(([k, v]) => [k, Number(v)]));
    } finally {
      await pg.end();
    }
  }
  const d = new DatabaseSync(db, { readOnly: true });
  try {
    const row = d.prepare(sql).get() as Record<string, number>;
    return Object.fromEntries(Object.entries(row).map(([k, v]) => [k, Number(v)]));
  } finally {
    d.close();
  }
}

async function main() {
  const dir = await tempDir();
  let db = `${dir}/scale.db`;
  if (values.store === "postgres") {
    const pg = await sharedPostgres();
    db = await pg.createDatabase();
  } else if (values.store !== "sqlite") {
    throw new Error(`--store ${values.store}: sqlite or postgres`);
  }
  console.log(
    `scale bench: ${N} executions waiting for a signal, ${CLIENTS} clients, ${values.store}, ` +
      `server args "${SERVER_ARGS.join(" ")}", deno args "${DENO_ARGS.join(" ")}"; load average ` +
      loadAvg(),
  );

  let server: ServerProcess = await startServer({ db, args: SERVER_ARGS, denoArgs: DENO_ARGS });
  try {
    const c = api(server.url);
    const dep = await c.post("/v1/workflows", WORKFLOW);
    if (dep.status !== 201) throw new Error(`deploy: ${dep.status} ${JSON.stringify(dep.body)}`);
    const idle = await rssAfterQuiet(server.pid);

    const startS = await fanOut(N, CLIENTS, async (i) => {
      for (;;) {
        const r = await c.post("/v1/executions", { workflow: "ScaleWait", execution_id: `w-${i}` });
        if (r.status === 201 || r.status === 200) return;
        if (r.status !== 429 && r.status < 500) {
          throw new Error(`start w-${i}: ${r.status} ${JSON.stringify(r.body)}`);
        }
      }
    });
    const afterStarts = await rssAfterQuiet(server.pid);
    // V8's memory reducer gives back heap it grew under the starts' allocation rate once the
    // process has been quiet for about 8 s: the resident size a waiting server settles at.
    await new Promise((r) => setTimeout(r, 9000));
    const settled = procMb(server.pid, "VmRSS");
    console.log(
      `  starts: ${N} in ${startS.toFixed(1)} s = ${(N / startS).toFixed(0)}/s; RSS idle ` +
        `${idle.rss} MB, after the starts ${afterStarts.rss} MB (peak ${afterStarts.hwm} MB), ` +
        `${settled} MB after 10 s of quiet`,
    );

    await server.kill("SIGTERM");
    const t0 = performance.now();
    server = await startServer({ db, args: SERVER_ARGS, denoArgs: DENO_ARGS });
    const readyMs = await readyAfter(server.url, t0);
    const afterRestart = await rssAfterQuiet(server.pid);
    console.log(
      `  restart: ready ${readyMs.toFixed(0)} ms after spawn; RSS after ${afterRestart.rss} MB ` +
        `(peak ${afterRestart.hwm} MB); load average ${loadAvg()}`,
    );

    const c2 = api(server.url);
    const drainT0 = performance.now();
    await fanOut(N, CLIENTS, async (i) => {
      for (;;) {
        const r = await c2.post(`/v1/executions/w-${i}/signals/go`, {});
        if (r.status === 200 || r.status === 201 || r.status === 202) return;
        if (r.status !== 429 && r.status < 500) {
          throw new Error(`signal w-${i}: ${r.status} ${JSON.stringify(r.body)}`);
        }
      }
    });
    // Drained when no execution runs any more.
    for (;;) {
      const r = await c2.get("/v1/executions?status=running&limit=1");
      if (r.status === 200 && r.body.executions.length === 0) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    const drainS = (performance.now() - drainT0) / 1000;
    const afterDrain = await rssAfterQuiet(server.pid);
    console.log(
      `  drain: ${N} signalled and completed in ${drainS.toFixed(1)} s = ` +
        `${(N / drainS).toFixed(0)}/s; RSS after ${afterDrain.rss} MB (peak ${afterDrain.hwm} MB)`,
    );
    await server.kill("SIGTERM");

    const st = await count(
      db,
      `SELECT count(*) AS executions,
              sum(CASE WHEN status = 'completed' THEN 1 ELSE 0 END) AS completed
         FROM workflow_executions`,
    );
    const ev = await count(
      db,
      `SELECT count(*) AS events, count(DISTINCT execution_id) AS executions
         FROM execution_events WHERE type = 'WorkflowCompleted'`,
    );
    const ok = st.executions === N && st.completed === N && ev.events === N &&
      ev.executions === N;
    console.log(
      `  check: ${st.executions} executions, ${st.completed} completed, ${ev.events} ` +
        `WorkflowCompleted events over ${ev.executions} executions: ` +
        (ok ? "every one completed exactly once" : "MISMATCH"),
    );
    if (!ok) Deno.exitCode = 1;
  } finally {
    await server.kill("SIGTERM");
    if (values.store === "postgres") await stopSharedPostgres();
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
}

await main();
