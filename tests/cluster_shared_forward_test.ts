/**
 * Shared mode: commands that reach a server which does not own the execution go through the
 * owner's inbox (reference page, "Inbox"), and are answered as on one server.
 *
 * - A worker's result reported through another server comes back with the next task when no
 *   worker serving it talks to the owner: the owner dispatches the step the result makes ready
 *   to the reporting worker's session in the commit of the result (eager dispatch, as on one
 *   server) and sends the task with its reply. When the owner's own workers serve it, the step
 *   stays with them, so that the execution's later results are not forwarded too.
 * - A reply that does not fit into a notification (NOTIFY payloads end at 8000 bytes: an
 *   execution with a large input, a task with a large input) is answered all the same, at
 *   once: the waiting server reads what was left out. Before, the reply was lost and a signal
 *   that had been applied was answered 503 OWNER_UNAVAILABLE ("nothing was applied, retry")
 *   after 12 s, so a retry signalled twice.
 */
import assert from "node:assert/strict";
import postgres from "postgres";
import { api, waitFor } from "./support/server.ts";
import { sharedPostgres } from "./support/pg.ts";
import { metricValue, type SharedCluster, startSharedCluster } from "./support/shared_cluster.ts";

const T = { sanitizeOps: false, sanitizeResources: false };

const TWO_STEPS = {
  ir: "orbit-ir/1",
  name: "TwoSteps",
  version: "1.0.0",
  steps: [
    { id: "a", task: "t.fwd", contract: "1", input: "{% $input %}" },
    { id: "b", task: "t.fwd", contract: "1", input: "{% $steps.a %}" },
  ],
};

const WAITS = {
  ir: "orbit-ir/2",
  name: "Waits",
  version: "1.0.0",
  signals: { go: { schema: { type: "object" } } },
  steps: [
    { id: "w", wait_signal: "go", timeout_s: 3600 },
    { id: "done", return: "{% $signal %}" },
  ],
};

async function withTwo(fn: (c: SharedCluster) => Promise<void>): Promise<void> {
  const db = await (await sharedPostgres()).createDatabase();
  const c = await startSharedCluster({ db, nodes: 2, proxy: false });
  try {
    await fn(c);
  } finally {
    await c.close();
  }
}

/** Starts through `base` (that server owns it); the other may not know the workflow yet. */
async function start(base: string, body: Record<string, unknown>): Promise<void> {
  const end = Date.now() + 10_000;
  for (;;) {
    const r = await api(base).post("/v1/executions", body);
    if (r.status === 201) return;
    if (r.status === 404 && Date.now() < end) {
      await new Promise((r) => setTimeout(r, 100));
      continue;
    }
    assert.fail(`start through ${base}: ${r.status} ${JSON.stringify(r.body)}`);
  }
}

// deno-lint-ignore no-explicit-any
async function historyOf(base: string, id: string): Promise<any[]> {
  const r = await api(base).get(`/v1/executions/${id}/history`);
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body.events;
}

