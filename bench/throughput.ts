/**
 * Throughput benchmark (the reference page's workload): OrderProcessing with six worker tasks,
 * 600 orders started by 64 concurrent clients that each start an order and wait for it, the
 * TypeScript example worker with concurrency 8, against a server this script starts itself —
 * on SQLite and on PostgreSQL (a cluster started by the test harness).
 *
 *   deno task bench [--orders 600] [--clients 64] [--workers 1] [--store sqlite|postgres|both]
 *   deno task bench --python-workers 1 --ts-workers 1   (the reference page's worker shape)
 *   deno task bench --go-workers 1 --java-workers 1 --rust-workers 1 --csharp-workers 1 \
 *     --python-workers 1 --ts-workers 1
 *                       (workers in several languages: the CPU per order of each language's)
 *   deno task bench --grpc-workers 1 --ts-workers 1
 *                       (an example worker over gRPC beside one over HTTP: the CPU per order of each)
 *   deno task bench --cluster shared --servers 3        (shared mode behind a round-robin proxy)
 *   deno task bench --cluster shared --servers 1 --no-proxy   (clients and workers on the server)
 *   deno task bench --cluster shared --servers 3 --workers 3 --spread   (no proxy: client i on
 *                       server i % 3, worker process j on server j % 3 with all its slots, a
 *                       worker per server; --spread-slots: each worker's slots on every server)
 *   deno task bench --cluster shared --servers 3 --server-cpus 0.25   (each server in a cgroup of
 *                       its own capped at 0.25 CPU; also without --cluster: bench/cgroup.ts)
 *   deno task bench --cluster independent --servers 3   (three single servers, each on a database
 *                       of its own, the load spread as with --spread: what three servers reach on
 *                       this host without any shared state, the ceiling of the shared rows)
 *   deno task bench --deno-args="--v8-flags=--max-semi-space-size=2"   (flags for the server's deno run)
 *   deno task bench --waiting 100000    (that many executions wait for a signal through the run)
 *   deno task bench --store postgres --pg-statements   (PostgreSQL's statements per order, too)
 *
 * Prints orders per second, p50/p99 latency (start request to observed completion), the
 * server's peak resident memory (VmHWM), and what an order costs: CPU milliseconds per order
 * of the server, of the workers and of the whole machine (from /proc), commits per order (`orbit_commits_total`),
 * the share of the run the server's main thread was busy (running, runnable or blocked in a
 * commit's fsync: its state in /proc sampled every 2 ms), on a CPU, and waiting for a core (its
 * schedstat), and the worker cycle p50/p99 — the time from a
 * worker's result to its next task (measured inside the worker by `bench/worker_probe.ts`,
 * which runs the example worker unchanged). On PostgreSQL it adds the database's CPU per order by
 * connection role, and with `--pg-statements` its statements (bench/postgres_stats.ts).
 */
