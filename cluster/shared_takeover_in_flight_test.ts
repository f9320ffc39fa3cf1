/**
 * Shared mode's takeover and the attempts in flight (reference page, "Ownership": after a
 * takeover "attempts in flight stay in flight while their workers are alive"; "Failure
 * handling": an attempt the dead server handed out is redelivered after the session timeout if
 * its result has not arrived). In process, two nodes on a real PostgreSQL, the page's
 * --session-timeout 3 (the in-process nodes' node timeout is 2 s).
 */
import assert from "node:assert/strict";
import { migratedDatabase } from "../tests/support/pg.ts";
import { ORDER_WORKFLOW, orderInput } from "../tests/support/orders.ts";
import { deployAndStart, startedNode } from "../tests/support/in_process_node.ts";
import { waitFor } from "../tests/support/server.ts";
import { postgresClient } from "../lib/store/postgres.ts";

const SESSION_TIMEOUT_MS = 3000;

Deno.test({
  name: "shared: an attempt a live server handed out stays in flight across a takeover while " +
    "its worker is alive, and its result is accepted once",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const url = await migratedDatabase();
    const a = await startedNode(url, "node-a");
    const b = await startedNode(url, "node-b");
    const sql = postgresClient(url, { max: 1, applicationName: "orbit-test" });
    try {
      await deployAndStart(a, [ORDER_WORKFLOW], {
        workflow: "OrderProcessing",
        execution_id: "tf-1",
        input: orderInput("tf-1"),
      });
      // The worker is served by B; B's claim hands out the validate of tf-1, owned by A.
      const reg = await b.call("POST", "/v1/workers/register", {
        worker_id: "w-1",
        tasks: [{ name: "orders.validate", contract: "1" }],
        concurrency: 1,
      });
      const session = reg.body.session_id;
      const poll = await b.call("POST", "/v1/workers/poll", { session_id: session, wait_s: 5 });
      const task = poll.body.tasks?.[0];
      assert.ok(task, JSON.stringify(poll.body));
      const types = async () =>
        ((await b.call("GET", "/v1/executions/tf-1/history")).body.events as { type: string }[])
          .map((e) => e.type);
      await waitFor(async () => (await types()).includes("StepDispatched"), "A to record it");
      // A dies (no leave); B takes tf-1 over after the node timeout.
      await a.n.abort();
      await waitFor(
        async () => {
          const [o] = await sql.unsafe(
            "SELECT node_id FROM orbit_owners WHERE execution_id = 'tf-1'",
            [],
          );
          return o?.node_id === "node-b";
        },
        "node B to take tf-1 over",
        15_000,
      );
      const tookAt = Date.now();
      // The worker runs past a session timeout after the takeover, alive: it heartbeats the
      // attempt through B as the SDK does every second.
      while (Date.now() - tookAt < SESSION_TIMEOUT_MS + 2500) {
        const hb = await b.call("POST", "/v1/workers/heartbeat", {
          session_id: session,
          tokens: [task.token],
        });
        assert.equal(hb.status, 200, JSON.stringify(hb.body));
        assert.deepEqual(hb.body.cancel ?? [], []);
        await new Promise((r) => setTimeout(r, 500));
      }
      const done = await b.call("POST", "/v1/tasks/complete", {
        token: task.token,
        output: { ok: true, total: 42 },
      });
      assert.equal(done.status, 200, JSON.stringify(done.body));
      assert.equal(done.body.accepted, true);
      const after = await types();
      assert.equal(after.filter((t) => t === "StepAttemptUncertain").length, 0, after.join(","));
      assert.equal(after.filter((t) => t === "StepDispatched").length, 1, after.join(","));
      assert.equal(after.filter((t) => t === "StepSucceeded").length, 1, after.join(","));
    } finally {
      await sql.end({ timeout: 1 });
      await b.n.stop();
    }
  },
});
