/**
 * Commits whose outcome is unknown (the chaos issue, items 5 and 6): an in-process runtime
 * over a store that fails commits before writing, or writes them and then reports a lost
 * connection, on both stores. Every execution must finish without a restart, with one
 * StepSucceeded per step, no gap in seq, and memory equal to a replay of the stored history.
 *
 * The clients and the worker behave as the SDKs do: a start is retried with its execution id,
 * a result is retried until it is answered, a poll that fails is simply repeated.
 */
import assert from "node:assert/strict";
import { Runtime } from "../lib/runtime.ts";
import { openStore } from "../lib/store/open.ts";
import { replay } from "../lib/engine/state.ts";
import { readRun } from "../lib/store/store.ts";
import type { HistoryEvent } from "../lib/engine/events.ts";
import { type CommitFault, faultyStore, rng } from "./support/faulty_store.ts";
import { stopSharedPostgres, STORES, type StoreTarget } from "./support/stores.ts";
import { waitFor } from "./support/server.ts";
import { TASKS, WORKFLOW } from "./support/three_steps.ts";

async function retry<T>(fn: () => Promise<T>, deadline: number): Promise<T> {
  for (;;) {
    try {
      return await fn();
    } catch (e) {
      const status = (e as { status?: number }).status;
      if (status !== undefined && status < 500) throw e;
      if (Date.now() > deadline) throw e;
      await new Promise((r) => setTimeout(r, 5));
    }
  }
}

interface RunOptions {
  seed: number;
  executions: number;
  /** Fate of each commit, given a random number in [0, 1). */
  fault: (r: number) => CommitFault;
  /** Fraction of reads that fail. */
  readFaults: number;
}

async function run(target: StoreTarget, o: RunOptions): Promise<void> {
  const random = rng(o.seed);
  const inner = await openStore(await target.newDb());
  const store = faultyStore(inner);
  const rt = new Runtime(store, { sessionTimeoutMs: 60_000, maxActiveExecutions: null });
  await rt.start();
  const deadline = Date.now() + 60_000;
  const label = `seed ${o.seed} on ${target.name}`;
  try {
    await rt.definitions.deploy(WORKFLOW);
    store.plan = {
      // A run has few commits (group commit batches them; a start and its first dispatch
      // share one): the third commit lands and then fails if the seed spared the first two,
      // so that every run meets at least one fault.
      commit: (n) => {
        const f = o.fault(random());
        return f === "ok" && n === 2 && store.injected.after + store.injected.before === 0
          ? "after"
          : f;
      },
      read: () => random() < o.readFaults,
    };
    const ids = Array.from({ length: o.executions }, (_, i) => `amb-${o.seed}-${i}`);
    // Every start twice at once (a client retrying while the first is in flight), and again
    // until it is answered.
    const starts = ids.flatMap((id) =>
      [0, 1].map(() =>
        retry(
          () => rt.executions.start({ workflow: "Three", execution_id: id, input: 1 }),
          deadline,
        )
      )
    );
    const session = await rt.workers.register({
      worker_id: "w",
      runtime: "typescript",
      tasks: TASKS,
      concurrency: 8,
    });
    const done = Promise.all(starts).then(() =>
      Promise.all(ids.map((id) => retry(() => rt.executions.wait(id, 30_000), deadline)))
    );
    let finished = false;
    done.finally(() => finished = true).catch(() => {});
    const worker = (async () => {
      while (!finished && Date.now() < deadline) {
        let tasks;
        try {
          tasks = await rt.workers.poll(session, 8, 50);
        } catch {
          continue;
        }
        await Promise.all(tasks.map(async (t) => {
          const output = (t.input as number) + 1;
          await retry(() => rt.workers.report(t.token, { output }), deadline);
          // A duplicate result (a retry after a lost answer) is refused, never applied.
          const again = await retry(() => rt.workers.report(t.token, { output }), deadline);
          assert.equal(again.accepted, false, `${label}: a second result was accepted`);
        }));
      }
    })();
    const rows = await done;
    await worker;
    store.plan = {};
    for (const row of rows) {
      if (row.status !== "completed") {
        const ev = await readRun(store, row.run_id);
        console.error(
          row.execution_id,
          JSON.stringify(
            ev.map((
              e,
            ) => [
              e.seq,
              e.type,
              (e as { step?: string }).step,
              (e as { token?: string }).token?.slice(-6),
            ]),
          ),
        );
        console.error(JSON.stringify(rt.executions.stateOf(row.execution_id)?.steps));
      }
      assert.equal(row.status, "completed", `${label}: ${row.execution_id} is ${row.status}`);
      assert.equal(row.output, 4, `${label}: ${row.execution_id} output`);
    }
    for (const id of ids) {
      const row = (await store.getExecution(id))!;
      const events: HistoryEvent[] = await readRun(store, row.run_id);
      events.forEach((e, i) => assert.equal(e.seq, i + 1, `${label}: ${id} has a gap in seq`));
      const succeeded = events.filter((e) => e.type === "StepSucceeded").map((e) =>
        (e as { step: string }).step
      );
      assert.deepEqual(succeeded, ["one", "two", "three"], `${label}: ${id} StepSucceeded`);
      assert.equal(replay(events).status, "completed");
      assert.equal(rt.executions.holds(id), false, `${label}: ${id} still in memory`);
    }
    assert.ok(store.injected.after + store.injected.before > 0, `${label}: no fault injected`);
  } finally {
    store.plan = {};
    await rt.stop();
  }
}