import { parseArgs } from "node:util";
import { api, tempDir } from "../tests/support/server.ts";
import { ORDER_WORKFLOW, orderInput, WAITER_WORKFLOW } from "../tests/support/orders.ts";
import { sharedPostgres, stopSharedPostgres } from "../tests/support/pg.ts";
import { PYTHON_WORKFLOW, startPythonWorker } from "../sdk/python/testing/process.ts";
import { describeShares, serverShares, startBenchServers } from "./cluster.ts";
import { capServersOrExit } from "./cgroup.ts";
import { Client } from "../sdk/typescript/client.ts";
import { PG_STATEMENTS_OPTIONS, PostgresStats } from "./postgres_stats.ts";
import { startWorkerProcess } from "../tests/conformance/worker_process.ts";
import {
  busySampler,
  cpuSeconds,
  machineCpuSeconds,
  memoryMb,
  postgresCpuSeconds,
  runQueueSeconds,
  writeBytes,
} from "./proc_stats.ts";
import { startProbeWorker, WORKER_PROF } from "./probe_worker.ts";
import {
  COMPILED_LANGUAGES,
  type CompiledLanguage,
  LANGUAGE_NAMES,
  workerCommand,
} from "./language_workers.ts";
import { serverCounters } from "./counters.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: {
    orders: { type: "string", default: "600" },
    warmup: { type: "string", default: "0" },
    clients: { type: "string", default: "64" },
    workers: { type: "string", default: "1" },
    concurrency: { type: "string", default: "8" },
    store: { type: "string", default: "both" },
    "server-args": { type: "string", default: "" },
    // Flags for the server's `deno run`, e.g. --deno-args="--v8-flags=--max-semi-space-size=2".
    "deno-args": { type: "string", default: "" },
    // Python example workers beside the TypeScript ones (then --ts-workers counts those, and
    // the workflow is the variant whose charge is pinned to Python).
    "python-workers": { type: "string", default: "0" },
    "ts-workers": { type: "string" },
    // The Go, Rust, C# and Java SDKs' example workers (bench/language_workers.ts builds them). With
    // any of them the workflow is the plain one (no step pinned to a language): every example
    // worker registers all 8 tasks, so they spread among the languages; the bench prints each
    // language's worker CPU per order and the tasks it ran (from the orders' histories).
    "go-workers": { type: "string", default: "0" },
    "rust-workers": { type: "string", default: "0" },
    "csharp-workers": { type: "string", default: "0" },
    "java-workers": { type: "string", default: "0" },
    // TypeScript example workers whose requests go over gRPC (bench/grpc_worker_probe.ts; the
    // server then listens with --grpc-addr too); printed as the language "typescript-grpc".
    "grpc-workers": { type: "string", default: "0" },
    // Shared mode: N servers on one PostgreSQL database behind a round-robin proxy.
    // "independent": N single servers, each on a database of its own, the load spread over
    // them as with --spread (no proxy).
    cluster: { type: "string", default: "" },
    servers: { type: "string", default: "1" },
    // Shared mode without the proxy: clients and workers talk to the first server.
    "no-proxy": { type: "boolean", default: false },
    // Without the proxy: client i on server i % N, worker process j on server j % N with every
    // slot kept there (a worker per server: ORDER_SPREAD=0, as --pin-workers).
    spread: { type: "boolean", default: false },
    // With --spread: the workers spread their slots over every server instead (the SDK's
    // default), each worker process then talking to all of them.
    "spread-slots": { type: "boolean", default: false },
    // TypeScript workers keep every slot on the address they were given (ORDER_SPREAD=0)
    // instead of spreading them over the shared servers' advertised addresses (the default).
    "pin-workers": { type: "boolean", default: false },
    // Each server in a cgroup of its own capped at that many CPUs (bench/cgroup.ts).
    "server-cpus": { type: "string" },
    // Executions started first that wait for a signal the whole run (how the cost grows with
    // the work the server holds: beyond --cache-executions they leave memory).
    waiting: { type: "string", default: "0" },
    // How the 64 clients (the SDK's Client) send their requests: "http1" (kept-alive HTTP/1.1
    // over Deno.connect) or "fetch".
    "client-transport": { type: "string", default: "http1" },
    // PostgreSQL loads pg_stat_statements and the bench prints its statements per order.
    "pg-statements": { type: "boolean", default: false },
  },
});
if (values["pg-statements"]) Deno.env.set("ORBIT_TEST_PG_OPTIONS", PG_STATEMENTS_OPTIONS);
const CLIENT_TRANSPORT = values["client-transport"] as "http1" | "fetch";
if (!["http1", "fetch"].includes(CLIENT_TRANSPORT)) {
  throw new Error("--client-transport: http1 or fetch");
}
const SHARED = values.cluster === "shared" ? Number(values.servers) : 0;
/** `--cluster independent`: that many single servers, each on a database of its own. */
const INDEPENDENT = values.cluster === "independent" ? Number(values.servers) : 0;
if (values.cluster && !["shared", "independent"].includes(values.cluster)) {
  throw new Error(`--cluster ${values.cluster}: shared or independent`);
}
if (!Number.isInteger(Number(values.servers)) || Number(values.servers) < 1) {
  throw new Error("--servers: a count of servers");
}
if (INDEPENDENT > 0 && values["no-proxy"]) {
  throw new Error("--cluster independent: no proxy in front of single servers already");
}
const SPREAD = values.spread;
if (SPREAD && SHARED < 1) throw new Error("--spread: the shared servers of --cluster shared");
if (values["spread-slots"] && !SPREAD) throw new Error("--spread-slots: only with --spread");
/** The TypeScript workers keep their slots on the address they were given. */
const PIN_WORKERS = values["pin-workers"] || (SPREAD && !values["spread-slots"]);
// Before anything is started: refused (exit 2) where no cgroup can be made.
const CPU_CAPS = values["server-cpus"] === undefined
  ? null
  : capServersOrExit(Number(values["server-cpus"]), Math.max(1, SHARED, INDEPENDENT));
