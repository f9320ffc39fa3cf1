/**
 * Shared mode with bounded memory (`--cache-executions`, lib/executions/cache.ts): an owned
 * execution that only waits leaves its owner's memory past the cap, as on one server, and
 * whatever reaches it later loads it from history on its owner — a signal through the owner or
 * through another server (the inbox), a timer coming due (the owner's wake-up poll lists only
 * what it owns), a takeover after the owner died (which loads only executions with work due).
 * `/v1/health` `owned_executions` counts owned executions in memory or not.
 */
import assert from "node:assert/strict";
import { api, waitFor } from "./support/server.ts";
import { sharedPostgres } from "./support/pg.ts";
import {
  type NodeProcess,
  type SharedCluster,
  startSharedCluster,
} from "./support/shared_cluster.ts";

const T = { sanitizeOps: false, sanitizeResources: false };

const WAITER = {
  ir: "orbit-ir/2",
  name: "CacheWaiter",
  version: "1.0.0",
  signals: { go: {} },
  steps: [
    { id: "w", wait_signal: "go" },
    { id: "r", return: "{% $steps.w %}" },
  ],
};

/** Sleeps longer than the eviction horizon (60 s), so the execution may leave memory. */
const NAP_S = 66;
const NAP = {
  ir: "orbit-ir/2",
  name: "CacheNap",
  version: "1.0.0",
  steps: [{ id: "nap", sleep_s: NAP_S }, { id: "r", return: "rested" }],
};

async function withTwo(
  args: string[],
  fn: (c: SharedCluster, a: NodeProcess, b: NodeProcess) => Promise<void>,
): Promise<void> {
  const db = await (await sharedPostgres()).createDatabase();
  const c = await startSharedCluster({ db, nodes: 2, proxy: false, args });
  try {
    await fn(c, c.nodes[0]!, c.nodes[1]!);
  } finally {
    await c.close();
  }
}

/** Starts through `n` (which then owns it). */
async function start(n: NodeProcess, body: Record<string, unknown>): Promise<void> {
  const r = await n.api().post("/v1/executions", body);
  assert.equal(r.status, 201, JSON.stringify(r.body));
}

const cached = (n: NodeProcess) => n.metric("orbit_cached_executions");

// deno-lint-ignore no-explicit-any
async function historyOf(base: string, id: string): Promise<any[]> {
  const r = await api(base).get(`/v1/executions/${id}/history`);
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body.events;
}

async function assertCompletedOnce(base: string, id: string, output: unknown): Promise<void> {
  const row = await api(base).get(`/v1/executions/${id}`);
  assert.equal(row.body.status, "completed", `${id}: ${JSON.stringify(row.body)}`);
  assert.deepEqual(row.body.output, output);
  const types = (await historyOf(base, id)).map((e: { type: string }) => e.type);
  assert.equal(types.filter((t) => t === "WorkflowCompleted").length, 1, `${id}: ${types}`);
}

async function allCompleted(base: string, ids: string[]): Promise<boolean> {
  for (const id of ids) {
    if ((await api(base).get(`/v1/executions/${id}`)).body.status !== "completed") return false;
  }
  return true;
}

Deno.test({
  ...T,
  name: "shared --cache-executions: waiting executions leave the owner's memory; signals through " +
    "the owner and through another server (its inbox) load them, each completes once",
  fn: () =>
    withTwo(["--cache-executions", "5"], async (_c, a, b) => {
      assert.equal((await a.api().post("/v1/workflows", WAITER)).status, 201);
      const ids = Array.from({ length: 30 }, (_, i) => `cw-${i}`);
      for (const id of ids) await start(a, { workflow: "CacheWaiter", execution_id: id });
      await waitFor(
        async () => (await cached(a)) <= 5,
        "the owner's orbit_cached_executions to drop to the cap",
        20_000,
      );
      // Owned, in memory or not.
      const h = await a.health();
      assert.equal(h.owned_executions, 30, JSON.stringify(h));
      assert.equal(h.active_executions, 30, JSON.stringify(h));
      assert.equal(await a.metric("orbit_active_executions"), 30);
      assert.equal(h.nodes.find((n) => n.node_id === a.id)?.owned_executions, 30);
      assert.equal((await b.health()).owned_executions, 0);

      // Waits through both servers on executions out of memory end when they complete.
      const waits = [a, b].map((n, i) => n.api().get(`/v1/executions/${ids[i]}/wait?timeout_s=60`));
      // Half through the owner, half through the other server (its inbox), concurrently.
      const answers = await Promise.all(ids.map(async (id, i) => {
        const via = i % 2 === 0 ? b : a;
        const r = await via.api().post(`/v1/executions/${id}/signals/go`, { payload: id });
        return { id, via: via.id, status: r.status, body: r.body };
      }));
      for (const r of answers) {
        assert.equal(r.status, 200, `${r.id} via ${r.via}: ${JSON.stringify(r.body)}`);
        assert.equal(typeof r.body.seq, "number", JSON.stringify(r.body));
      }
      await waitFor(() => allCompleted(a.url, ids), "every execution to complete", 30_000);
      for (const [i, w] of (await Promise.all(waits)).entries()) {
        assert.equal(w.body.status, "completed", JSON.stringify(w.body));
        assert.equal(w.body.output, ids[i]);
      }
      for (const id of ids) {
        await assertCompletedOnce(a.url, id, id);
        const types = (await historyOf(a.url, id)).map((e: { type: string }) => e.type);
        assert.equal(types.filter((t) => t === "SignalReceived").length, 1, `${id}: ${types}`);
      }
      // The other server never held them: it validated and forwarded.
      assert.equal(await cached(b), 0);
      assert.equal(b.logs.filter((l) => /execution completed/.test(l)).length, 0);
      await waitFor(async () => (await a.health()).owned_executions === 0, "owned to drop to 0");
      assert.equal(await a.metric("orbit_active_executions"), 0);
    }),
});