/** A started runtime with a bounded cache over a faulty store on a fresh database, WORKFLOW deployed. */
async function cachedRuntime(target: StoreTarget) {
  const store = faultyStore(await openStore(await target.newDb()));
  const rt = new Runtime(store, {
    sessionTimeoutMs: 60_000,
    maxActiveExecutions: null,
    cacheExecutions: 100,
  });
  await rt.start();
  await rt.definitions.deploy(WORKFLOW);
  return { store, rt };
}

for (const target of STORES) {
  Deno.test({
    name:
      `a commit that lands but reports a lost connection does not wedge the execution [${target.name}]`,
    sanitizeOps: false,
    sanitizeResources: false,
    fn: async () => {
      // Every fourth commit lands and then fails: without a rebuild from history, the next
      // append of that execution reuses a seq and fails forever.
      let n = 0;
      await run(target, {
        seed: 1,
        executions: 6,
        fault: () => (n++ % 4 === 3 ? "after" : "ok"),
        readFaults: 0,
      });
    },
  });
  Deno.test({
    name: `a start in a batch that lands but reports a lost connection is loaded and its first ` +
      `task handed out, with a bounded cache [${target.name}]`,
    sanitizeOps: false,
    sanitizeResources: false,
    fn: async () => {
      // Retried item by item after the batch failed, the start met its own row
      // (DuplicateExecutionError) and was answered as another start's execution: with a
      // bounded cache nothing loaded it, and its first task was never queued.
      const { store, rt } = await cachedRuntime(target);
      try {
        let armed = true;
        store.plan = {
          commit: (_n, items) => {
            if (!armed || items.length < 2) return "ok";
            armed = false;
            return "after";
          },
        };
        const deadline = Date.now() + 30_000;
        // Starts four at a time until two of them share a commit (the one that fails).
        const ids: string[] = [];
        for (let round = 0; armed && round < 20; round++) {
          const group = [0, 1, 2, 3].map((i) => `x${round}-${i}`);
          ids.push(...group);
          await Promise.allSettled(
            group.map((id) =>
              rt.executions.start({ workflow: "Three", execution_id: id, input: 1 })
            ),
          );
        }
        assert.equal(armed, false, "no two starts shared a commit");
        // The clients retry until answered, as the SDKs do.
        for (const id of ids) {
          await retry(
            () => rt.executions.start({ workflow: "Three", execution_id: id, input: 1 }),
            deadline,
          );
        }
        const session = await rt.workers.register({
          worker_id: "w",
          runtime: "typescript",
          tasks: TASKS,
          concurrency: 100,
        });
        const got = new Set<string>();
        await waitFor(
          async () => {
            for (const t of await rt.workers.poll(session, 100, 200)) got.add(t.execution_id);
            return got.size === ids.length;
          },
          "every first task",
          20_000,
        );
        assert.deepEqual([...got].sort(), [...ids].sort());
        for (const id of ids) assert.ok(rt.executions.holds(id), `${id} is in memory`);
      } finally {
        store.plan = {};
        await rt.stop();
      }
    },
  });
  Deno.test({
    name: `a wait that comes before the rebuild of a start that landed but reported an error ` +
      `rebuilds it: the first task its commit dispatched is redelivered [${target.name}]`,
    sanitizeOps: false,
    sanitizeResources: false,
    fn: async () => {
      const { store, rt } = await cachedRuntime(target);
      try {
        const session = await rt.workers.register({
          worker_id: "w",
          runtime: "typescript",
          tasks: TASKS,
          concurrency: 1,
        });
        // A poll waits (it is set in line before poll() returns its promise): the start hands
        // it the first task in its own commit, which lands and then reports a lost connection
        // (the poll does not get that dispatch).
        const first = rt.workers.poll(session, 1, 1_000);
        store.plan = { commit: () => "after" };
        await assert.rejects(
          rt.executions.start({ workflow: "Three", execution_id: "w1", input: 1 }),
        );
        store.plan = {};
        // At once, before the rebuild that the failed commit scheduled: a wait loads it.
        const waited = await rt.executions.wait("w1", 10);
        assert.equal(waited.status, "running");
        // The dispatch that landed never reached the worker: it is redelivered.
        let [task] = await first;
        await waitFor(
          async () => {
            task ??= (await rt.workers.poll(session, 1, 200))[0];
            return task !== undefined;
          },
          "the redelivery",
          10_000,
        );
        assert.equal(task!.execution_id, "w1");
        assert.equal(task!.redelivery, true);
        assert.equal(rt.executions.running, 1);
      } finally {
        store.plan = {};
        await rt.stop();
      }
    },
  });
  // ORBIT_FAULT_SEEDS=first-last runs more seeds (a failing seed is replayed the same way).
  const range = (Deno.env.get("ORBIT_FAULT_SEEDS") ?? "11-13").split("-").map(Number);
  const seeds = Array.from({ length: range[1]! - range[0]! + 1 }, (_, i) => range[0]! + i);
  for (const seed of seeds) {
    Deno.test({
      name:
        `seeded faults on commits and reads leave memory equal to history [${target.name}, seed ${seed}]`,
      sanitizeOps: false,
      sanitizeResources: false,
      fn: () =>
        run(target, {
          seed,
          executions: 12,
          fault: (r) => (r < 0.1 ? "before" : r < 0.2 ? "after" : "ok"),
          readFaults: 0.05,
        }),
    });
  }
}

Deno.test({
  name: "ambiguous commit tests: stop PostgreSQL",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: stopSharedPostgres,
});