const ORDERS = Number(values.orders);
const WARMUP = Number(values.warmup);
if (!Number.isInteger(WARMUP) || WARMUP < 0) throw new Error("--warmup: a count of orders");
const WAITING = Number(values.waiting);
if (!Number.isInteger(WAITING) || WAITING < 0) throw new Error("--waiting: a count");

const CLIENTS = Number(values.clients);

/** How many example workers of each compiled SDK (`--go-workers` …). */
const COMPILED_COUNTS = new Map<CompiledLanguage, number>(
  COMPILED_LANGUAGES.map((l) => {
    const n = Number(values[`${l}-workers`]);
    if (!Number.isInteger(n) || n < 0) throw new Error(`--${l}-workers: a count of workers`);
    return [l, n];
  }),
);
const COMPILED = [...COMPILED_COUNTS].filter(([, n]) => n > 0).map(([l]) => l);
if (
  INDEPENDENT > 0 &&
  (COMPILED.length > 0 || Number(values["python-workers"]) > 0 ||
    Number(values["grpc-workers"]) > 0)
) {
  throw new Error("--cluster independent: TypeScript workers only (--workers)");
}
/** Each compiled SDK's worker command line, built once for every store the bench runs on. */
const COMPILED_COMMANDS = new Map<CompiledLanguage, string[]>();
for (const l of COMPILED) {
  const t0 = performance.now();
  COMPILED_COMMANDS.set(l, await workerCommand(l));
  console.error(
    `  ${LANGUAGE_NAMES[l]} example worker built (${
      ((performance.now() - t0) / 1000).toFixed(1)
    } s)`,
  );
}

/** The language of a bench worker by its worker_id (bench-N is a TypeScript one). */
function languageOf(workerId: string): string {
  const m = /^bench-(py|go|rust|csharp|java|grpc)-\d+$/.exec(workerId);
  return !m ? "typescript" : m[1] === "py" ? "python" : m[1] === "grpc" ? "typescript-grpc" : m[1]!;
}

function pct(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))]!;
}

