/**
 * `GET /v1/executions/{id}/pending` ("why is it waiting?") in shared mode, in process on a
 * real PostgreSQL: worker sessions live in `orbit_sessions` and a worker may talk to any
 * server, so the answer judges a task by the sessions of the whole cluster, on the owner and
 * on any other server alike. A worker polling another server is not "no worker", and the
 * worker holding an attempt is not "gone" because it registered elsewhere.
 */
import assert from "node:assert/strict";
import { migratedDatabase } from "../tests/support/pg.ts";
import { ORDER_WORKFLOW, orderInput } from "../tests/support/orders.ts";
import { deployAndStart, startedNode } from "../tests/support/in_process_node.ts";
import { waitFor } from "../tests/support/server.ts";

Deno.test({
  name: "shared: /pending sees the worker sessions of every server",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const url = await migratedDatabase();
    const a = await startedNode(url, "node-a");
    const b = await startedNode(url, "node-b");
    try {
      await deployAndStart(a, [ORDER_WORKFLOW], {
        workflow: "OrderProcessing",
        execution_id: "pd-1",
        input: orderInput("pd-1"),
      });
      // The worker talks to node B only; node A owns pd-1.
      const reg = await b.call("POST", "/v1/workers/register", {
        worker_id: "w-b",
        tasks: [{ name: "orders.validate", contract: "1" }],
        concurrency: 1,
      });
      assert.equal(reg.status, 200, JSON.stringify(reg.body));
      const item = async (node: typeof a) => {
        const r = await node.call("GET", "/v1/executions/pd-1/pending");
        assert.equal(r.status, 200, JSON.stringify(r.body));
        const it = (r.body.pending as { step: string }[]).find((p) => p.step === "validate");
        assert.ok(it, JSON.stringify(r.body));
        return it as unknown as Record<string, unknown>;
      };
      // Queued: a session with a free slot serves it, whichever server it registered with.
      for (const node of [a, b]) {
        const it = await item(node);
        assert.equal(it.reason, "QUEUED_FOR_POLL", JSON.stringify(it));
        assert.equal(it.sessions, 1, JSON.stringify(it));
      }
      // Node B hands the task to the worker; node A records the dispatch from its inbox.
      const poll = await b.call("POST", "/v1/workers/poll", {
        session_id: reg.body.session_id,
        wait_s: 5,
      });
      assert.equal(poll.body.tasks?.[0]?.step, "validate", JSON.stringify(poll.body));
      await waitFor(async () => {
        const h = await a.call("GET", "/v1/executions/pd-1/history");
        return (h.body.events as { type: string }[]).some((e) => e.type === "StepDispatched");
      }, "node A to record the dispatch");
      for (const node of [a, b]) {
        const it = await item(node);
        assert.equal(it.reason, "DISPATCHED", JSON.stringify(it));
        assert.equal(it.worker_id, "w-b", JSON.stringify(it));
        assert.equal(it.session_id, reg.body.session_id, JSON.stringify(it));
      }
    } finally {
      await b.n.stop();
      await a.n.stop();
    }
  },
});
