/**
 * Group commits whose outcome is unknown (issue 36): six executions' results share one commit,
 * and that commit meets every outcome a cut connection can give it — lost before the commit,
 * landed and then an error, and still in flight when the client gave up, landing just before
 * or just after the next statement of the server (the next commit on a new connection while
 * the old one is still in flight) — with the errors each store raises (PostgreSQL's lost
 * connection; SQLite's SQLITE_BUSY and I/O errors).
 *
 * What must hold: as soon as nothing is in doubt, memory equals a replay of the stored history
 * for every execution of the group, with nobody retrying anything (the server resolves the
 * doubt by itself); then, with the worker retrying its results as the SDKs do, every execution
 * completes with a contiguous history, one StepSucceeded per step, and its row equal to the
 * replay. Before the fix, a statement that landed after the server had read "nothing landed"
 * left memory behind the history for good (in shared mode another server then acted on the
 * landed rows: a claimed task that the owner did not know, an execution stuck for ever).
 */
import assert from "node:assert/strict";
import { Runtime } from "../lib/runtime.ts";
import { openStore } from "../lib/store/open.ts";
import { replay } from "../lib/engine/state.ts";
import { readRun } from "../lib/store/store.ts";
import type { Store } from "../lib/store/store.ts";
import {
  type CommitFault,
  connectionLost,
  faultyStore,
  serializationFailure,
  sqliteBusy,
  sqliteIoError,
} from "./support/faulty_store.ts";
import { stopSharedPostgres, STORES, type StoreTarget } from "./support/stores.ts";
import { waitFor } from "./support/server.ts";
import { TASKS, WORKFLOW } from "./support/three_steps.ts";

const GROUP = 6;

const FAULTS: CommitFault[] = ["before", "after", "inflight-first", "inflight-last"];
/**
 * The errors of each store, and the faults each can come with: an error that may mean the
 * commit landed (a lost connection, an I/O error) with every fault; a refusal by the database
 * itself (SQLITE_BUSY, a serialization failure) only before anything was written.
 */
const ERRORS: Record<StoreTarget["name"], Array<[string, () => Error, CommitFault[]]>> = {
  sqlite: [["SQLITE_BUSY", sqliteBusy, ["before"]], ["SQLITE_IOERR", sqliteIoError, FAULTS]],
  postgres: [
    ["CONNECTION_CLOSED", connectionLost, FAULTS],
    ["40001", serializationFailure, ["before"]],
  ],
};

/**
 * Whether no append of the ids is in doubt and memory holds each at the state a replay of its
 * stored history gives.
 */
async function level(rt: Runtime, inner: Store, ids: string[]): Promise<boolean> {
  for (const id of ids) {
    if (rt.executions.inDoubt(id)) return false;
    const held = rt.executions.stateOf(id);
    const row = await inner.getExecution(id);
    if (!row) return false;
    const stored = replay(await readRun(inner, row.run_id));
    if (stored.phase === "closed") {
      if (held) return false;
      continue;
    }
    if (!held || held.last_seq !== stored.last_seq || held.status !== stored.status) return false;
  }
  return true;
}

async function scenario(
  target: StoreTarget,
  fault: CommitFault,
  error: () => Error,
): Promise<void> {
  const inner = await openStore(await target.newDb());
  const store = faultyStore(inner);
  const rt = new Runtime(store, { sessionTimeoutMs: 60_000, maxActiveExecutions: null });
  await rt.start();
  const label = `${target.name} ${fault}`;
  try {
    await rt.definitions.deploy(WORKFLOW);
    const ids = Array.from({ length: GROUP }, (_, i) => `g${i}`);
    for (const id of ids) {
      await rt.executions.start({ workflow: "Three", execution_id: id, input: 1 });
    }
    const session = await rt.workers.register({
      worker_id: "w",
      runtime: "typescript",
      tasks: TASKS,
      concurrency: 100,
    });
    const first = await rt.workers.poll(session, 100, 1000);
    assert.equal(first.length, GROUP, `${label}: every first task`);

    // The six results go into one group commit, which meets the fault; so does the commit of
    // each of them alone that follows a failed batch (the cut took every connection).
    let faulted: string[] = [];
    let alone = 0;
    store.plan = {
      error,
      commit: (_n, items) => {
        if (faulted.length === 0) {
          if (items.length < 2) return "ok";
          faulted = items.map((i) => i.row.execution_id);
          alone = faulted.length;
          return fault;
        }
        if (alone > 0 && items.length === 1 && faulted.includes(items[0]!.row.execution_id)) {
          alone--;
          return fault;
        }
        return "ok";
      },
    };
    const answers = await Promise.allSettled(
      first.map((t) => rt.workers.report(t.token, { output: (t.input as number) + 1 })),
    );
    assert.ok(faulted.length >= 2, `${label}: no group commit met the fault`);
    assert.ok(answers.some((a) => a.status === "rejected"), `${label}: no result failed`);

    // Nobody retries: the server resolves the doubt by itself, and then memory is the history.
    await waitFor(
      () => level(rt, inner, ids),
      `${label}: memory level with the stored history after the fault`,
      10_000,
    );
    if (fault.startsWith("inflight")) {
      assert.ok(store.injected.inflight > faulted.length, `${label}: the in-flight commits`);
    }
    store.plan = {};

    // The worker retries the results that failed, then serves the rest.
    for (const [i, a] of answers.entries()) {
      if (a.status === "fulfilled") continue;
      const t = first[i]!;
      await rt.workers.report(t.token, { output: (t.input as number) + 1 });
    }
    await waitFor(
      async () => {
        for (const t of await rt.workers.poll(session, 100, 100)) {
          await rt.workers.report(t.token, { output: (t.input as number) + 1 });
        }
        return rt.executions.running === 0;
      },
      `${label}: every execution completed`,
      20_000,
    );

    for (const id of ids) {
      const row = (await inner.getExecution(id))!;
      const events = await readRun(inner, row.run_id);
      events.forEach((e, i) => assert.equal(e.seq, i + 1, `${label}: ${id} has a gap in seq`));
      const succeeded = events.filter((e) => e.type === "StepSucceeded").map((e) =>
        (e as { step: string }).step
      );
      assert.deepEqual(succeeded, ["one", "two", "three"], `${label}: ${id} StepSucceeded`);
      const state = replay(events);
      assert.equal(state.status, "completed", `${label}: ${id}`);
      assert.equal(row.status, state.status, `${label}: ${id} row status`);
      assert.deepEqual(row.output, state.output, `${label}: ${id} row output`);
      assert.equal(row.last_seq, state.last_seq, `${label}: ${id} row last_seq`);
    }
  } finally {
    store.plan = {};
    await rt.stop();
  }
}

for (const target of STORES) {
  for (const [errorName, error, faults] of ERRORS[target.name]) {
    Deno.test({
      name: `a group commit cut every way (${faults.join(", ")}) leaves every history whole ` +
        `and memory equal to it [${target.name}, ${errorName}]`,
      sanitizeOps: false,
      sanitizeResources: false,
      fn: async (t) => {
        for (const fault of faults) {
          await t.step(fault, () => scenario(target, fault, error));
        }
      },
    });
  }
}

Deno.test({
  name: "ambiguous group commit tests: stop PostgreSQL",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: stopSharedPostgres,
});
