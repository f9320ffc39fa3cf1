/**
 * Shared mode behind the round-robin proxy: an order's steps stay on the server that owns it.
 * The TypeScript worker polls and reports on one connection per slot (the proxy keeps a
 * connection on one server), a server's claim prefers the executions it owns, and a result's
 * answer carries the next step; so a result seldom reaches a server that must forward it to the
 * owner's inbox. Before the per-slot connections, a pooled `fetch` sent two thirds of the
 * results to a server that did not own them (about 4.5 forwards per order of six steps). The
 * load is the bench's shape (more clients than worker slots), where every server has queued
 * rows of its own to prefer.
 */
import assert from "node:assert/strict";
import { sharedPostgres } from "./support/pg.ts";
import { ORDER_STEPS, ORDER_WORKFLOW, retrying, runOrders } from "./support/orders.ts";
import { startSharedCluster } from "./support/shared_cluster.ts";

const ORDERS = 96;

Deno.test({
  name: "shared: behind the proxy, an order's results reach the server that owns it",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const db = await (await sharedPostgres()).createDatabase();
    const c = await startSharedCluster({ db, nodes: 3 });
    try {
      c.startWorker();
      const dep = await retrying(() => c.lb.post("/v1/workflows", ORDER_WORKFLOW));
      assert.ok(dep.status === 201 || dep.status === 200, JSON.stringify(dep.body));
      const ids = Array.from({ length: ORDERS }, (_, i) => `aff-${i + 1}`);
      const statuses = await runOrders(() => c.proxy.url, ids, 32);
      for (const id of ids) assert.equal(statuses.get(id), "completed", id);

      const started = await Promise.all(
        c.nodes.map((n) => n.metric("orbit_executions_started_total")),
      );
      assert.ok(
        started.filter((n) => n > 0).length >= 2,
        `orders owned by several servers: ${started.join("/")}`,
      );
      const forwarded = await Promise.all(
        c.nodes.map((n) => n.metric("orbit_commands_forwarded_total")),
      );
      const total = forwarded.reduce((a, b) => a + b, 0);
      const results = ORDERS * ORDER_STEPS.length;
      console.log(
        `${total} commands forwarded to an owner for ${results} results ` +
          `(${(total / ORDERS).toFixed(2)} per order; started per node ${started.join("/")})`,
      );
      // Pooled connections forwarded about two thirds of the results and a dispatch with most
      // (~4.5 per order, 430 here); kept on their owners, 28-168 in runs of this test alone,
      // 203 and 294 in CI with every other suite on the same two cores. Orders still cross
      // while slots idle: a queued row whose owner has no poll waiting is taken at once by an
      // idle slot elsewhere (worth more than the forwards it costs), and a loaded machine idles
      // more, so the bound is loose: below what pooled connections did.
      assert.ok(total <= (results * 2) / 3, `${total} forwards for ${results} results`);
    } finally {
      await c.close();
    }
  },
});
