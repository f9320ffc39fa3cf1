/**
 * Shared mode's takeover when its statement's answer is lost (in process, on a real
 * PostgreSQL): the takeover commits, the node hears an error, and the executions it now owns
 * must still come into its memory — nobody else takes them, since this node is alive.
 */
import assert from "node:assert/strict";
import { TAKE_OVER } from "../sql/postgres/shared/mod.ts";
import { sharedPostgres } from "../tests/support/pg.ts";
import { ORDER_WORKFLOW, orderInput } from "../tests/support/orders.ts";
import { inProcessNode, startedNode } from "../tests/support/in_process_node.ts";
import { waitFor } from "../tests/support/server.ts";

Deno.test({
  name: "shared: a takeover whose answer was lost still loads what it took (its queued task " +
    "is handed out)",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const url = await (await sharedPostgres()).createDatabase();
    const a = await startedNode(url, "node-a");
    let lost = 0;
    const b = inProcessNode(url, "node-b", {
      afterStatement: (text) => {
        if (text === TAKE_OVER && lost++ === 0) {
          throw new Error("write CONNECTION_CLOSED 127.0.0.1:5432");
        }
      },
    });
    try {
      assert.equal((await a.call("POST", "/v1/workflows", ORDER_WORKFLOW)).status, 201);
      const start = await a.call("POST", "/v1/executions", {
        workflow: "OrderProcessing",
        execution_id: "lt-1",
        input: orderInput("lt-1"),
      });
      assert.equal(start.status, 201, JSON.stringify(start.body));
      // Node A stops without leaving: its heartbeat goes stale, and B takes its executions.
      await a.n.abort();
      await b.n.open();
      await b.n.start(null);
      await waitFor(() => lost > 0, "B's takeover", 15_000, 100);
      const reg = await b.call("POST", "/v1/workers/register", {
        worker_id: "w-1",
        tasks: [{ name: "orders.validate", contract: "1" }],
        concurrency: 1,
      });
      assert.equal(reg.status, 200, JSON.stringify(reg.body));
      // The validate task queued under A: B owns the execution now, so its claim records the
      // dispatch — which needs the execution in B's memory.
      const task = await waitFor(
        async () => {
          const r = await b.call("POST", "/v1/workers/poll", {
            session_id: reg.body.session_id,
            wait_s: 1,
          });
          assert.equal(r.status, 200, JSON.stringify(r.body));
          return r.body.tasks[0];
        },
        "the queued task handed out by the new owner",
        20_000,
        0,
      );
      assert.equal(task.execution_id, "lt-1");
      assert.equal(task.step, "validate");
      const health = await b.call("GET", "/v1/health");
      assert.equal(health.body.owned_executions, 1);
    } finally {
      await b.n.stop();
      await a.n.abort();
    }
  },
});
