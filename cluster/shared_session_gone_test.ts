/**
 * Shared mode's worker sessions, in process on a real PostgreSQL: a session another server
 * removed is forgotten by the server that caches it, so its worker hears 404 UNKNOWN_SESSION
 * (SPEC §4) and registers again, as on one server.
 */
import assert from "node:assert/strict";
import { migratedDatabase } from "../tests/support/pg.ts";
import { ORDER_WORKFLOW, orderInput } from "../tests/support/orders.ts";
import { startedNode } from "../tests/support/in_process_node.ts";
import { waitFor } from "../tests/support/server.ts";
import { postgresClient } from "../lib/store/postgres.ts";

Deno.test({
  name: "shared: a session removed by another server answers 404 UNKNOWN_SESSION on the server " +
    "that cached it, and its worker carries on with a new session",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    // Review: a server that could not write its sessions' contacts for longer than the session
    // timeout finds, when it can again, that another server expired them (EXPIRE_SESSIONS).
    // It trusted its cache and ignored that TOUCH_SESSIONS updated nothing, so the worker went
    // on polling and heartbeating through it with 200s, never registered again, and every
    // attempt it took for executions owned elsewhere was marked uncertain by their owner (no
    // session row) and redelivered, again and again.
    const url = await migratedDatabase();
    const a = await startedNode(url, "node-a");
    const b = await startedNode(url, "node-b");
    const sql = postgresClient(url, { max: 1, applicationName: "orbit-test" });
    try {
      assert.equal((await a.call("POST", "/v1/workflows", ORDER_WORKFLOW)).status, 201);
      const tasks = [{ name: "orders.validate", contract: "1" }];
      const reg = (worker_id: string) =>
        a.call("POST", "/v1/workers/register", { worker_id, tasks, concurrency: 1 });
      const s1 = (await reg("w")).body.session_id as string;
      // An execution owned by B; the worker, served by A, takes its first task.
      const start = await b.call("POST", "/v1/executions", {
        workflow: "OrderProcessing",
        execution_id: "sg-1",
        input: orderInput("sg-1"),
      });
      assert.equal(start.status, 201, JSON.stringify(start.body));
      const p = await a.call("POST", "/v1/workers/poll", { session_id: s1, wait_s: 5 });
      const first = p.body.tasks?.[0];
      assert.ok(first, JSON.stringify(p.body));
      // Another server expires the session (what EXPIRE_SESSIONS does there).
      await sql.unsafe("DELETE FROM orbit_sessions WHERE session_id = $1", [s1]);
      const gone = await waitFor(
        async () => {
          const h = await a.call("POST", "/v1/workers/heartbeat", {
            session_id: s1,
            tokens: [first.token],
          });
          return h.status === 404 ? h : null;
        },
        "A to answer the removed session's heartbeat with 404",
        5_000,
      );
      assert.equal(gone.body.error?.code, "UNKNOWN_SESSION", JSON.stringify(gone.body));
      const poll = await a.call("POST", "/v1/workers/poll", { session_id: s1, wait_s: 1 });
      assert.equal(poll.status, 404, JSON.stringify(poll.body));
      assert.equal(poll.body.error?.code, "UNKNOWN_SESSION");
      // The SDK registers again; the owner redelivered the attempt of the removed session once,
      // and the new session gets it.
      const s2 = (await reg("w")).body.session_id as string;
      const again = await waitFor(
        async () => {
          const r = await a.call("POST", "/v1/workers/poll", { session_id: s2, wait_s: 1 });
          assert.equal(r.status, 200, JSON.stringify(r.body));
          return r.body.tasks?.[0];
        },
        "the redelivery at the new session",
        10_000,
      );
      assert.equal(again.step, "validate");
      assert.equal(again.redelivery, true);
      assert.equal(again.idempotency_key, first.idempotency_key);
      // The owner records the claim's dispatch from its inbox.
      type Event = { type: string; worker_session?: string };
      const events = await waitFor(
        async () => {
          const h = await b.call("GET", "/v1/executions/sg-1/history");
          const events = h.body.events as Event[];
          return events.some((e) => e.type === "StepDispatched" && e.worker_session === s2)
            ? events
            : null;
        },
        "the owner to record the redelivery's dispatch",
        10_000,
      );
      assert.deepEqual(
        events.filter((e) => e.type === "StepDispatched").map((e) => e.worker_session),
        [s1, s2],
      );
      assert.equal(events.filter((e) => e.type === "StepAttemptUncertain").length, 1);
    } finally {
      await a.n.stop();
      await b.n.stop();
      await sql.end({ timeout: 1 });
    }
  },
});
