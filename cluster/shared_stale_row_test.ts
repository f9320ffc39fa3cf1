/**
 * Shared mode, in process on a real PostgreSQL: a queued row of a unit the step no longer waits
 * for, claimed by the execution's own node (cluster/shared/claims.ts, claim), is cancelled;
 * the current unit's row reaches the worker.
 */
import assert from "node:assert/strict";
import { migratedDatabase } from "../tests/support/pg.ts";
import { ORDER_WORKFLOW, orderInput } from "../tests/support/orders.ts";
import { deployAndStart, startedNode } from "../tests/support/in_process_node.ts";
import { waitFor } from "../tests/support/server.ts";
import { postgresClient } from "../lib/store/postgres.ts";

Deno.test({
  name: "shared: the owner claiming its own out-of-date queued row cancels it and hands out the " +
    "redelivery",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    // Review: a dispatch commit that landed but reported an error puts its row (unit .../0) back
    // on the queue; the rebuild marks the attempt uncertain and queues unit .../1. The owner's
    // next claim took .../0 (the oldest) and dispatched it; the commit took .../1's row with the
    // token already on .../0 (orbit_tasks_token_idx), failed, requeued .../0, and so on: the
    // redelivery never reached a worker polling the owner.
    const url = await migratedDatabase();
    const a = await startedNode(url, "node-a");
    const sql = postgresClient(url, { max: 1, applicationName: "orbit-test" });
    try {
      await deployAndStart(a, [ORDER_WORKFLOW], {
        workflow: "OrderProcessing",
        execution_id: "sr-1",
        input: orderInput("sr-1"),
      });
      const tasks = [{ name: "orders.validate", contract: "1" }];
      const reg1 = await a.call("POST", "/v1/workers/register", {
        worker_id: "w-1",
        tasks,
        concurrency: 1,
      });
      const first = await a.call("POST", "/v1/workers/poll", {
        session_id: reg1.body.session_id,
        wait_s: 5,
      });
      const t1 = first.body.tasks?.[0];
      assert.ok(t1, JSON.stringify(first.body));
      // What #claim's catch does when the dispatch's commit landed but answered an error: the
      // row goes back on the queue although the history shows the dispatch.
      await sql.unsafe(
        `UPDATE orbit_tasks SET state = 'queued', token = NULL, claimed_by = NULL,
           session_id = NULL, claimed_ms = NULL WHERE token = $1 AND state = 'claimed'`,
        [t1.token],
      );
      // w-1 falls silent: its session expires, the attempt turns uncertain and its redelivery
      // is queued as a second unit, younger than the stale row.
      await waitFor(
        async () => {
          const rows = await sql.unsafe(
            "SELECT unit FROM orbit_tasks WHERE execution_id = 'sr-1' AND state = 'queued'",
            [],
          );
          return rows.length === 2;
        },
        "the redelivery queued beside the stale row",
        15_000,
      );
      const reg2 = await a.call("POST", "/v1/workers/register", {
        worker_id: "w-2",
        tasks,
        concurrency: 1,
      });
      const got = await waitFor(
        async () => {
          const p = await a.call("POST", "/v1/workers/poll", {
            session_id: reg2.body.session_id,
            wait_s: 1,
          });
          assert.equal(p.status, 200, JSON.stringify(p.body));
          return p.body.tasks?.[0];
        },
        "the redelivered validate at the owner's only worker slot",
        10_000,
      );
      assert.equal(got.step, "validate");
      assert.equal(got.attempt, 1);
      assert.equal(got.redelivery, true);
      assert.equal(got.idempotency_key, t1.idempotency_key);
      const rows = await sql.unsafe<{ token: string; state: string }[]>(
        "SELECT token, state FROM orbit_tasks WHERE execution_id = 'sr-1' ORDER BY unit",
        [],
      );
      assert.deepEqual(rows.map((r) => r.state), ["cancelled", "claimed"]);
      assert.equal(rows[1]!.token, got.token);
      // The history shows the redelivery dispatched to w-2, once.
      const h = await a.call("GET", "/v1/executions/sr-1/history");
      const dispatched = (h.body.events as Array<{ type: string; worker_session?: string }>)
        .filter((e) => e.type === "StepDispatched");
      assert.deepEqual(dispatched.map((e) => e.worker_session), [
        reg1.body.session_id,
        reg2.body.session_id,
      ]);
    } finally {
      await a.n.stop();
      await sql.end({ timeout: 1 });
    }
  },
});
