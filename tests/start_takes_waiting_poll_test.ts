/**
 * A start whose first task a waiting poll serves dispatches it in the start's own commit and
 * answers the poll with it (no second commit for the dispatch). When that commit fails, the
 * poll is not answered with a task nobody recorded: it waits on and gets the task of the next
 * start. A poll whose wait runs out while the start commits is not ended by it: it answers the
 * task once the commit lands (no redelivery). A poll that closed meanwhile (its request gone)
 * does not lose the task: it is recorded uncertain and goes out again with `redelivery: true`.
 * (The same in shared mode: one dispatcher, lib/workers/dispatcher.ts.)
 */
import assert from "node:assert/strict";
import { Runtime } from "../lib/runtime.ts";
import { openStore } from "../lib/store/open.ts";
import { readRun } from "../lib/store/store.ts";
import { commitShape, faultyStore, recordCommits } from "./support/faulty_store.ts";
import { tempDir } from "./support/server.ts";

const ONE = {
  ir: "orbit-ir/1",
  name: "One",
  version: "1.0.0",
  steps: [{ id: "only", task: "t.one", contract: "1", input: "{% $input %}" }],
};

Deno.test({
  name: "a start hands its first task to a waiting poll in its own commit",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const store = faultyStore(await openStore(`${await tempDir()}/s.db`));
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

      // A poll waits; the start's one commit holds the creation and the dispatch.
      const polled = rt.workers.poll(session, 1, 10_000);
      await rt.executions.start({ workflow: "One", execution_id: "a", input: 1 });
      const [ta] = await polled;
      assert.equal(ta?.execution_id, "a");
      assert.equal(ta?.redelivery, false);
      assert.deepEqual(commits, [["a/WorkflowCreated", "a/StepScheduled", "a/StepDispatched"]]);
      assert.equal((await rt.workers.report(ta!.token, { output: 1 })).accepted, true);

      // The start's commit fails: the poll is not answered with b's task; it takes c's.
      const polled2 = rt.workers.poll(session, 1, 10_000);
      log.failOn = "b/WorkflowCreated";
      await assert.rejects(rt.executions.start({ workflow: "One", execution_id: "b", input: 2 }));
      log.failOn = null;
      await rt.executions.start({ workflow: "One", execution_id: "c", input: 3 });
      const [tc] = await polled2;
      assert.equal(tc?.execution_id, "c");
      assert.equal((await rt.workers.report(tc!.token, { output: 3 })).accepted, true);

      // A start whose commit is held until `release`; `reached` resolves when the commit begins
      // (the start's task is offered to a waiting poll before that).
      let release!: () => void;
      let reached!: Promise<void>;
      const hold = (id: string) => {
        const gate = new Promise<void>((r) => release = r);
        let arrived!: () => void;
        reached = new Promise<void>((r) => arrived = r);
        store.plan = {};
        store.commit = async (items) => {
          if (commitShape(items).includes(`${id}/WorkflowCreated`)) {
            arrived();
            await gate;
          }
          return await commit(items);
        };
      };
      const commit = store.commit;

      // A poll whose wait runs out while the start commits: set aside for the start's task, it
      // answers with it once the commit lands, not empty (which would cost a redelivery).
      hold("d0");
      const late = rt.workers.poll(session, 1, 300);
      const started0 = rt.executions.start({ workflow: "One", execution_id: "d0", input: 0 });
      let answered = false;
      void late.then(() => answered = true);
      await reached;
      // Asserting that something does not happen takes time: twice its wait, still open.
      await new Promise((r) => setTimeout(r, 600));
      assert.equal(answered, false, "a poll set aside for a start's task waits for the commit");
      release();
      await started0;
      const [t0] = await late;
      assert.equal(t0?.execution_id, "d0");
      assert.equal(t0?.redelivery, false);
      assert.equal((await rt.workers.report(t0!.token, { output: 0 })).accepted, true);

      // A poll whose request closes while the start commits: the dispatched task is redelivered.
      hold("d");
      const close = new AbortController();
      const short = rt.workers.poll(session, 1, 10_000, close.signal);
      const started = rt.executions.start({ workflow: "One", execution_id: "d", input: 4 });
      await reached;
      close.abort();
      assert.deepEqual(await short, []); // its request closed while the commit was held
      release();
      await started;
      // b's start failed "before" its commit, which the server cannot tell from a lost answer:
      // its append was in doubt and, committed again, b exists; its task may come first here.
      let again;
      for (let i = 0; i < 100 && !again; i++) {
        const [t] = await rt.workers.poll(session, 1, 100);
        if (t?.execution_id === "b") {
          assert.equal((await rt.workers.report(t.token, { output: 2 })).accepted, true);
        } else again = t;
      }
      assert.equal(again?.execution_id, "d");
      assert.equal(again?.redelivery, true);
      assert.equal((await rt.workers.report(again!.token, { output: 4 })).accepted, true);
      const events = await readRun(store, (await store.getExecution("d"))!.run_id);
      assert.deepEqual(
        events.filter((e) => e.type.startsWith("Step")).map((e) => e.type),
        [
          "StepScheduled",
          "StepDispatched",
          "StepAttemptUncertain",
          "StepDispatched",
          "StepSucceeded",
        ],
      );
    } finally {
      await rt.stop();
    }
  },
});

Deno.test({
  name: "a start's first task offered to a poll that closed goes to another poll of its session",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    // A worker holds one poll per slot; a dispatch names the session, not the poll. When the
    // poll it was offered to closes during the start's commit (its connection cut), another
    // poll of the same session takes the task: no StepAttemptUncertain, no redelivery.
    const store = faultyStore(await openStore(`${await tempDir()}/h.db`));
    const rt = new Runtime(store, { sessionTimeoutMs: 60_000, maxActiveExecutions: null });
    await rt.start();
    try {
      await rt.definitions.deploy(ONE);
      const session = await rt.workers.register({
        worker_id: "w",
        runtime: "typescript",
        tasks: [{ name: "t.one", contract: "1" }],
        concurrency: 2,
      });
      const closeA = new AbortController();
      const pollA = rt.workers.poll(session, 1, 10_000, closeA.signal);
      const pollB = rt.workers.poll(session, 1, 10_000);
      // The start's commit: poll A (offered the task, the first waiting) closes while it runs.
      store.plan = {
        commit: (_n, items) => {
          if (commitShape(items).includes("h/StepDispatched")) closeA.abort();
          return "ok";
        },
      };
      await rt.executions.start({ workflow: "One", execution_id: "h", input: 7 });
      store.plan = {};
      assert.deepEqual(await pollA, []);
      const [t] = await pollB;
      assert.equal(t?.execution_id, "h");
      assert.equal(t?.redelivery, false);
      assert.equal((await rt.workers.report(t!.token, { output: 7 })).accepted, true);
      const row = await rt.executions.wait("h", 5000);
      assert.equal(row.status, "completed");
      const events = await readRun(store, row.run_id);
      assert.equal(events.filter((e) => e.type === "StepAttemptUncertain").length, 0);
      assert.equal(events.filter((e) => e.type === "StepDispatched").length, 1);
    } finally {
      store.plan = {};
      await rt.stop();
    }
  },
});