async function bench(store: "sqlite" | "postgres") {
  const newDb = async () =>
    store === "sqlite"
      ? `${await tempDir()}/bench.db`
      : await (await sharedPostgres()).createDatabase();
  const db = await newDb();
  // --cluster independent: a database for each server (the first one's is `db`).
  const independent = INDEPENDENT > 0
    ? [db, ...await Promise.all(Array.from({ length: INDEPENDENT - 1 }, newDb))]
    : undefined;
  const extra = values["server-args"] ? values["server-args"].split(" ") : [];
  const grpcCount = Number(values["grpc-workers"]);
  if (grpcCount > 0) extra.push("--grpc-addr", "127.0.0.1:0");
  const prof = Deno.env.get("ORBIT_BENCH_CPU_PROF");
  const denoArgs = [
    ...values["deno-args"].split(" ").filter(Boolean),
    ...(prof ? ["--cpu-prof", `--cpu-prof-dir=${prof}`] : []),
  ];
  const cluster = await startBenchServers({
    db,
    args: extra,
    shared: SHARED,
    ...(independent ? { independent } : {}),
    proxy: !values["no-proxy"] && !SPREAD,
    spread: SPREAD,
    ...(CPU_CAPS ? { cpuCaps: CPU_CAPS } : {}),
    ...(denoArgs.length ? { denoArgs } : {}),
  });
  // The first server stands for all in what is measured per process (main thread, RSS);
  // CPU and counters are summed over every server.
  const server = { ...cluster.servers[0]!, url: cluster.url };
  const pids = cluster.servers.map((x) => x.pid);
  const allCpu = () => pids.reduce((sum, pid) => sum + cpuSeconds(pid), 0);
  const allCounters = async () => {
    const each = await Promise.all(cluster.servers.map((x) => serverCounters(api(x.url))));
    return {
      commits: each.reduce((n, x) => n + x.commits, 0),
      forwards: each.reduce((n, x) => n + x.forwards, 0),
      claims: each.reduce((n, x) => n + x.claims, 0),
      refusedTakes: each.reduce((n, x) => n + x.refusedTakes, 0),
      notifications: each.reduce((n, x) => n + x.notifications, 0),
      requests: each.reduce((n, x) => n + x.requests, 0),
      events: each.reduce((n, x) => n + x.events, 0),
      commitSeconds: each.reduce((n, x) => n + x.commitSeconds, 0),
    };
  };
  const pyCount = Number(values["python-workers"]);
  const workers = Array.from(
    { length: Number(values["ts-workers"] ?? values.workers) },
    (_, i) =>
      startProbeWorker(cluster.route(i), {
        ORDER_TRACE: "0",
        ORDER_CONCURRENCY: values.concurrency,
        ORDER_WORKER_ID: `bench-${i}`,
        ...(PIN_WORKERS ? { ORDER_SPREAD: "0" } : {}),
      }),
  );
  const grpcAddr = grpcCount > 0
    ? (await cluster.servers[0]!.waitForLog(/ORBIT gRPC listening addr=/)).match(/addr=(\S+)/)![1]!
    : "";
  const grpcWorkers = Array.from(
    { length: grpcCount },
    (_, i) =>
      startProbeWorker(cluster.route(i), {
        ORDER_TRACE: "0",
        ORDER_CONCURRENCY: values.concurrency,
        ORDER_WORKER_ID: `bench-grpc-${i}`,
        ORBIT_BENCH_GRPC: grpcAddr,
      }, "./grpc_worker_probe.ts"),
  );
  const pythonWorkers = Array.from(
    { length: pyCount },
    (_, i) =>
      startPythonWorker(cluster.route(i), {
        ORDER_TRACE: "0",
        ORDER_CONCURRENCY: values.concurrency,
        ORDER_WORKER_ID: `bench-py-${i}`,
      }),
  );
  const compiledWorkers = COMPILED.flatMap((l) =>
    Array.from({ length: COMPILED_COUNTS.get(l)! }, (_, i) => {
      const id = `bench-${l}-${i}`;
      return {
        language: l as string,
        id,
        process: startWorkerProcess(id, COMPILED_COMMANDS.get(l)!, cluster.route(i), {
          ORDER_TRACE: "0",
          ORDER_CONCURRENCY: values.concurrency,
          ORDER_WORKER_ID: id,
        }),
      };
    })
  );
  /** Every worker process with its language (CPU per language). */
  const allWorkers = [
    ...workers.map((w) => ({ language: "typescript", pid: w.pid })),
    ...pythonWorkers.map((w) => ({ language: "python", pid: w.pid })),
    ...grpcWorkers.map((w) => ({ language: "typescript-grpc", pid: w.pid })),
    ...compiledWorkers.map((w) => ({ language: w.language, pid: w.process.pid })),
  ];
  const languages = [...new Set(allWorkers.map((w) => w.language))];
  /** Several languages: each one's CPU per order and tasks are printed. */
  const mixed = pyCount > 0 || compiledWorkers.length > 0 || grpcCount > 0;
  // One Client per address (with --spread, per server): client loop k uses clients[k % n].
  const clients = cluster.urls.map((url) =>
    new Client({ server: url, transport: CLIENT_TRANSPORT })
  );
  const pgStats = store === "postgres"
    ? new PostgresStats(db, { statements: values["pg-statements"] })
    : null;
  try {
    const c = api(server.url);
    // Independent servers share nothing: each one gets the workflow (and a warm-up order).
    const own = independent ? cluster.servers.map((s) => api(s.url)) : [c];
    for (const each of own) {
      await each.post(
        "/v1/workflows",
        pyCount > 0 && compiledWorkers.length === 0 ? PYTHON_WORKFLOW : ORDER_WORKFLOW,
      );
    }
    // The compiled SDKs' workers (Mono's and the JVM's start take seconds on a loaded machine)
    // registered before the warm-up, so that every language polls when the run starts.
    if (compiledWorkers.length > 0) {
      const want = new Set([
        ...compiledWorkers.map((w) => w.id),
        ...workers.map((_, i) => `bench-${i}`),
        ...pythonWorkers.map((_, i) => `bench-py-${i}`),
      ]);
      const deadline = Date.now() + 120_000;
      for (;;) {
        const seen = new Set<string>();
        for (const s of cluster.servers) {
          const r = await api(s.url).get("/v1/workers");
          for (const w of r.body?.workers ?? []) seen.add(w.worker_id);
        }
        if ([...want].every((id) => seen.has(id))) break;
        for (const w of compiledWorkers) {
          if (w.process.exitCode() !== null) {
            throw new Error(
              `worker ${w.id} exited (${w.process.exitCode()}):\n${w.process.tail()}`,
            );
          }
        }
        if (Date.now() > deadline) {
          throw new Error(
            `workers not registered after 120 s: ${[...want].filter((id) => !seen.has(id))}`,
          );
        }
        await new Promise((r) => setTimeout(r, 200));
      }
    }
    // Warm up: one order end to end, so the workers are registered and polling.
    for (const each of own) {
      await each.post("/v1/executions", {
        workflow: "OrderProcessing",
        execution_id: "warmup",
        input: orderInput("warmup"),
      });
      const done = await each.get("/v1/executions/warmup/wait?timeout_s=60");
      if (done.body?.status !== "completed") {
        throw new Error(`warm-up order: ${done.status} ${JSON.stringify(done.body)}`);
      }
    }
    if (WAITING > 0) {
      await c.post("/v1/workflows", WAITER_WORKFLOW);
      let n = 0;
      const t0 = performance.now();
      await Promise.all(Array.from({ length: CLIENTS }, async () => {
        while (n < WAITING) {
          const id = `waiter-${n++}`;
          const r = await c.post("/v1/executions", {
            workflow: WAITER_WORKFLOW.name,
            execution_id: id,
          });
          if (r.status !== 201) {
            throw new Error(`start ${id}: ${r.status} ${JSON.stringify(r.body)}`);
          }
        }
      }));
      console.error(
        `  ${WAITING} executions waiting (started in ${
          ((performance.now() - t0) / 1000).toFixed(1)
        } s); server RSS ${memoryMb(server.pid, "VmRSS")} MB`,
      );
    }

    /**
     * Runs `count` orders from CLIENTS clients (each starts one and waits for it, in turn), all
     * through one SDK Client, as an application would.
     */
    const drive = async (prefix: string, count: number, latencies: number[]) => {
      let next = 0;
      await Promise.all(Array.from({ length: CLIENTS }, async (_, k) => {
        const client = clients[k % clients.length]!;
        while (next < count) {
          const id = `${prefix}-${next++}`;
          const t0 = performance.now();
          const started = await client.start("OrderProcessing", {
            executionId: id,
            input: orderInput(id),
          });
          if (started.execution_id !== id) {
            throw new Error(`start ${id}: ${JSON.stringify(started)}`);
          }
          const done = await client.wait(id, { timeoutS: 60 });
          if (done.status !== "completed") throw new Error(`${id} ended ${done.status}`);
          latencies.push(performance.now() - t0);
        }
      }));
    };
    // `--warmup N`: N orders first, not measured, so that every server process has compiled
    // its hot paths (V8 optimizes a function after many calls; N servers each see 1/N of them).
    if (WARMUP > 0) await drive("warmup", WARMUP, []);

    const latencies: number[] = [];
    for (const w of workers) await w.cycle(); // the warm-up's samples are left out
    const counters0 = await allCounters();
    const cpu0 = {
      server: allCpu(),
      main: cpuSeconds(server.pid, server.pid),
      mainWaiting: runQueueSeconds(server.pid, server.pid),
      byWorker: allWorkers.map((w) => cpuSeconds(w.pid)),
    };
    const machine0 = machineCpuSeconds();
    const bench0 = cpuSeconds(Deno.pid);
    await pgStats?.start();
    const postgres0 = store === "postgres" ? postgresCpuSeconds() : 0;
    const written0 = pids.reduce((sum, pid) => sum + writeBytes(pid), 0);
    const sampler = busySampler(server.pid);
    const shares = await serverShares(cluster.servers, CPU_CAPS);
    const started = performance.now();
    await drive("bench", ORDERS, latencies);
    const seconds = (performance.now() - started) / 1000;
    const busy = sampler.stop();
    const machineCpu = machineCpuSeconds() - machine0;
    const benchCpu = cpuSeconds(Deno.pid) - bench0;
    const postgresCpu = store === "postgres" ? postgresCpuSeconds() - postgres0 : 0;
    const pgDetail = await pgStats?.finish(ORDERS);
    const written = pids.reduce((sum, pid) => sum + writeBytes(pid), 0) - written0;
    const serverCpu = allCpu() - cpu0.server;
    const perServer = await shares.finish(ORDERS);
    const mainCpu = cpuSeconds(server.pid, server.pid) - cpu0.main;
    const mainWaiting = runQueueSeconds(server.pid, server.pid) - cpu0.mainWaiting;
    /** Each language's worker CPU seconds during the run (the workers' total is their sum). */
    const cpuByLanguage = new Map<string, number>(languages.map((l) => [l, 0]));
    allWorkers.forEach((w, i) => {
      cpuByLanguage.set(
        w.language,
        cpuByLanguage.get(w.language)! + cpuSeconds(w.pid) - cpu0.byWorker[i]!,
      );
    });
    const workerCpu = [...cpuByLanguage.values()].reduce((a, b) => a + b, 0);
    const counters = await allCounters();
    const cycles = await Promise.all(workers.map((w) => w.cycle()));
    // Several workers: the figures of the one with the most samples.
    const cycle = cycles.sort((a, b) => b.n - a.n)[0]!;
    const serverPeakRss = memoryMb(server.pid, "VmHWM");
    const serverRssAfter = memoryMb(server.pid, "VmRSS");
    // Several languages: the task attempts each one's workers ran in the measured orders (the
    // StepDispatched events of their histories, by worker_id), read after the measured window
    // and after everything else is measured (the reads must not count in the server's memory).
    const tasksByLanguage = mixed ? new Map<string, number>(languages.map((l) => [l, 0])) : null;
    if (tasksByLanguage) {
      let next = 0;
      await Promise.all(Array.from({ length: 8 }, async () => {
        while (next < ORDERS) {
          const id = `bench-${next++}`;
          let after = 0;
          for (;;) {
            const r = await c.get(`/v1/executions/${id}/history?after_seq=${after}&limit=1000`);
            if (r.status !== 200) throw new Error(`history of ${id}: ${r.status}`);
            for (const e of r.body.events) {
              if (e.type !== "StepDispatched") continue;
              const l = languageOf(e.worker_id);
              tasksByLanguage.set(l, (tasksByLanguage.get(l) ?? 0) + 1);
            }
            if (!r.body.next_after_seq) break;
            after = r.body.next_after_seq;
          }
        }
      }));
    }
    latencies.sort((a, b) => a - b);
    const round = (x: number, digits: number) => Math.round(x * 10 ** digits) / 10 ** digits;
    return {
      store: INDEPENDENT > 0
        ? `${store}, ${INDEPENDENT} independent single server${INDEPENDENT > 1 ? "s" : ""}${
          CPU_CAPS ? `, ${CPU_CAPS.cpus} CPU each` : ""
        }`
        : SHARED > 0
        ? `${store}, ${SHARED} shared server${SHARED > 1 ? "s" : ""}${
          SPREAD
            ? PIN_WORKERS
              ? " (no proxy, spread)"
              : " (no proxy, spread, every worker on every server)"
            : values["no-proxy"]
            ? " (no proxy)"
            : ""
        }${CPU_CAPS ? `, ${CPU_CAPS.cpus} CPU each` : ""}`
        : `${store}${CPU_CAPS ? `, ${CPU_CAPS.cpus} CPU` : ""}`,
      // --server-cpus: the cap of each server, and each one's CPU per order (and throttling).
      server_cpus: CPU_CAPS ? CPU_CAPS.cpus : null,
      server_cap: CPU_CAPS?.describe() ?? null,
      servers: perServer,
      orders: ORDERS,
      warmup: WARMUP,
      clients: CLIENTS,
      ts_workers: workers.length,
      python_workers: pyCount,
      go_workers: COMPILED_COUNTS.get("go")!,
      rust_workers: COMPILED_COUNTS.get("rust")!,
      csharp_workers: COMPILED_COUNTS.get("csharp")!,
      java_workers: COMPILED_COUNTS.get("java")!,
      waiting: WAITING,
      orders_per_s: Math.round((ORDERS / seconds) * 10) / 10,
      p50_ms: Math.round(pct(latencies, 0.5)),
      p99_ms: Math.round(pct(latencies, 0.99)),
      server_peak_rss_mb: serverPeakRss,
      server_rss_mb_after: serverRssAfter,
      seconds: Math.round(seconds * 10) / 10,
      server_cpu_s: round(serverCpu, 2),
      worker_cpu_s: round(workerCpu, 2),
      server_cpu_ms_per_order: round((serverCpu * 1000) / ORDERS, 2),
      worker_cpu_ms_per_order: round((workerCpu * 1000) / ORDERS, 2),
      // Several languages: each one's workers' CPU per order, and the task attempts they ran.
      worker_cpu_ms_per_order_by_language: mixed
        ? Object.fromEntries(
          [...cpuByLanguage].map(([l, s]) => [l, round((s * 1000) / ORDERS, 2)]),
        )
        : null,
      tasks_by_language: tasksByLanguage ? Object.fromEntries(tasksByLanguage) : null,
      worker_cpu_ms_per_task_by_language: tasksByLanguage
        ? Object.fromEntries(
          [...cpuByLanguage].map((
            [l, s],
          ) => [l, tasksByLanguage.get(l) ? round((s * 1000) / tasksByLanguage.get(l)!, 3) : null]),
        )
        : null,
      machine_cpu_ms_per_order: round((machineCpu * 1000) / ORDERS, 2),
      // This process: the 64 clients, and in shared mode the proxy in front of the servers.
      bench_cpu_ms_per_order: round((benchCpu * 1000) / ORDERS, 2),
      postgres_cpu_ms_per_order: round((postgresCpu * 1000) / ORDERS, 2),
      main_thread_cpu_share: round(mainCpu / seconds, 2),
      main_thread_busy_share: round(busy, 2),
      // Runnable but waiting for a core: counted as busy above, it is the machine's, not ours.
      main_thread_waiting_for_cpu_share: round(mainWaiting / seconds, 2),
      server_written_kb_per_order: round(written / 1024 / ORDERS, 1),
      commits_per_order: round((counters.commits - counters0.commits) / ORDERS, 2),
      // Shared mode: results, dispatches, signals and cancels sent to another node's inbox.
      forwards_per_order: round((counters.forwards - counters0.forwards) / ORDERS, 2),
      // Shared mode: claim statements run, and notifications sent (every channel), per order.
      claims_per_order: round((counters.claims - counters0.claims) / ORDERS, 2),
      // Shared mode: dispatches from a server's own queue that their commit refused.
      refused_takes_per_order: round((counters.refusedTakes - counters0.refusedTakes) / ORDERS, 2),
      notifications_per_order: round(
        (counters.notifications - counters0.notifications) / ORDERS,
        2,
      ),
      // HTTP requests the servers answered (the bench's own /v1/metrics reads included: 2 per
      // server), per order.
      requests_per_order: round((counters.requests - counters0.requests) / ORDERS, 2),
      events_per_commit: round(
        (counters.events - counters0.events) / (counters.commits - counters0.commits),
        1,
      ),
      commit_ms_avg: round(
        ((counters.commitSeconds - counters0.commitSeconds) * 1000) /
          (counters.commits - counters0.commits),
        2,
      ),
      cycle_p50_ms: cycle.p50_ms,
      cycle_p99_ms: cycle.p99_ms,
      // PostgreSQL's CPU per order by connection role, and (--pg-statements) its statements.
      postgres_cpu_ms_per_order_by_role: pgDetail?.byRole ?? null,
      postgres_statements_per_order: pgDetail?.statementsPerOrder ?? null,
      postgres_statements: pgDetail?.statements ?? null,
      // WAL PostgreSQL wrote during the run (every connection, checkpoints' full-page images too).
      postgres_wal_kb_per_order: pgDetail?.walKbPerOrder ?? null,
    };
  } finally {
    await pgStats?.close();
    for (const client of clients) client.close();
    for (const w of workers) await w.kill(WORKER_PROF ? "SIGTERM" : "SIGKILL");
    for (const w of pythonWorkers) await w.kill("SIGKILL");
    for (const w of grpcWorkers) await w.kill("SIGKILL");
    for (const w of compiledWorkers) await w.process.kill("SIGKILL");
    await cluster.kill(Deno.env.get("ORBIT_BENCH_CPU_PROF") ? "SIGTERM" : "SIGKILL");
  }
}