for (const size of [100, 20_000]) {
  Deno.test({
    ...T,
    name: `shared: a result through a server that does not own the execution comes back with ` +
      `the next task (input of ${size} bytes)`,
    fn: () =>
      withTwo(async (c) => {
        const [owner, other] = c.nodes as [typeof c.nodes[0], typeof c.nodes[0]];
        const a = api(owner.url);
        const b = api(other.url);
        assert.equal((await a.post("/v1/workflows", TWO_STEPS)).status, 201);
        const reg = await b.post("/v1/workers/register", {
          worker_id: "fwd-worker",
          runtime: "typescript",
          tasks: [{ name: "t.fwd", contract: "1" }],
          concurrency: 1,
        });
        assert.equal(reg.status, 200, JSON.stringify(reg.body));
        const session = reg.body.session_id as string;
        const input = { blob: "x".repeat(size) };
        await start(owner.url, { workflow: "TwoSteps", execution_id: "fwd-1", input });

        // The worker polls and reports through the server that does not own the execution.
        const polled = await b.post("/v1/workers/poll", { session_id: session, wait_s: 10 });
        assert.equal(polled.status, 200, JSON.stringify(polled.body));
        const [first] = polled.body.tasks;
        assert.equal(first.step, "a");
        assert.deepEqual(first.input, input);
        const started = Date.now();
        const done = await b.post("/v1/tasks/complete", {
          token: first.token,
          output: { echoed: input.blob },
          session_id: session,
          max_tasks: 1,
        });
        assert.equal(done.status, 200, JSON.stringify(done.body));
        assert.equal(done.body.accepted, true);
        assert.ok(Date.now() - started < 5_000, `answered after ${Date.now() - started} ms`);
        assert.equal(done.body.tasks?.length, 1, JSON.stringify(done.body));
        const [next] = done.body.tasks;
        assert.equal(next.step, "b");
        assert.equal(next.redelivery, false);
        assert.equal(next.execution_id, "fwd-1");
        assert.deepEqual(next.input, { echoed: input.blob });

        // The owner recorded that dispatch, to this worker's session, once.
        const dispatches = (await historyOf(owner.url, "fwd-1")).filter((e) =>
          e.type === "StepDispatched" && e.step === "b"
        );
        assert.equal(dispatches.length, 1);
        assert.equal(dispatches[0].worker_session, session);

        const last = await b.post("/v1/tasks/complete", { token: next.token, output: 1 });
        assert.equal(last.body.accepted, true);
        const w = await b.get("/v1/executions/fwd-1/wait?timeout_s=10");
        assert.equal(w.body.status, "completed");
        const events = await historyOf(other.url, "fwd-1");
        assert.equal(events.filter((e) => e.type === "StepSucceeded").length, 2);
        // A second result for the same attempt is refused, through either server.
        const again = await b.post("/v1/tasks/complete", { token: next.token, output: 2 });
        assert.equal(again.body.accepted, false);
      }),
  });
}

Deno.test({
  ...T,
  name: "shared: a signal and a cancel through another server are answered at once when the " +
    "execution's input is too large for a notification",
  fn: () =>
    withTwo(async (c) => {
      const [owner, other] = c.nodes as [typeof c.nodes[0], typeof c.nodes[0]];
      assert.equal((await api(owner.url).post("/v1/workflows", WAITS)).status, 201);
      const input = { blob: "é".repeat(6_000) }; // 12,000 bytes in UTF-8
      await start(owner.url, { workflow: "Waits", execution_id: "big-1", input });
      await start(owner.url, { workflow: "Waits", execution_id: "big-2", input });
      const b = api(other.url);

      let t = Date.now();
      const sig = await b.post("/v1/executions/big-1/signals/go", { payload: { n: 1 } });
      assert.equal(sig.status, 200, JSON.stringify(sig.body));
      assert.equal(typeof sig.body.seq, "number");
      assert.ok(Date.now() - t < 5_000, `signal answered after ${Date.now() - t} ms`);
      const w = await b.get("/v1/executions/big-1/wait?timeout_s=10");
      assert.equal(w.body.status, "completed");
      const received = (await historyOf(other.url, "big-1")).filter((e) =>
        e.type === "SignalReceived"
      );
      assert.equal(received.length, 1);
      assert.equal(received[0].seq, sig.body.seq);

      t = Date.now();
      const cancel = await b.post("/v1/executions/big-2/cancel", {});
      assert.equal(cancel.status, 200, JSON.stringify(cancel.body));
      assert.ok(Date.now() - t < 5_000, `cancel answered after ${Date.now() - t} ms`);
      assert.equal(cancel.body.execution_id, "big-2");
      assert.ok(["cancelled", "running"].includes(cancel.body.status), cancel.body.status);
      const w2 = await b.get("/v1/executions/big-2/wait?timeout_s=10");
      assert.equal(w2.body.status, "cancelled");
    }),
});

