/**
 * A result that leaves its worker's slot free (the execution has nothing more for it) takes the
 * next queued task in the same commit as the result; when that commit fails, the task
 * dispatched for the slot never reaches the worker and goes out again (redelivery), and the
 * result, retried, is applied once.
 */
import assert from "node:assert/strict";
import { Runtime } from "../lib/runtime.ts";
import { openStore } from "../lib/store/open.ts";
import { readRun } from "../lib/store/store.ts";
import { faultyStore, recordCommits } from "./support/faulty_store.ts";
import { tempDir } from "./support/server.ts";

const ONE = {
  ir: "orbit-ir/1",
  name: "One",
  version: "1.0.0",
  steps: [{ id: "only", task: "t.one", contract: "1", input: "{% $input %}" }],
};

Deno.test({
  name:
    "a result that frees its slot takes a queued task in its own commit; a failed one redelivers it",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const store = faultyStore(await openStore(`${await tempDir()}/q.db`));
    const rt = new Runtime(store, { sessionTimeoutMs: 60_000, maxActiveExecutions: null });
    await rt.start();
    try {
      await rt.definitions.deploy(ONE);
      const log = recordCommits(store);
      const commits = log.commits;
      const session = await rt.workers.register({
        worker_id: "w",
        runtime: "typescript",
        tasks: [{ name: "t.one", contract: "1" }],
        concurrency: 1,
      });
      const take = { sessionId: session, maxTasks: 1 };

      await rt.executions.start({ workflow: "One", execution_id: "a", input: 1 });
      const [ta] = await rt.workers.poll(session, 1, 1000);
      assert.equal(ta?.execution_id, "a");
      await rt.executions.start({ workflow: "One", execution_id: "b", input: 2 });
      await rt.executions.start({ workflow: "One", execution_id: "c", input: 3 });

      // a's result frees the slot: b's task comes back in the answer, dispatched in the same
      // commit as the result.
      commits.length = 0;
      const ra = await rt.workers.report(ta!.token, { output: 10 }, take);
      assert.equal(ra.accepted, true);
      assert.deepEqual(ra.tasks.map((t) => t.execution_id), ["b"]);
      assert.ok(
        commits.some((c) => c.includes("a/StepSucceeded") && c.includes("b/StepDispatched")),
        `one commit holds a's result and b's dispatch: ${JSON.stringify(commits)}`,
      );
      const tb = ra.tasks[0]!;

      // b's result fails to commit: the worker hears the error; c's task, dispatched for its
      // slot, is recorded uncertain and queued again.
      log.failOn = "b/StepSucceeded";
      await assert.rejects(rt.workers.report(tb.token, { output: 20 }, take));
      log.failOn = null;
      let again;
      for (let i = 0; i < 100 && !again; i++) {
        [again] = await rt.workers.poll(session, 1, 100);
      }
      assert.equal(again?.execution_id, "c");
      const cEvents = await readRun(store, (await store.getExecution("c"))!.run_id);
      assert.ok(
        cEvents.some((e) => e.type === "StepAttemptUncertain"),
        "c's first dispatch is recorded uncertain",
      );
      assert.equal(again!.redelivery, true);

      // The retried result is applied once; both executions finish. The failed commit's
      // outcome was unknown (a lost connection), so the server committed it again by itself
      // (Executions.#recommit): the retry finds the result recorded and is not applied twice.
      const rb = await rt.workers.report(tb.token, { output: 20 }, take);
      assert.equal(rb.accepted, false);
      await rt.workers.report(again!.token, { output: 30 });
      for (const [id, output] of [["a", 10], ["b", 20], ["c", 30]] as const) {
        const row = await rt.executions.wait(id, 5000);
        assert.equal(row.status, "completed", id);
        assert.deepEqual(row.output, { only: output }, id);
        const events = await readRun(store, row.run_id);
        assert.equal(events.filter((e) => e.type === "StepSucceeded").length, 1, id);
      }
    } finally {
      store.plan = {};
      await rt.stop();
    }
  },
});
