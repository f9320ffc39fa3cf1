/**
 * Memory must not stay behind the durable history (issue 36). A commit that landed although
 * its error said nothing was written (a database that misreports, or an outcome misread under
 * cut connections) leaves the engine's memory without events the history has: in shared mode
 * an execution then offered a task whose row a worker held already, and waited for ever. The
 * audit (Executions.startAudit) finds an execution whose queued task has waited with memory
 * unchanged, reads the history after memory's last event, and rebuilds the execution from it:
 * the landed dispatch, which no worker got, is recorded uncertain and goes out again.
 *
 * Here a dispatch's commit is written and then fails with a serialization failure (an error
 * that says "rolled back"); the worker polls once and then not again, so nothing but the audit
 * can bring memory level with the history.
 */
import assert from "node:assert/strict";
import { Runtime } from "../lib/runtime.ts";
import { openStore } from "../lib/store/open.ts";
import { readRun } from "../lib/store/store.ts";
import { replay } from "../lib/engine/state.ts";
import { faultyStore, serializationFailure } from "./support/faulty_store.ts";
import { testEachStore } from "./support/stores.ts";
import { waitFor } from "./support/server.ts";
import { TASKS, WORKFLOW } from "./support/three_steps.ts";

testEachStore(
  "a dispatch that landed while its commit reported a rollback is found by the audit and redelivered",
  async (target) => {
    const store = faultyStore(await openStore(await target.newDb()));
    const rt = new Runtime(store, { sessionTimeoutMs: 60_000, maxActiveExecutions: null });
    await rt.start();
    try {
      await rt.definitions.deploy(WORKFLOW);
      await rt.executions.start({ workflow: "Three", execution_id: "behind", input: 1 });
      const session = await rt.workers.register({
        worker_id: "w",
        runtime: "typescript",
        tasks: TASKS,
        concurrency: 1,
      });
      let lied = false;
      store.plan = {
        commit: (_n, items) => {
          const dispatch = items.some((i) => i.events.some((e) => e.type === "StepDispatched"));
          if (!dispatch || lied) return "ok";
          lied = true;
          return "after";
        },
        error: serializationFailure,
      };
      // One poll: its dispatch is written, and reported as rolled back.
      try {
        const got = await rt.workers.poll(session, 1, 0);
        assert.equal(got.length, 0, "the worker got the task although its commit failed");
      } catch { /* the poll may answer the storage error itself */ }
      store.plan = {};
      assert.ok(lied, "no dispatch was committed");
      const row = (await store.getExecution("behind"))!;
      const stored = await readRun(store, row.run_id);
      assert.equal(stored.at(-1)!.type, "StepDispatched", "the dispatch is in the history");
      assert.equal(rt.executions.stateOf("behind")!.last_seq, stored.length - 1, "memory lags");

      // The audit rebuilds memory and records the attempt uncertain.
      const uncertain = await waitFor(
        async () => {
          const events = await readRun(store, row.run_id);
          return events.find((e) => e.type === "StepAttemptUncertain") ?? null;
        },
        "the audit to find the landed dispatch",
        30_000,
      );
      assert.equal((uncertain as { step?: string }).step, "one");
      assert.equal(rt.metrics.memoryBehindHistory.get(), 1);

      // Redelivered with the same idempotency key, and the execution runs to its end.
      for (;;) {
        const [task] = await rt.workers.poll(session, 1, 1);
        if (!task) continue;
        if (task.step === "one") assert.equal(task.redelivery, true);
        await rt.workers.report(task.token, { output: (task.input as number) + 1 });
        if (task.step === "three") break;
      }
      const done = await rt.executions.wait("behind", 10_000);
      assert.equal(done.status, "completed");
      assert.equal(done.output, 4);
      const events = await readRun(store, row.run_id);
      events.forEach((e, i) => assert.equal(e.seq, i + 1, "a gap in seq"));
      assert.deepEqual(
        events.filter((e) => e.type === "StepSucceeded").map((e) => (e as { step: string }).step),
        ["one", "two", "three"],
      );
      assert.equal(replay(events).status, "completed");
    } finally {
      store.plan = {};
      await rt.stop();
    }
  },
);
