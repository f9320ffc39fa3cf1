/**
 * Throughput benchmark (the reference page's workload): OrderProcessing with six worker tasks,
 * 600 orders started by 64 concurrent clients that each start an order and wait for it, the
 * TypeScript example worker with concurrency 8, against a server this script starts itself —
 * on SQLite and on PostgreSQL (a cluster started by the test harness).
 *
 *   deno task bench [--orders 600] [--clients 64] [--workers 1] [--store sqlite|postgres|both]
 *
 * Prints orders per second, p50/p99 latency (start request to observed completion) and the
 * server's peak resident memory (VmHWM).
 */
import { parseArgs } from "node:util";
import { api, startServer, tempDir } from "../tests/support/server.ts";
import { ORDER_WORKFLOW, orderInput, startOrderWorker } from "../tests/support/orders.ts";
import { sharedPostgres, stopSharedPostgres } from "../tests/support/pg.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: {
    orders: { type: "string", default: "600" },
    clients: { type: "string", default: "64" },
    workers: { type: "string", default: "1" },
    concurrency: { type: "string", default: "8" },
    store: { type: "string", default: "both" },
    "server-args": { type: "string", default: "" },
  },
});
const ORDERS = Number(values.orders);
const CLIENTS = Number(values.clients);

function peakRssMb(pid: number): number {
  try {
    const status = Deno.readTextFileSync(`/proc/${pid}/status`);
    const m = status.match(/VmHWM:\s+(\d+) kB/);
    return m ? Math.round(Number(m[1]) / 1024) : NaN;
  } catch {
    return NaN;
  }
}

/** CPU seconds (user + system) a process has used, from /proc. */
function cpuSeconds(pid: number): number {
  try {
    const f = Deno.readTextFileSync(`/proc/${pid}/stat`).split(") ")[1]!.split(" ");
    return (Number(f[11]) + Number(f[12])) / 100;
  } catch {
    return NaN;
  }
}

function pct(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))]!;
}

async function bench(store: "sqlite" | "postgres") {
  const db = store === "sqlite"
    ? `${await tempDir()}/bench.db`
    : await (await sharedPostgres()).createDatabase();
  const extra = values["server-args"] ? values["server-args"].split(" ") : [];
  const prof = Deno.env.get("ORBIT_BENCH_CPU_PROF");
  const server = await startServer({
    db,
    args: extra,
    ...(prof ? { denoArgs: ["--cpu-prof", `--cpu-prof-dir=${prof}`] } : {}),
  });
  const workers = Array.from(
    { length: Number(values.workers) },
    (_, i) =>
      startOrderWorker(server.url, {
        ORDER_TRACE: "0",
        ORDER_CONCURRENCY: values.concurrency,
        ORDER_WORKER_ID: `bench-${i}`,
      }),
  );
  try {
    const c = api(server.url);
    await c.post("/v1/workflows", ORDER_WORKFLOW);
    // Warm up: one order end to end, so the workers are registered and polling.
    await c.post("/v1/executions", {
      workflow: "OrderProcessing",
      execution_id: "warmup",
      input: orderInput("warmup"),
    });
    await c.get("/v1/executions/warmup/wait?timeout_s=60");

    const latencies: number[] = [];
    const cpu0 = { server: cpuSeconds(server.pid), workers: workers.map((w) => cpuSeconds(w.pid)) };
    let next = 0;
    const started = performance.now();
    await Promise.all(Array.from({ length: CLIENTS }, async () => {
      while (next < ORDERS) {
        const id = `bench-${next++}`;
        const t0 = performance.now();
        const s = await c.post("/v1/executions", {
          workflow: "OrderProcessing",
          execution_id: id,
          input: orderInput(id),
        });
        if (s.status !== 201) throw new Error(`start ${id}: ${s.status} ${JSON.stringify(s.body)}`);
        for (;;) {
          const w = await c.get(`/v1/executions/${id}/wait?timeout_s=60`);
          if (w.body.status === "completed") break;
          if (w.body.status !== "running") throw new Error(`${id} ended ${w.body.status}`);
        }
        latencies.push(performance.now() - t0);
      }
    }));
    const seconds = (performance.now() - started) / 1000;
    const serverCpu = cpuSeconds(server.pid) - cpu0.server;
    const workerCpu = workers.reduce((sum, w, i) => sum + cpuSeconds(w.pid) - cpu0.workers[i]!, 0);
    latencies.sort((a, b) => a - b);
    return {
      store,
      orders: ORDERS,
      clients: CLIENTS,
      orders_per_s: Math.round((ORDERS / seconds) * 10) / 10,
      p50_ms: Math.round(pct(latencies, 0.5)),
      p99_ms: Math.round(pct(latencies, 0.99)),
      server_peak_rss_mb: peakRssMb(server.pid),
      seconds: Math.round(seconds * 10) / 10,
      server_cpu_s: Math.round(serverCpu * 10) / 10,
      worker_cpu_s: Math.round(workerCpu * 10) / 10,
    };
  } finally {
    for (const w of workers) await w.kill("SIGKILL");
    await server.kill(Deno.env.get("ORBIT_BENCH_CPU_PROF") ? "SIGTERM" : "SIGKILL");
  }
}

const stores = values.store === "both"
  ? ["sqlite", "postgres"] as const
  : [values.store as "sqlite" | "postgres"];
const results = [];
for (const s of stores) {
  const r = await bench(s);
  results.push(r);
  console.log(
    `${r.store}: ${r.orders_per_s} orders/s, p50 ${r.p50_ms} ms, p99 ${r.p99_ms} ms, server peak RSS ${r.server_peak_rss_mb} MB (${r.orders} orders, ${r.clients} clients; ${r.seconds} s, CPU: server ${r.server_cpu_s} s, workers ${r.worker_cpu_s} s)`,
  );
}
await stopSharedPostgres();
console.log(JSON.stringify(results));
