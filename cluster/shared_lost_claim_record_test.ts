/**
 * Shared mode, in process on a real PostgreSQL (issue 36): a queued task row claimed by a
 * server whose `dispatched` entry, or whose own recording, never reached the owner's history
 * (lost with a cut connection or a takeover) held the row, and the execution, for ever: the
 * owner's memory had the step queued and offered it, nobody could claim the row, and the
 * claim's worker (if it got the task) had its result refused. The owner's audit puts such a row
 * back on the queue once its claim is stale, and the step reaches a worker again.
 */
import assert from "node:assert/strict";
import { migratedDatabase } from "../tests/support/pg.ts";
import { ORDER_WORKFLOW, orderInput } from "../tests/support/orders.ts";
import { deployAndStart, startedNode } from "../tests/support/in_process_node.ts";
import { waitFor } from "../tests/support/server.ts";
import { postgresClient } from "../lib/store/postgres.ts";

Deno.test({
  name: "shared: a claim whose dispatch the owner never recorded goes back on the queue",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const url = await migratedDatabase();
    const a = await startedNode(url, "node-a");
    const sql = postgresClient(url, { max: 1, applicationName: "orbit-test" });
    try {
      await deployAndStart(a, [ORDER_WORKFLOW], {
        workflow: "OrderProcessing",
        execution_id: "lc-1",
        input: orderInput("lc-1"),
      });
      // The claim of another server whose `dispatched` entry is gone: the row is claimed, 20 s
      // ago, by a session nobody has; no inbox entry; the history shows the step scheduled.
      const claimed = await sql.unsafe(
        `UPDATE orbit_tasks SET state = 'claimed', token = 'lc-1/00000000-0000-4000-8000-000000000001',
           claimed_by = 'node-gone', session_id = 'gone', claimed_ms = $1
         WHERE execution_id = 'lc-1' AND state = 'queued' RETURNING unit`,
        [Date.now() - 20_000],
      );
      assert.equal(claimed.length, 1);
      const tasks = [{ name: "orders.validate", contract: "1" }];
      const reg = await a.call("POST", "/v1/workers/register", {
        worker_id: "w-1",
        tasks,
        concurrency: 1,
      });
      const got = await waitFor(
        async () => {
          const p = await a.call("POST", "/v1/workers/poll", {
            session_id: reg.body.session_id,
            wait_s: 1,
          });
          assert.equal(p.status, 200, JSON.stringify(p.body));
          return p.body.tasks?.[0];
        },
        "the audit to requeue the stale claim and the step to reach the worker",
        40_000,
      );
      assert.equal(got.step, "validate");
      assert.equal(got.attempt, 1);
      const h = await a.call("GET", "/v1/executions/lc-1/history");
      const dispatched = (h.body.events as Array<{ type: string; token?: string }>)
        .filter((e) => e.type === "StepDispatched");
      assert.deepEqual(dispatched.map((e) => e.token), [got.token]);
      assert.equal(a.n.runtime!.metrics.staleClaimsRequeued.get(), 1);
    } finally {
      await a.n.stop();
      await sql.end({ timeout: 1 });
    }
  },
});
