/**
 * Shared mode's heartbeat, in process on a real PostgreSQL: what a worker is told to cancel
 * (SPEC §4: `{cancel:[tokens]}`, each once), as on one server (lib/workers/sessions.ts).
 */
import assert from "node:assert/strict";
import { migratedDatabase } from "../tests/support/pg.ts";
import { ORDER_WORKFLOW, orderInput } from "../tests/support/orders.ts";
import { deployAndStart, startedNode } from "../tests/support/in_process_node.ts";
import { postgresClient } from "../lib/store/postgres.ts";

Deno.test({
  name: "shared: a worker that registered again is told once to cancel an attempt of its old " +
    "session that was cancelled, and the cancelled row goes",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    // Review: the cancel notice was kept for the old session only (TAKE_CANCELLED by session
    // id), and KNOWN_TOKENS counted the cancelled row as an attempt some server knows, so the
    // new session's heartbeats listing the token answered {"cancel":[]} for ever and the row
    // stayed. A single server tells it (a token no session holds is cancelled).
    const url = await migratedDatabase();
    const a = await startedNode(url, "node-a");
    const sql = postgresClient(url, { max: 1, applicationName: "orbit-test" });
    try {
      await deployAndStart(a, [ORDER_WORKFLOW], {
        workflow: "OrderProcessing",
        execution_id: "cr-1",
        input: orderInput("cr-1"),
      });
      const tasks = [{ name: "orders.validate", contract: "1" }];
      const r1 = await a.call("POST", "/v1/workers/register", {
        worker_id: "w",
        tasks,
        concurrency: 1,
      });
      const p = await a.call("POST", "/v1/workers/poll", {
        session_id: r1.body.session_id,
        wait_s: 5,
      });
      const token = p.body.tasks?.[0]?.token;
      assert.ok(token, JSON.stringify(p.body));
      // The worker lost its session and registered again, still running the attempt; then the
      // execution is cancelled, which cancels the attempt's row (held by the old session).
      const r2 = await a.call("POST", "/v1/workers/register", {
        worker_id: "w",
        tasks,
        concurrency: 1,
      });
      const c = await a.call("POST", "/v1/executions/cr-1/cancel", { reason: "test" });
      assert.equal(c.status, 200, JSON.stringify(c.body));
      const row = async () =>
        await sql.unsafe<{ state: string; session_id: string }[]>(
          "SELECT state, session_id FROM orbit_tasks WHERE token = $1",
          [token],
        );
      assert.deepEqual(
        (await row()).map((r) => [r.state, r.session_id]),
        [["cancelled", r1.body.session_id]],
      );
      const beat = async () => {
        const h = await a.call("POST", "/v1/workers/heartbeat", {
          session_id: r2.body.session_id,
          tokens: [token],
        });
        assert.equal(h.status, 200, JSON.stringify(h.body));
        return h.body.cancel;
      };
      assert.deepEqual(await beat(), [token], "told to cancel");
      assert.deepEqual(await beat(), [], "told once");
      assert.equal((await row()).length, 0, "the cancelled row is deleted");
    } finally {
      await a.n.stop();
      await sql.end({ timeout: 1 });
    }
  },
});
