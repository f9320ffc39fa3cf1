/**
 * Shared mode, in process on a real PostgreSQL: a result that makes ready a step its own
 * worker does not serve (another language) hands it to a poll of the worker that does, waiting
 * on the same server, in the result's own commit, as a start hands its first task to a waiting
 * poll: no claim statement and no commit of its own for the dispatch. The reference page's
 * worker shape (a Python and a TypeScript worker, the charge pinned to Python) switches
 * workers twice an order.
 */
import assert from "node:assert/strict";
import { migratedDatabase } from "../tests/support/pg.ts";
import { SWITCH_WORKFLOW } from "../tests/support/orders.ts";
import { deployAndStart, startedNode } from "../tests/support/in_process_node.ts";
import { waitFor } from "../tests/support/server.ts";

Deno.test({
  name: "shared: a result hands the step it makes ready to another worker's poll waiting on " +
    "the same server, in the result's commit",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const url = await migratedDatabase();
    const a = await startedNode(url, "node-a");
    try {
      const ts = await a.call("POST", "/v1/workers/register", {
        worker_id: "w-ts",
        runtime: "typescript",
        tasks: [{ name: "t.a", contract: "1" }],
        concurrency: 1,
      });
      const py = await a.call("POST", "/v1/workers/register", {
        worker_id: "w-py",
        runtime: "python",
        tasks: [{ name: "t.b", contract: "1" }],
        concurrency: 1,
      });
      assert.equal(ts.status, 200, JSON.stringify(ts.body));
      assert.equal(py.status, 200, JSON.stringify(py.body));
      // The Python worker waits on node A.
      const pyPoll = a.call("POST", "/v1/workers/poll", {
        session_id: py.body.session_id,
        max_tasks: 1,
        wait_s: 20,
      });
      await waitFor(
        () => a.n.runtime.workers.sessions.get(py.body.session_id)?.polling === 1,
        "the Python worker's poll to wait",
      );
      await deployAndStart(a, [SWITCH_WORKFLOW], {
        workflow: "Switch",
        execution_id: "sw-1",
        input: 1,
      });
      const tsPoll = await a.call("POST", "/v1/workers/poll", {
        session_id: ts.body.session_id,
        max_tasks: 1,
        wait_s: 5,
      });
      const task = tsPoll.body.tasks?.[0];
      assert.equal(task?.step, "a", JSON.stringify(tsPoll.body));
      const commits = a.n.runtime.metrics.commits.get();
      const done = await a.call("POST", "/v1/tasks/complete", {
        token: task.token,
        output: 2,
        session_id: ts.body.session_id,
        max_tasks: 1,
      });
      assert.equal(done.status, 200, JSON.stringify(done.body));
      assert.equal(done.body.accepted, true);
      assert.deepEqual(done.body.tasks, [], "nothing else for the TypeScript worker");
      const got = await pyPoll;
      assert.equal(got.status, 200, JSON.stringify(got.body));
      assert.equal(got.body.tasks?.[0]?.step, "b", JSON.stringify(got.body));
      assert.equal(got.body.tasks[0].input, 2);
      // One commit: the result and the dispatch to the Python worker together.
      assert.equal(a.n.runtime.metrics.commits.get() - commits, 1);
      const fin = await a.call("POST", "/v1/tasks/complete", {
        token: got.body.tasks[0].token,
        output: 3,
      });
      assert.equal(fin.status, 200, JSON.stringify(fin.body));
      const w = await a.call("GET", "/v1/executions/sw-1/wait?timeout_s=10");
      assert.equal(w.body.status, "completed", JSON.stringify(w.body));
      assert.equal(w.body.output, 3);
      const h = await a.call("GET", "/v1/executions/sw-1/history");
      const types = (h.body.events as { type: string; step?: string }[])
        .filter((e) => e.step === "b").map((e) => e.type);
      assert.deepEqual(types, ["StepScheduled", "StepDispatched", "StepSucceeded"]);
    } finally {
      await a.n.stop();
    }
  },
});
