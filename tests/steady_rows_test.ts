/**
 * An append that only moves the history is marked `steady` (AppendItem.steady), and the stores
 * then write its events and leave the row alone (reads take `last_seq` and `updated_ms` from the
 * newest event). The mark is right only if the rest of the row and its `wake_at_ms` are what the
 * execution's previous append wrote: checked here on every commit of executions that run worker
 * steps, retry, sleep, wait for a signal and fail, against the rows read back after each commit.
 */
import assert from "node:assert/strict";
import { Runtime } from "../lib/runtime.ts";
import { openStore } from "../lib/store/open.ts";
import { sendSignal } from "../lib/executions/signals.ts";
import { readRun } from "../lib/store/store.ts";
import type { AppendItem, ExecutionRow } from "../lib/store/store.ts";
import { waitFor } from "./support/server.ts";
import { testEachStore } from "./support/stores.ts";

const FLOW = {
  ir: "orbit-ir/2",
  name: "Flow",
  version: "1.0.0",
  signals: { go: {} },
  steps: [
    {
      id: "a",
      task: "t.a",
      contract: "1",
      input: "{% $input %}",
      retry: { max_attempts: 3, initial_ms: 50 },
    },
    { id: "nap", sleep_s: 0.1 },
    { id: "w", wait_signal: "go" },
    { id: "b", task: "t.b", contract: "1", input: "{% $steps.a %}" },
    { id: "r", return: "{% $steps.b %}" },
  ],
};

/** The row without the two columns a steady append moves. */
function fixed(row: ExecutionRow) {
  const { last_seq: _s, updated_ms: _u, ...rest } = row;
  return rest;
}

testEachStore(
  "steady appends are exactly those that leave the row but its history's end as it was",
  async (target) => {
    const store = await openStore(await target.newDb());
    const last = new Map<string, { row: ExecutionRow; wake: number | null }>();
    let steady = 0;
    let full = 0;
    const commit = store.commit.bind(store);
    store.commit = async (items: AppendItem[]) => {
      for (const item of items) {
        const id = item.row.execution_id;
        const wake = item.wake_at_ms === undefined ? 0 : item.wake_at_ms;
        const prev = last.get(id);
        if (item.steady) {
          steady++;
          assert.ok(prev, `a steady append of ${id} with no append before it`);
          assert.deepEqual(fixed(item.row), fixed(prev.row), `steady append of ${id}`);
          assert.equal(wake, prev.wake, `steady append of ${id} moved wake_at_ms`);
        } else {
          full++;
        }
        last.set(id, { row: item.row, wake });
      }
      const result = await commit(items);
      for (const item of items) {
        const read = await store.getExecution(item.row.execution_id);
        const newest = last.get(item.row.execution_id)!.row;
        assert.deepEqual(read, newest, `the row of ${item.row.execution_id} as written`);
      }
      return result;
    };
    const rt = new Runtime(store, { sessionTimeoutMs: 60_000, maxActiveExecutions: null });
    await rt.start();
    try {
      await rt.definitions.deploy(FLOW);
      const session = await rt.workers.register({
        worker_id: "w",
        runtime: "typescript",
        tasks: [{ name: "t.a", contract: "1" }, { name: "t.b", contract: "1" }],
        concurrency: 4,
      });
      const history = async (id: string) =>
        await readRun(store, (await store.getExecution(id))!.run_id);
      const ids = ["x1", "x2", "x3"];
      for (const id of ids) {
        await rt.executions.start({ workflow: "Flow", execution_id: id, input: id });
      }

      // Step a: x1 fails once and retries, x3 fails for good (three attempts).
      const attempts = new Map<string, number>();
      await waitFor(async () => {
        for (const t of await rt.workers.poll(session, 4, 200)) {
          const n = (attempts.get(t.execution_id) ?? 0) + 1;
          attempts.set(t.execution_id, n);
          const fail = t.execution_id === "x3" || (t.execution_id === "x1" && n === 1);
          const result = fail
            ? { error: { code: "Boom", message: "no", retryable: true } }
            : { output: `${t.execution_id}!` };
          assert.equal((await rt.workers.report(t.token, result)).accepted, true);
        }
        return (await store.getExecution("x3"))?.status === "failed" &&
          (await Promise.all(["x1", "x2"].map(history))).every((h) =>
            h.some((e) => e.type === "TimerFired")
          );
      }, "step a done and the naps over");

      // The signal, then step b.
      for (const id of ["x1", "x2"]) await sendSignal(rt.executions, id, "go", { id });
      await waitFor(async () => {
        for (const t of await rt.workers.poll(session, 4, 200)) {
          await rt.workers.report(t.token, { output: `${t.execution_id}:b` });
        }
        return (await store.getExecution("x1"))?.status === "completed" &&
          (await store.getExecution("x2"))?.status === "completed";
      }, "x1 and x2 to complete");
      assert.equal((await store.getExecution("x1"))?.output, "x1:b");
      assert.ok(steady > 0, "no append was steady");
      assert.ok(full > 0);
    } finally {
      await rt.stop();
      await store.close();
    }
  },
);