Deno.test({
  ...T,
  name: "shared: a result forwarded to the owner leaves the next step with the workers that " +
    "talk to the owner, so the execution's later results are not forwarded too",
  fn: () =>
    withTwo(async (c) => {
      // Issue 39: the reply used to carry the next step to the reporting worker, whose slot is
      // on the other server, so every later result of the execution was forwarded as well.
      const [owner, other] = c.nodes as [typeof c.nodes[0], typeof c.nodes[0]];
      const a = api(owner.url);
      const b = api(other.url);
      assert.equal((await a.post("/v1/workflows", TWO_STEPS)).status, 201);
      const reg = (base: typeof a, worker_id: string) =>
        base.post("/v1/workers/register", {
          worker_id,
          runtime: "typescript",
          tasks: [{ name: "t.fwd", contract: "1" }],
          concurrency: 1,
        }).then((r) => {
          assert.equal(r.status, 200, JSON.stringify(r.body));
          return r.body.session_id as string;
        });
      const far = await reg(b, "far-worker");
      const near = await reg(a, "near-worker");
      // Whether the near worker's poll is already waiting on the owner cannot be seen from
      // outside: it gets a moment, and a round whose result came first is tried again.
      let kept = 0;
      for (let i = 1; i <= 5 && kept === 0; i++) {
        const id = `keep-${i}`;
        await start(owner.url, { workflow: "TwoSteps", execution_id: id, input: i });
        // The far worker takes step a through the server that does not own the execution.
        const polled = await b.post("/v1/workers/poll", { session_id: far, wait_s: 10 });
        assert.equal(polled.status, 200, JSON.stringify(polled.body));
        const [first] = polled.body.tasks;
        assert.equal(first.step, "a");
        const waiting = a.post("/v1/workers/poll", { session_id: near, wait_s: 3 });
        await new Promise((r) => setTimeout(r, 100 * i));
        // Its result goes through that server: forwarded to the owner's inbox.
        const done = await b.post("/v1/tasks/complete", {
          token: first.token,
          output: 2,
          session_id: far,
          max_tasks: 1,
        });
        assert.equal(done.status, 200, JSON.stringify(done.body));
        assert.equal(done.body.accepted, true);
        const got = await waiting;
        assert.equal(got.status, 200, JSON.stringify(got.body));
        const next = [...(done.body.tasks ?? []), ...got.body.tasks];
        assert.equal(next.length, 1, JSON.stringify({ done: done.body, got: got.body }));
        assert.equal(next[0].step, "b");
        const dispatched = (await historyOf(owner.url, id)).filter((e) =>
          e.type === "StepDispatched" && e.step === "b"
        );
        assert.equal(dispatched.length, 1);
        if (got.body.tasks.length === 1) {
          // Kept with the owner's worker, dispatched in the result's commit.
          assert.equal(dispatched[0].worker_session, near);
          kept++;
        }
        const last = await api(got.body.tasks.length === 1 ? owner.url : other.url).post(
          "/v1/tasks/complete",
          { token: next[0].token, output: 3 },
        );
        assert.equal(last.body.accepted, true);
        const w = await a.get(`/v1/executions/${id}/wait?timeout_s=10`);
        assert.equal(w.body.status, "completed");
      }
      assert.equal(kept, 1, "no forwarded result left its next step with the owner's worker");
    }),
});

