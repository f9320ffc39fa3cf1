/**
 * Shared mode, in process on a real PostgreSQL: a node whose memory still holds an execution
 * another node has taken over (it was paused, or its heartbeat wedged, and it has not noticed
 * yet) must not refuse a worker's result for a token the new owner issued. It confirms the
 * owner before refusing, lets the execution go, and the result reaches its owner. And the new
 * owner, loading the execution from history when the result comes, applies the attempt's
 * `dispatched` entry (written by another server's claim) before it decides the result.
 */
import assert from "node:assert/strict";
import { migratedDatabase } from "../tests/support/pg.ts";
import { ORDER_WORKFLOW, orderInput } from "../tests/support/orders.ts";
import { deployAndStart, startedNode, takeOverFrom } from "../tests/support/in_process_node.ts";
import { postgresClient } from "../lib/store/postgres.ts";
import { READ_INBOX } from "../sql/postgres/shared/mod.ts";

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
      await deployAndStart(a, [ORDER_WORKFLOW], {
        workflow: "OrderProcessing",
        execution_id: "so-1",
        input: orderInput("so-1"),
      });
      // Node B takes the tree over as it would from a silent node; node A's heartbeats go on,
      // so nothing makes it look at its ownership again: its memory still holds so-1.
      assert.equal(await takeOverFrom(sql, "node-a", b, ["so-1"]), 1);
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

Deno.test({
  name: "shared: the owner that loads an execution for a result first applies the attempt's " +
    "dispatch still in its inbox",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const url = await migratedDatabase();
    // Node A's own inbox reads fail for now: the `dispatched` entry waits there, as it does
    // while a takeover is still loading what it took.
    let readInbox = false;
    const a = await startedNode(url, "node-a", {
      afterStatement: (text) => {
        if (text === READ_INBOX && !readInbox) throw new Error("inbox read held back (test)");
      },
    });
    const b = await startedNode(url, "node-b");
    const sql = postgresClient(url, { max: 1, applicationName: "orbit-test" });
    try {
      await deployAndStart(b, [ORDER_WORKFLOW], {
        workflow: "OrderProcessing",
        execution_id: "so-2",
        input: orderInput("so-2"),
      });
      // Node A now owns so-2 but has not loaded it.
      assert.equal(await takeOverFrom(sql, "node-b", a, ["so-2"]), 1);
      // A worker polling B claims the queued validate: owned by A, B writes A's `dispatched`.
      const reg = await b.call("POST", "/v1/workers/register", {
        worker_id: "w-1",
        tasks: [{ name: "orders.validate", contract: "1" }],
        concurrency: 1,
      });
      const poll = await b.call("POST", "/v1/workers/poll", {
        session_id: reg.body.session_id,
        wait_s: 5,
      });
      const task = poll.body.tasks?.[0];
      assert.ok(task, JSON.stringify(poll.body));
      const [pending] = await sql.unsafe(
        "SELECT count(*)::int AS n FROM orbit_inbox WHERE execution_id = 'so-2' AND kind = 'dispatched'",
        [],
      );
      assert.equal(pending!.n, 1);
      // The result reaches node A, which loads so-2 from history to decide it.
      const done = await a.call("POST", "/v1/tasks/complete", {
        token: task.token,
        output: { ok: true, total: 42 },
      });
      assert.equal(done.status, 200, JSON.stringify(done.body));
      assert.equal(done.body.accepted, true, JSON.stringify(done.body));
      readInbox = true;
      const h = await a.call("GET", "/v1/executions/so-2/history");
      const types = (h.body.events as { type: string }[]).map((e) => e.type);
      assert.equal(types.filter((t) => t === "StepSucceeded").length, 1, types.join(","));
      assert.equal(types.filter((t) => t === "StepAttemptUncertain").length, 0, types.join(","));
    } finally {
      readInbox = true;
      await sql.end({ timeout: 1 });
      await b.n.stop();
      await a.n.stop();
    }
  },
});