Deno.test({
  ...T,
  name: "shared --cache-executions: the timer of an evicted execution fires on its owner, and " +
    "only there",
  fn: () =>
    withTwo(["--cache-executions", "0"], async (_c, a, b) => {
      assert.equal((await a.api().post("/v1/workflows", NAP)).status, 201);
      const ids = Array.from({ length: 4 }, (_, i) => `nap-${i}`);
      for (const id of ids) await start(a, { workflow: "CacheNap", execution_id: id });
      await waitFor(async () => (await cached(a)) === 0, "the sleeping executions to leave", 5_000);
      assert.equal((await a.health()).owned_executions, ids.length);
      // Until the timers fire, the other server's wake-up poll never takes them.
      let otherHeld = 0;
      await waitFor(
        async () => {
          otherHeld = Math.max(otherHeld, await cached(b));
          return await allCompleted(a.url, ids);
        },
        "the sleeps to end",
        (NAP_S + 30) * 1000,
        250,
      );
      assert.equal(otherHeld, 0);
      for (const id of ids) {
        await assertCompletedOnce(a.url, id, "rested");
        const types = (await historyOf(a.url, id)).map((e: { type: string }) => e.type);
        assert.equal(types.filter((t) => t === "TimerFired").length, 1, `${id}: ${types}`);
        assert.ok(
          a.logs.some((l) => l.includes(`execution completed execution_id=${id}`)),
          `${id} completed on its owner`,
        );
      }
      assert.equal(
        b.logs.filter((l) => /execution completed|dropped an execution/.test(l)).length,
        0,
      );
    }),
});

Deno.test({
  ...T,
  name: "shared --cache-executions: the owner is killed while its executions are out of memory; " +
    "the survivor takes them over without loading them and completes them",
  fn: () =>
    withTwo(["--cache-executions", "5"], async (_c, a, b) => {
      assert.equal((await a.api().post("/v1/workflows", WAITER)).status, 201);
      const ids = Array.from({ length: 20 }, (_, i) => `ck-${i}`);
      for (const id of ids) await start(a, { workflow: "CacheWaiter", execution_id: id });
      await waitFor(async () => (await cached(a)) <= 5, "the owner's cache to drop to the cap");
      await a.kill();
      // Nothing of them is due: the takeover counts them all and loads none.
      const line = await b.waitForLog(/shared: took ownership of executions .*from=node-1/, 30_000);
      assert.match(line, new RegExp(`executions=${ids.length} in_flight=0 `));
      await b.waitForLog(
        new RegExp(`only wait stay out of memory executions=${ids.length} from=node-1`),
        5_000,
      );
      const h = await b.health();
      assert.equal(h.owned_executions, ids.length, JSON.stringify(h));
      assert.equal(await cached(b), 0);
      const answers = await Promise.all(
        ids.map((id) => b.api().post(`/v1/executions/${id}/signals/go`, { payload: id })),
      );
      answers.forEach((r, i) =>
        assert.equal(r.status, 200, `${ids[i]}: ${JSON.stringify(r.body)}`)
      );
      await waitFor(() => allCompleted(b.url, ids), "every execution to complete", 30_000);
      for (const id of ids) await assertCompletedOnce(b.url, id, id);
      await waitFor(async () => (await b.health()).owned_executions === 0, "owned to drop to 0");
    }),
});

Deno.test({
  ...T,
  name: "shared --cache-executions: a restart under the same node id resumes its waiting " +
    "executions without loading them; they still answer and complete",
  fn: async () => {
    const db = await (await sharedPostgres()).createDatabase();
    const c = await startSharedCluster({
      db,
      nodes: 1,
      proxy: false,
      args: ["--cache-executions", "5"],
    });
    try {
      const a = c.nodes[0]!;
      assert.equal((await a.api().post("/v1/workflows", WAITER)).status, 201);
      const ids = Array.from({ length: 12 }, (_, i) => `cr-${i}`);
      for (const id of ids) await start(a, { workflow: "CacheWaiter", execution_id: id });
      await waitFor(async () => (await cached(a)) <= 5, "the cache to drop to the cap");
      await a.restart("SIGTERM");
      await a.waitForLog(
        new RegExp(`shared: node is serving node_id=node-1 resumed=${ids.length}$`),
      );
      assert.equal(await cached(a), 0);
      assert.equal((await a.health()).owned_executions, ids.length);
      for (const id of ids) {
        const r = await a.api().post(`/v1/executions/${id}/signals/go`, { payload: id });
        assert.equal(r.status, 200, JSON.stringify(r.body));
      }
      await waitFor(() => allCompleted(a.url, ids), "every execution to complete", 30_000);
      for (const id of ids) await assertCompletedOnce(a.url, id, id);
      await waitFor(async () => (await a.health()).owned_executions === 0, "owned to drop to 0");
    } finally {
      await c.close();
    }
  },
});