Deno.test({
  ...T,
  name: "shared: a start hands its first task to a poll waiting on its server in its own commit",
  fn: () =>
    withTwo(async (c) => {
      const [owner] = c.nodes as [typeof c.nodes[0]];
      const a = api(owner.url);
      assert.equal((await a.post("/v1/workflows", TWO_STEPS)).status, 201);
      const reg = await a.post("/v1/workers/register", {
        worker_id: "first-worker",
        runtime: "typescript",
        tasks: [{ name: "t.fwd", contract: "1" }],
        concurrency: 1,
      });
      const session = reg.body.session_id as string;
      const sql = postgres(c.db, { max: 1, onnotice: () => {} });
      try {
        const commits = async () =>
          metricValue(
            await (await fetch(`${owner.url}/v1/metrics`)).text(),
            "orbit_commits_total",
          );
        await waitFor(async () => (await owner.health()).worker_sessions === 1, "the session");
        // A poll waits (nothing is queued) and a start hands it the first task. Whether the
        // poll is already waiting cannot be seen from outside: it gets a moment, and a start
        // that came first (claimed, two commits) is done and tried again.
        let handed = 0;
        for (let i = 1; i <= 5 && handed === 0; i++) {
          const id = `first-${i}`;
          const polled = a.post("/v1/workers/poll", { session_id: session, wait_s: 20 });
          await new Promise((r) => setTimeout(r, 100 * i));
          const before = await commits();
          await start(owner.url, { workflow: "TwoSteps", execution_id: id, input: i });
          const r = await polled;
          assert.equal(r.status, 200, JSON.stringify(r.body));
          const [task] = r.body.tasks;
          assert.equal(task.execution_id, id);
          assert.equal(task.step, "a");
          const rows = await sql`SELECT state, session_id, token FROM orbit_tasks
            WHERE execution_id = ${id}`;
          assert.deepEqual(rows.map((x) => ({ ...x })), [
            { state: "claimed", session_id: session, token: task.token },
          ]);
          const dispatched = (await historyOf(owner.url, id)).filter((e) =>
            e.type === "StepDispatched"
          );
          assert.equal(dispatched.length, 1);
          assert.equal(dispatched[0].token, task.token);
          // One commit holds the start and the dispatch (a claim takes a second one).
          if (await commits() - before === 1) {
            handed++;
            // The task went out from the owner's memory: its row is written without the
            // payload (a claim's row keeps it: the claim hands it out from the row).
            const [row] = await sql`SELECT payload IS NULL AS bare FROM orbit_tasks
              WHERE execution_id = ${id}`;
            assert.equal(row!.bare, true);
          }
        }
        assert.equal(handed, 1, "no start handed its first task to the waiting poll");
      } finally {
        await sql.end();
      }
    }),
});

Deno.test({
  ...T,
  name: "shared: a result that reaches the owner before the claim's dispatch is applied waits " +
    "for it (the dispatch first, in seq order)",
  fn: () =>
    withTwo(async (c) => {
      const [owner, other] = c.nodes as [typeof c.nodes[0], typeof c.nodes[0]];
      const b = api(other.url);
      assert.equal((await api(owner.url).post("/v1/workflows", TWO_STEPS)).status, 201);
      const reg = await b.post("/v1/workers/register", {
        worker_id: "fast-worker",
        runtime: "typescript",
        tasks: [{ name: "t.fwd", contract: "1" }],
        concurrency: 1,
      });
      const session = reg.body.session_id as string;
      await start(owner.url, { workflow: "TwoSteps", execution_id: "fast-1", input: 1 });
      // The owner is frozen while the other server claims the task (a `dispatched` entry in
      // the owner's inbox) and the worker reports its result (a `complete` entry): on waking
      // the owner hears both notifications at once, the result's carrying the entry itself.
      owner.pause();
      try {
        const polled = await b.post("/v1/workers/poll", { session_id: session, wait_s: 10 });
        assert.equal(polled.status, 200, JSON.stringify(polled.body));
        const [task] = polled.body.tasks;
        assert.equal(task.execution_id, "fast-1");
        const done = b.post("/v1/tasks/complete", {
          token: task.token,
          output: 5,
          session_id: session,
          max_tasks: 1,
        });
        // The owner resumes only once the result is in its inbox, behind the dispatch.
        const sql = postgres(c.db, { max: 1, onnotice: () => {} });
        try {
          await waitFor(async () => {
            const kinds = await sql`SELECT kind FROM orbit_inbox
              WHERE execution_id = 'fast-1' ORDER BY seq`;
            return kinds.map((k) => k.kind).join(",") === "dispatched,complete";
          }, "the dispatch and the result in the owner's inbox");
        } finally {
          await sql.end();
        }
        owner.resume();
        const r = await done;
        assert.equal(r.status, 200, JSON.stringify(r.body));
        assert.equal(r.body.accepted, true, JSON.stringify(r.body));
        assert.equal(r.body.tasks?.[0]?.step, "b", JSON.stringify(r.body));
        const events = await historyOf(other.url, "fast-1");
        assert.deepEqual(
          events.filter((e) => e.step === "a").map((e) => e.type),
          ["StepScheduled", "StepDispatched", "StepSucceeded"],
        );
      } finally {
        if (owner.paused) owner.resume();
      }
    }),
});
