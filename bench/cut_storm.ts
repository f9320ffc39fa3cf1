/**
 * Issue 36's acceptance run: OrderProcessing under a storm of cut database connections. For each
 * seed: a fresh database, the mode's servers behind a TCP proxy to PostgreSQL that closes every
 * connection every 0.7–1.3 s (seeded), the example worker (concurrency 8) and 32 clients that
 * start an order and wait for it, until `--orders` have finished. Then the histories are read
 * from the database itself and checked (lib/store/history_check.ts: seqs 1..n, the row equal to
 * a replay, one StepSucceeded per step), and the longest time without an order finishing is
 * reported.
 *
 *   deno task bench:cuts [--mode single-pg|standby|shared] [--seeds 1-10] [--orders 600]
 *                        [--clients 32] [--cut-ms 700-1300]
 *
 * Prints one line per seed and exits 1 if any history is broken or any order did not finish.
 */
import { parseArgs } from "node:util";
import postgres from "postgres";
import { sharedPostgres, stopSharedPostgres } from "../tests/support/pg.ts";
import { startFaultProxy } from "../chaos/fault_proxy.ts";
import { Deployment, type Mode } from "../chaos/deployment.ts";
import { rng } from "../chaos/rng.ts";
import {
  ORDER_STEPS,
  ORDER_WORKFLOW,
  orderInput,
  startOrderWorker,
} from "../tests/support/orders.ts";
import { historyProblems } from "../lib/store/history_check.ts";
import type { HistoryEvent } from "../lib/engine/events.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: {
    mode: { type: "string", default: "single-pg" },
    seeds: { type: "string", default: "1-10" },
    orders: { type: "string", default: "600" },
    clients: { type: "string", default: "32" },
    "cut-ms": { type: "string", default: "700-1300" },
  },
});
const mode = values.mode as Mode;
if (!["single-pg", "standby", "shared"].includes(mode)) {
  console.error("--mode: single-pg, standby or shared");
  Deno.exit(2);
}
const range = (s: string) => s.split("-").map(Number) as [number, number];
const [firstSeed, lastSeed] = range(values.seeds);
const [cutLo, cutHi] = range(values["cut-ms"]);
const ORDERS = Number(values.orders);
const CLIENTS = Number(values.clients);

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function request(base: () => string, method: string, path: string, body?: unknown) {
  for (let i = 0;; i++) {
    try {
      const r = await fetch(`${base()}${path}`, {
        method,
        ...(body === undefined
          ? {}
          : { body: JSON.stringify(body), headers: { "content-type": "application/json" } }),
      });
      const json = await r.json().catch(() => null);
      if (r.status < 500) return { status: r.status, body: json };
    } catch { /* a connection error: retried like a 5xx */ }
    if (i > 600) throw new Error(`${method} ${path}: no answer below 500 in 60 s`);
    await sleep(100);
  }
}

async function run(seed: number): Promise<boolean> {
  const pg = await sharedPostgres();
  const db = await pg.createDatabase();
  const u = new URL(db);
  const link = startFaultProxy({ hostname: u.hostname, port: Number(u.port) });
  u.hostname = "127.0.0.1";
  u.port = String(link.port);
  const dir = await Deno.makeTempDir({ prefix: "orbit-cut-storm-" });
  const servers = mode === "shared" ? 3 : mode === "standby" ? 2 : 1;
  const d = new Deployment(mode, u.toString(), dir, servers, 0);
  let worker: ReturnType<typeof startOrderWorker> | null = null;
  let stop = false;
  let cuts = 0;
  const random = rng(seed);
  try {
    await d.start();
    const base = () => d.entry;
    const dep = await request(base, "POST", "/v1/workflows", ORDER_WORKFLOW);
    if (dep.status !== 201 && dep.status !== 200) throw new Error(JSON.stringify(dep.body));
    worker = startOrderWorker(d.entry, { ORDER_TRACE: "0" });
    const storm = (async () => {
      while (!stop) {
        await sleep(random.int(cutLo, cutHi));
        if (!stop) {
          link.drop();
          cuts++;
        }
      }
    })();
    const t0 = Date.now();
    let lastDone = t0;
    let longestStall = 0;
    let next = 0;
    const unfinished: string[] = [];
    const client = async () => {
      while (next < ORDERS) {
        const id = `cut-${seed}-${next++}`;
        await request(base, "POST", "/v1/executions", {
          workflow: "OrderProcessing",
          execution_id: id,
          input: orderInput(id),
        });
        for (let i = 0;; i++) {
          const w = await request(base, "GET", `/v1/executions/${id}/wait?timeout_s=10`);
          if (w.body?.status !== undefined && w.body.status !== "running") break;
          if (i >= 12) {
            unfinished.push(id);
            break;
          }
        }
        const now = Date.now();
        longestStall = Math.max(longestStall, now - lastDone);
        lastDone = now;
      }
    };
    await Promise.all(Array.from({ length: CLIENTS }, client));
    const elapsed = Date.now() - t0;
    stop = true;
    await storm;
    // The histories, straight from the database.
    const sql = postgres(db, { max: 1, onnotice: () => {} });
    const broken: string[] = [];
    try {
      const rows = await sql`SELECT execution_id, run_id, status, output, error,
        last_seq::int AS last_seq FROM workflow_executions`;
      for (const row of rows) {
        const events = (await sql`SELECT data FROM execution_events WHERE run_id = ${row.run_id}
          ORDER BY seq`).map((e) => e.data as HistoryEvent);
        const problems = historyProblems(
          row as unknown as Parameters<typeof historyProblems>[0],
          events,
        );
        for (const step of ORDER_STEPS) {
          const n = events.filter((e) =>
            e.type === "StepSucceeded" && (e as { step?: string }).step === step
          ).length;
          if (n !== 1 && row.status === "completed") {
            problems.push(`${n} StepSucceeded ${step}`);
          }
        }
        if (problems.length > 0) broken.push(`${row.execution_id}: ${problems.join("; ")}`);
      }
    } finally {
      await sql.end();
    }
    console.log(
      `${mode} seed ${seed}: ${ORDERS - unfinished.length}/${ORDERS} orders in ${
        (elapsed / 1000).toFixed(1)
      } s (${(ORDERS / (elapsed / 1000)).toFixed(1)}/s), ${cuts} cuts, longest stall ${
        (longestStall / 1000).toFixed(1)
      } s, broken histories ${broken.length}`,
    );
    for (const b of broken.slice(0, 10)) console.log(`  ${b}`);
    return broken.length === 0 && unfinished.length === 0;
  } finally {
    stop = true;
    await worker?.kill("SIGKILL");
    await d.close();
    await link.close();
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
}

let ok = true;
for (let seed = firstSeed; seed <= lastSeed; seed++) ok = (await run(seed)) && ok;
await stopSharedPostgres();
Deno.exit(ok ? 0 : 1);