const stores = SHARED > 0
  ? ["postgres"] as const
  : values.store === "both"
  ? ["sqlite", "postgres"] as const
  : [values.store as "sqlite" | "postgres"];
const results = [];
for (const s of stores) {
  const r = await bench(s);
  results.push(r);
  console.log(
    `${r.store}: ${r.orders_per_s} orders/s, p50 ${r.p50_ms} ms, p99 ${r.p99_ms} ms, server peak RSS ${r.server_peak_rss_mb} MB, ${r.server_rss_mb_after} MB after (${r.orders} orders, ${r.clients} clients, workers: ${r.ts_workers} TypeScript, ${r.python_workers} Python${
      COMPILED.map((l) => `, ${r[`${l}_workers`]} ${LANGUAGE_NAMES[l]}`).join("")
    }${r.waiting ? `, ${r.waiting} executions waiting` : ""}${
      r.warmup ? `, after ${r.warmup} warm-up orders` : ""
    }; ${r.seconds} s)\n` +
      `  CPU per order: server ${r.server_cpu_ms_per_order} ms, workers ${r.worker_cpu_ms_per_order} ms, whole machine ${r.machine_cpu_ms_per_order} ms (server ${r.server_cpu_s} s, workers ${r.worker_cpu_s} s; PostgreSQL ${r.postgres_cpu_ms_per_order} ms, this bench's clients${
        SHARED > 0 && !values["no-proxy"] && !SPREAD ? " and proxy" : ""
      } ${r.bench_cpu_ms_per_order} ms per order)\n` +
      `  worker cycle p50 ${r.cycle_p50_ms} ms, p99 ${r.cycle_p99_ms} ms; ${r.requests_per_order} HTTP requests and ${r.commits_per_order} commits per order (${r.events_per_commit} events, ${r.commit_ms_avg} ms each; server wrote ${r.server_written_kb_per_order} KB per order${
        SHARED > 0
          ? `; ${r.forwards_per_order} forwards to an owner and ${r.refused_takes_per_order} refused takes per order`
          : ""
      }); server main thread busy ${Math.round(r.main_thread_busy_share * 100)} % (on CPU ${
        Math.round(r.main_thread_cpu_share * 100)
      } %, waiting for a core ${Math.round(r.main_thread_waiting_for_cpu_share * 100)} %)`,
  );
  if (r.server_cpus !== null || r.servers.length > 1) {
    console.log(
      `  CPU per order by server${
        r.server_cpus !== null ? ` (each capped at ${r.server_cpus} CPU: ${r.server_cap})` : ""
      }: ${describeShares(r.servers)}`,
    );
  }
  if (r.worker_cpu_ms_per_order_by_language) {
    console.log(
      `  worker CPU per order by language: ${
        Object.entries(r.worker_cpu_ms_per_order_by_language).map(([l, ms]) =>
          `${
            LANGUAGE_NAMES[l] ?? (l === "typescript-grpc" ? "TypeScript over gRPC" : l)
          } ${ms} ms (${r.tasks_by_language?.[l] ?? 0} tasks, ${
            r.worker_cpu_ms_per_task_by_language?.[l] ?? "–"
          } ms per task)`
        ).join(", ")
      }`,
    );
  }
  if (r.postgres_cpu_ms_per_order_by_role) {
    const roles = Object.entries(r.postgres_cpu_ms_per_order_by_role).sort((a, b) => b[1] - a[1]);
    console.log(
      `  PostgreSQL CPU per order by connection: ${
        roles.map(([k, v]) => `${k} ${v} ms`).join(", ")
      }; WAL ${r.postgres_wal_kb_per_order} KB per order`,
    );
  }
  if (r.postgres_statements_per_order !== null) {
    console.log(
      `  PostgreSQL statements: ${r.postgres_statements_per_order} per order; by execution time:`,
    );
  }
  for (const st of r.postgres_statements ?? []) {
    console.log(
      `  ${st.calls_per_order.toFixed(3)} calls/order × ${st.ms_per_call.toFixed(3)} ms = ${
        st.ms_per_order.toFixed(3)
      } ms/order, WAL ${st.wal_kb_per_call.toFixed(1)} KB/call  ${st.statement}`,
    );
  }
}
await stopSharedPostgres();
const left = CPU_CAPS?.removeSync() ?? [];
if (left.length) console.error(`  CPU cgroups not removed (a process still in them): ${left}`);
console.log(JSON.stringify(results));
