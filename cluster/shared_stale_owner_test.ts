/**
 * Shared mode, in process on a real PostgreSQL: a node whose memory still holds an execution
 * another node has taken over (it was paused, or its heartbeat wedged, and it has not noticed
 * yet) must not refuse a worker's result for a token the new owner issued. It confirms the
 * owner before refusing, lets the execution go, and the result reaches its owner.
 */
import assert from "node:assert/strict";
import { migratedDatabase } from "../tests/support/pg.ts";
import { ORDER_WORKFLOW, orderInput } from "../tests/support/orders.ts";
import { startedNode } from "../tests/support/in_process_node.ts";
import { postgresClient } from "../lib/store/postgres.ts";
import { TAKE_OVER } from "../sql/postgres/shared.ts";

Deno.test({
  name: "shared: a node holding an execution it lost hands a result for the new owner's token " +
    "to that owner instead of refusing it",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const url = await migratedDatabase();
    const a = await startedNode(url, "node-a");
    const b = await startedNode(url, "node-b");
    const sql = postgresClient(url, { max: 1, applicationName: "orbit-test" });
    try {
      assert.equal((await a.call("POST", "/v1/workflows", ORDER_WORKFLOW)).status, 201);
      const start = await a.call("POST", "/v1/executions", {
        workflow: "OrderProcessing",
        execution_id: "so-1",
        input: orderInput("so-1"),
      });
      assert.equal(start.status, 201, JSON.stringify(start.body));
      // Node B takes the tree over as it would from a silent node; node A's heartbeats go on,
      // so nothing makes it look at its ownership again: its memory still holds so-1.
      const took = await sql.unsafe(TAKE_OVER, ["node-b", ["so-1"], "node-a", Date.now()]);
      assert.equal(took.length, 1);
      // A worker polling B takes the queued validate: B loads so-1 and records the dispatch.
      const reg = await b.call("POST", "/v1/workers/register", {
        worker_id: "w-1",
        tasks: [{ name: "orders.validate", contract: "1" }],
        concurrency: 1,
      });
      assert.equal(reg.status, 200, JSON.stringify(reg.body));
      const poll = await b.call("POST", "/v1/workers/poll", {
        session_id: reg.body.session_id,
        wait_s: 5,
      });
      const task = poll.body.tasks?.[0];
      assert.ok(task, JSON.stringify(poll.body));
      // The result reaches node A (a balancer's choice). A does not know the token.
      const done = await a.call("POST", "/v1/tasks/complete", {
        token: task.token,
        output: { ok: true, total: 42 },
      });
      assert.equal(done.status, 200, JSON.stringify(done.body));
      assert.equal(done.body.accepted, true, JSON.stringify(done.body));
      const h = await b.call("GET", "/v1/executions/so-1/history");
      const events = h.body.events as { type: string; step?: string }[];
      assert.equal(
        events.filter((e) => e.type === "StepSucceeded" && e.step === "validate").length,
        1,
        events.map((e) => e.type).join(","),
      );
      assert.equal(events.filter((e) => e.type === "StepAttemptUncertain").length, 0);
      // Node A let the execution go.
      const health = await a.call("GET", "/v1/health");
      assert.equal(health.body.owned_executions, 0, JSON.stringify(health.body));
    } finally {
      await sql.end({ timeout: 1 });
      await b.n.stop();
      await a.n.stop();
    }
  },
});
