/**
 * Shared mode, in process on a real PostgreSQL: reads a node answers from its memory (queries,
 * `/pending`) must not come from an execution it may have lost. A node whose heartbeat has not
 * been written for a node timeout may have been judged dead and taken over; until its next
 * heartbeat has checked what it still owns, it answers those reads from the history, as a node
 * that does not hold the execution does.
 */
import assert from "node:assert/strict";
import { migratedDatabase } from "../tests/support/pg.ts";
import { NOTES_WORKFLOW } from "../tests/support/orders.ts";
import { deployAndStart, startedNode, takeOverFrom } from "../tests/support/in_process_node.ts";
import { waitFor } from "../tests/support/server.ts";
import { postgresClient } from "../lib/store/postgres.ts";
import { NODE_HEARTBEAT, OWNED_AMONG } from "../sql/postgres/shared/mod.ts";

Deno.test({
  name: "shared: a node silent past the node timeout answers queries and /pending from the " +
    "history, not from memory it may have lost",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const url = await migratedDatabase();
    let silent = false;
    let failChecks = 0;
    const a = await startedNode(url, "node-a", {
      afterStatement: (text) => {
        if (silent && text === NODE_HEARTBEAT) throw new Error("heartbeat held back (test)");
        if (failChecks > 0 && text === OWNED_AMONG) {
          failChecks--;
          throw new Error("ownership check failed (test)");
        }
      },
    });
    const b = await startedNode(url, "node-b");
    const sql = postgresClient(url, { max: 1, applicationName: "orbit-test" });
    try {
      await deployAndStart(a, [NOTES_WORKFLOW], {
        workflow: "Notes",
        execution_id: "sr-1",
        input: {},
      });
      assert.equal(
        (await a.call("POST", "/v1/executions/sr-1/signals/note", { payload: "a" })).status,
        200,
      );
      assert.deepEqual((await a.call("GET", "/v1/executions/sr-1/queries/notes")).body, {
        result: ["a"],
      });
      // Node A's heartbeats stop reaching the database for longer than the node timeout.
      silent = true;
      await waitFor(
        async () => (await a.call("GET", "/v1/ready")).status === 503,
        "node A to see its heartbeat older than the node timeout",
        10_000,
      );
      // Node B takes sr-1 over (as the survivors do) and moves it on; A's memory still holds
      // sr-1 as it was.
      assert.equal(await takeOverFrom(sql, "node-a", b, ["sr-1"]), 1);
      assert.equal(
        (await b.call("POST", "/v1/executions/sr-1/signals/note", { payload: "b" })).status,
        200,
      );
      const q = await a.call("GET", "/v1/executions/sr-1/queries/notes");
      assert.equal(q.status, 200, JSON.stringify(q.body));
      assert.deepEqual(q.body, { result: ["a", "b"] }, "node A answered from stale memory");
      const sent = await b.call("POST", "/v1/executions/sr-1/signals/go", { payload: 1 });
      assert.equal(sent.status, 200, JSON.stringify(sent.body));
      const p = await a.call("GET", "/v1/executions/sr-1/pending");
      assert.equal(p.status, 200, JSON.stringify(p.body));
      assert.equal(p.body.status, "completed", JSON.stringify(p.body));
      // Once its heartbeat is written again, node A checks its ownership and lets sr-1 go; a
      // check that fails (the connection lost again) is tried again with the next heartbeat,
      // and memory answers no read meanwhile.
      failChecks = 1;
      silent = false;
      await waitFor(() => failChecks === 0, "node A to try its ownership check", 10_000);
      const q2 = await a.call("GET", "/v1/executions/sr-1/queries/notes");
      assert.deepEqual(q2.body, { result: ["a", "b"] });
      await waitFor(
        async () => (await a.call("GET", "/v1/health")).body.owned_executions === 0,
        "node A to let sr-1 go",
        10_000,
      );
      assert.equal((await a.call("GET", "/v1/ready")).status, 200);
    } finally {
      silent = false;
      failChecks = 0;
      await sql.end({ timeout: 1 });
      await b.n.stop();
      await a.n.stop();
    }
  },
});
