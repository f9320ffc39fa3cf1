/**
 * Shared mode, in process on a real PostgreSQL (issue 39): a row queued by a commit is announced
 * to the other servers (NOTIFY orbit_tasks) only when this server's own waiting polls did not
 * take it; otherwise every other server's waiting polls would run a claim statement for a row
 * already gone.
 */
import assert from "node:assert/strict";
import { migratedDatabase } from "../tests/support/pg.ts";
import { startedNode } from "../tests/support/in_process_node.ts";
import { waitFor } from "../tests/support/server.ts";

/** A timer first, so that the task is queued by the timer's commit, with no poll offered it. */
const NAP = {
  ir: "orbit-ir/2",
  name: "Nap",
  version: "1.0.0",
  steps: [{ id: "nap", sleep_s: 0.2 }, { id: "b", task: "t.b", contract: "1" }],
};

Deno.test({
  name: "shared: a queued row this server's own poll takes is not announced to the others; " +
    "one nobody here takes is",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const url = await migratedDatabase();
    const a = await startedNode(url, "node-a");
    const b = await startedNode(url, "node-b");
    try {
      await waitFor(() => !a.n.notifier.alone && !b.n.notifier.alone, "each node to see the other");
      const dep = await a.call("POST", "/v1/workflows", NAP);
      assert.equal(dep.status, 201, JSON.stringify(dep.body));
      const register = async (node: typeof a) => {
        const r = await node.call("POST", "/v1/workers/register", {
          worker_id: "w",
          runtime: "typescript",
          tasks: [{ name: "t.b", contract: "1" }],
          concurrency: 1,
        });
        assert.equal(r.status, 200, JSON.stringify(r.body));
        return r.body.session_id as string;
      };
      const sent = () => a.n.runtime.metrics.notificationsSent.get({ channel: "orbit_tasks" });
      const skipped = () =>
        a.n.runtime.metrics.notificationsSkipped.get({ channel: "orbit_tasks" });
      const runOne = async (id: string, pollOn: typeof a) => {
        const session = await register(pollOn);
        const poll = pollOn.call("POST", "/v1/workers/poll", {
          session_id: session,
          max_tasks: 1,
          wait_s: 20,
        });
        await waitFor(
          () => pollOn.n.runtime.workers.sessions.get(session)?.polling === 1,
          "the poll to wait",
        );
        const r = await a.call("POST", "/v1/executions", {
          workflow: "Nap",
          execution_id: id,
          input: {},
        });
        assert.equal(r.status, 201, JSON.stringify(r.body));
        const got = await poll;
        assert.equal(got.body.tasks?.[0]?.execution_id, id, JSON.stringify(got.body));
        const done = await pollOn.call("POST", "/v1/tasks/complete", {
          token: got.body.tasks[0].token,
          output: 1,
        });
        assert.equal(done.body.accepted, true, JSON.stringify(done.body));
      };

      // The poll waits on A, which owns the execution: the row goes to it, unannounced.
      const [sent0, skipped0] = [sent(), skipped()];
      await runOne("nap-here", a);
      assert.equal(sent() - sent0, 0, "no NOTIFY orbit_tasks for a row taken here");
      assert.ok(skipped() - skipped0 >= 1, "the notification was skipped");

      // The poll waits on B: A's own polls take nothing, so B hears of the row.
      const sent1 = sent();
      await runOne("nap-there", b);
      assert.ok(sent() - sent1 >= 1, "NOTIFY orbit_tasks for a row nobody here took");
    } finally {
      await b.n.stop();
      await a.n.stop();
    }
  },
});
