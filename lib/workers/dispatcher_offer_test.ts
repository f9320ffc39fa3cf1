/**
 * One server (SQLite): a result that makes ready a step its own worker does not serve (another
 * language) hands it to a poll of the worker that does, waiting here, in the result's own
 * commit, as a start hands its first task to a waiting poll (cluster/shared_offer_test.ts is
 * the same in shared mode).
 */
import assert from "node:assert/strict";
import { Runtime } from "../runtime.ts";
import { openStore } from "../store/open.ts";
import { readRun } from "../store/store.ts";
import { waitFor } from "../../tests/support/server.ts";
import { SWITCH_WORKFLOW } from "../../tests/support/orders.ts";

Deno.test({
  name: "workers: a result hands the step it makes ready to another worker's waiting poll in " +
    "the result's commit",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const dir = await Deno.makeTempDir();
    const store = await openStore(`${dir}/orbit.db`);
    const rt = new Runtime(store, { sessionTimeoutMs: 60_000, maxActiveExecutions: null });
    await rt.start();
    try {
      const ts = await rt.workers.register({
        worker_id: "w-ts",
        runtime: "typescript",
        tasks: [{ name: "t.a", contract: "1" }],
        concurrency: 1,
      });
      const py = await rt.workers.register({
        worker_id: "w-py",
        runtime: "python",
        tasks: [{ name: "t.b", contract: "1" }],
        concurrency: 1,
      });
      const pyPoll = rt.workers.poll(py, 1, 20_000);
      await waitFor(() => rt.workers.sessions.get(py)?.polling === 1, "the Python poll to wait");
      await rt.definitions.deploy(SWITCH_WORKFLOW);
      await rt.executions.start({ workflow: "Switch", execution_id: "sw-1", input: 1 });
      const [task] = await rt.workers.poll(ts, 1, 5_000);
      assert.equal(task?.step, "a");
      const commits = rt.metrics.commits.get();
      const done = await rt.workers.report(task!.token, { output: 2 }, {
        sessionId: ts,
        maxTasks: 1,
      });
      assert.equal(done.accepted, true);
      assert.deepEqual(done.tasks, []);
      const got = await pyPoll;
      assert.equal(got[0]?.step, "b");
      assert.equal(got[0]!.input, 2);
      // One commit: the result and the dispatch to the Python worker together.
      assert.equal(rt.metrics.commits.get() - commits, 1);
      await rt.workers.report(got[0]!.token, { output: 3 });
      const row = await rt.executions.wait("sw-1", 10_000);
      assert.equal(row.status, "completed");
      assert.equal(row.output, 3);
      const b = (await readRun(store, row.run_id)).filter((e) =>
        (e as { step?: string }).step === "b"
      );
      assert.deepEqual(b.map((e) => e.type), ["StepScheduled", "StepDispatched", "StepSucceeded"]);
    } finally {
      await rt.stop();
      await Deno.remove(dir, { recursive: true });
    }
  },
});
