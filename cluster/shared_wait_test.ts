/**
 * `GET /v1/executions/{id}/wait` in shared mode (reference page: reads work on every server,
 * "wait wakes on NOTIFY orbit_done"), in process on a real PostgreSQL: a wait held by the node
 * that ran the execution must follow it when that node lets it go (another node took it over),
 * and answer as soon as the new owner ends it, not when the wait's own timeout runs out.
 */
import assert from "node:assert/strict";
import { migratedDatabase } from "../tests/support/pg.ts";
import { WAITER_WORKFLOW } from "../tests/support/orders.ts";
import { deployAndStart, startedNode, takeOverFrom } from "../tests/support/in_process_node.ts";
import { waitFor } from "../tests/support/server.ts";
import { postgresClient } from "../lib/store/postgres.ts";

Deno.test({
  name: "shared: a wait on a node that lets the execution go answers when the new owner ends it",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const url = await migratedDatabase();
    const a = await startedNode(url, "node-a");
    const b = await startedNode(url, "node-b");
    const sql = postgresClient(url, { max: 1, applicationName: "orbit-test" });
    try {
      await deployAndStart(a, [WAITER_WORKFLOW], {
        workflow: "Waiter",
        execution_id: "wl-1",
        input: {},
      });
      // A client waits on node A, which runs wl-1.
      const t0 = performance.now();
      const waiting = a.call("GET", "/v1/executions/wl-1/wait?timeout_s=30");
      // Node B takes wl-1 over, as from a node that was silent past the node timeout.
      assert.equal(await takeOverFrom(sql, "node-a", b, ["wl-1"]), 1);
      // Node A's next append is fenced: it lets wl-1 go.
      const fenced = await a.call("POST", "/v1/executions/wl-1/signals/go", { payload: 0 });
      assert.equal(fenced.status, 500, JSON.stringify(fenced.body));
      assert.match(fenced.body.error.message, /fenced/);
      await waitFor(
        async () => (await a.call("GET", "/v1/health")).body.owned_executions === 0,
        "node A to let wl-1 go",
        10_000,
      );
      // The new owner ends it.
      const sent = await b.call("POST", "/v1/executions/wl-1/signals/go", { payload: 7 });
      assert.equal(sent.status, 200, JSON.stringify(sent.body));
      const r = await waiting;
      const ms = performance.now() - t0;
      assert.equal(r.status, 200, JSON.stringify(r.body));
      assert.equal(r.body.status, "completed", JSON.stringify(r.body));
      assert.deepEqual(r.body.output, 7);
      // NOTIFY orbit_done, or the one-second re-read at worst; not the 30 s of the wait.
      assert.ok(ms < 10_000, `the wait answered after ${Math.round(ms)} ms`);
    } finally {
      await sql.end({ timeout: 1 });
      await b.n.stop();
      await a.n.stop();
    }
  },
});
