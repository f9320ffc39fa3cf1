/**
 * Shared mode, in process on a real PostgreSQL: the time-driven work of an execution whose
 * ownership moves (reference page, "Ownership and fencing": "timers continue"). Node A's
 * heartbeat is held back by a row lock the test keeps on its `orbit_nodes` row, so node B
 * takes its executions over after the node timeout while A runs on with them in memory, as a
 * node that was paused or whose heartbeat is wedged: A's timers come due as B's do, and only
 * B's may write.
 *
 * Why one file over 800 lines: every test here holds a node's heartbeat back the same way and
 * waits out the same node timeout; run one after another they do not compete for the CPU that
 * decides when the takeover comes.
 */
import assert from "node:assert/strict";
import { migratedDatabase } from "../tests/support/pg.ts";
import { deployAndStart, startedNode, takeOverFrom } from "../tests/support/in_process_node.ts";
import { waitFor } from "../tests/support/server.ts";
import { postgresClient } from "../lib/store/postgres.ts";
import type { Store } from "../lib/store/store.ts";
import type { RemoteCommands } from "../lib/executions/types.ts";

const T = { sanitizeOps: false, sanitizeResources: false };

type Node = Awaited<ReturnType<typeof startedNode>>;
// deno-lint-ignore no-explicit-any
type Event = any;

/**
 * Holds a lock on `node`'s `orbit_nodes` row: its heartbeat waits, and after the node timeout
 * the others take its executions over while it runs on. `release()` lets the heartbeat go.
 */
async function wedgeHeartbeat(url: string, node: string): Promise<{ release(): Promise<void> }> {
  const sql = postgresClient(url, { max: 1, applicationName: "orbit-test-wedge" });
  let release!: () => void;
  const released = new Promise<void>((r) => release = r);
  let locked!: () => void;
  const isLocked = new Promise<void>((r) => locked = r);
  const tx = sql.begin(async (tx) => {
    await tx.unsafe("SELECT 1 FROM orbit_nodes WHERE node_id = $1 FOR UPDATE", [node]);
    locked();
    await released;
  });
  await isLocked;
  return {
    async release() {
      release();
      await tx;
      await sql.end({ timeout: 1 });
    },
  };
}

async function ownerOf(url: string, id: string): Promise<string | null> {
  const sql = postgresClient(url, { max: 1, applicationName: "orbit-test" });
  try {
    const [r] = await sql.unsafe("SELECT node_id FROM orbit_owners WHERE execution_id = $1", [id]);
    return r ? String(r.node_id) : null;
  } finally {
    await sql.end({ timeout: 1 });
  }
}

async function history(n: Node, id: string): Promise<Event[]> {
  const r = await n.call("GET", `/v1/executions/${id}/history?limit=1000`);
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body.events;
}

async function statusOf(n: Node, id: string): Promise<string> {
  return (await n.call("GET", `/v1/executions/${id}`)).body.status;
}

/** Waits until B owns `id` and holds it in memory (the takeover loaded it). */
async function takenOver(url: string, b: Node, id: string): Promise<void> {
  await waitFor(
    async () => (await ownerOf(url, id)) === "node-b" && b.n.runtime.executions.holds(id),
    `node B to take ${id} over`,
    20_000,
    50,
  );
}

/**
 * Runs `fn` with node A (which owns what is started through it) and node B, A's heartbeat
 * wedged once `wedge()` is called; everything is stopped at the end.
 */
async function withTwo(
  fn: (
    ctx: { url: string; a: Node; b: Node; wedge(): Promise<void>; unwedge(): Promise<void> },
  ) => Promise<void>,
  opts: Parameters<typeof startedNode>[2] = {},
): Promise<void> {
  const url = await migratedDatabase();
  const a = await startedNode(url, "node-a", opts);
  const b = await startedNode(url, "node-b", opts);
  let wedged: { release(): Promise<void> } | null = null;
  try {
    await fn({
      url,
      a,
      b,
      wedge: async () => {
        wedged = await wedgeHeartbeat(url, "node-a");
      },
      unwedge: async () => {
        const w = wedged as { release(): Promise<void> } | null;
        wedged = null;
        await w?.release();
      },
    });
  } finally {
    await (wedged as { release(): Promise<void> } | null)?.release();
    await b.n.stop();
    await a.n.stop();
  }
}

/** Every timer fired at or after the time it was set for. */
function assertOnTime(events: Event[]): void {
  for (const f of events.filter((e) => e.type === "TimerFired")) {
    const set = events.find((e) => e.type === "TimerStarted" && e.timer_id === f.timer_id);
    assert.ok(
      f.time_ms >= set.fire_at_ms,
      `${f.timer_id} fired ${set.fire_at_ms - f.time_ms} ms early`,
    );
  }
}

const NAP = {
  ir: "orbit-ir/2",
  name: "Nap",
  version: "1.0.0",
  steps: [{ id: "nap", sleep_s: 6 }, { id: "r", return: "rested" }],
};

Deno.test({
  ...T,
  name: "shared timers: a sleep taken over fires once, on the new owner; the old owner's timer " +
    "is fenced and writes nothing",
  fn: () =>
    withTwo(async ({ url, a, b, wedge }) => {
      await deployAndStart(a, [NAP], { workflow: "Nap", execution_id: "nap-1", input: null });
      await wedge();
      await takenOver(url, b, "nap-1");
      assert.ok(a.n.runtime.executions.holds("nap-1"), "A still holds it (it has not noticed)");
      await waitFor(async () => (await statusOf(b, "nap-1")) === "completed", "the nap", 20_000);
      // A's own timer came due too; its append was fenced and it let the execution go.
      await waitFor(() => !a.n.runtime.executions.holds("nap-1"), "A to let nap-1 go", 10_000);
      const events = await history(b, "nap-1");
      const types = events.map((e) => e.type);
      assert.equal(types.filter((t) => t === "TimerFired").length, 1, types.join(","));
      assert.equal(types.filter((t) => t === "WorkflowCompleted").length, 1, types.join(","));
      assertOnTime(events);
    }),
});

const DEADLINE = {
  ir: "orbit-ir/2",
  name: "Deadline",
  version: "1.0.0",
  signals: { go: {} },
  timeout_s: 6,
  steps: [{ id: "w", wait_signal: "go" }, { id: "r", return: "{% $steps.w %}" }],
};

Deno.test({
  ...T,
  name: "shared timers: a workflow timeout_s taken over times the execution out once, on the " +
    "new owner",
  fn: () =>
    withTwo(async ({ url, a, b, wedge }) => {
      await deployAndStart(a, [DEADLINE], {
        workflow: "Deadline",
        execution_id: "dl-1",
        input: null,
      });
      await wedge();
      await takenOver(url, b, "dl-1");
      await waitFor(async () => (await statusOf(b, "dl-1")) === "timed_out", "the timeout", 20_000);
      await waitFor(() => !a.n.runtime.executions.holds("dl-1"), "A to let dl-1 go", 10_000);
      const events = await history(b, "dl-1");
      const types = events.map((e) => e.type);
      assert.equal(types.filter((t) => t === "TimerFired").length, 1, types.join(","));
      assert.equal(types.filter((t) => t === "WorkflowTimedOut").length, 1, types.join(","));
      assertOnTime(events);
    }),
});

const FLAKY = {
  ir: "orbit-ir/2",
  name: "Flaky",
  version: "1.0.0",
  steps: [
    {
      id: "t",
      task: "flaky.run",
      contract: "1",
      retry: { max_attempts: 3, initial_ms: 5000, backoff: 1 },
    },
    { id: "r", return: "{% $steps.t %}" },
  ],
};

async function register(n: Node, task: string): Promise<string> {
  const reg = await n.call("POST", "/v1/workers/register", {
    worker_id: "w-1",
    tasks: [{ name: task, contract: "1" }],
    concurrency: 1,
  });
  assert.equal(reg.status, 200, JSON.stringify(reg.body));
  return reg.body.session_id;
}

// deno-lint-ignore no-explicit-any
async function pollOne(n: Node, session: string, timeoutMs = 20_000): Promise<any> {
  return await waitFor(
    async () => {
      const r = await n.call("POST", "/v1/workers/poll", { session_id: session, wait_s: 1 });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      return r.body.tasks[0];
    },
    "a task",
    timeoutMs,
    0,
  );
}

Deno.test({
  ...T,
  name: "shared timers: a retry waiting out its backoff at the takeover is scheduled once, by " +
    "the new owner, when the backoff ends",
  fn: () =>
    withTwo(async ({ url, a, b, wedge }) => {
      await deployAndStart(a, [FLAKY], { workflow: "Flaky", execution_id: "fl-1", input: null });
      const session = await register(a, "flaky.run");
      const first = await pollOne(a, session);
      assert.equal(first.attempt, 1);
      const failed = await a.call("POST", "/v1/tasks/fail", {
        token: first.token,
        error: { code: "BOOM", message: "try again", retryable: true },
      });
      assert.equal(failed.status, 200, JSON.stringify(failed.body));
      await wedge();
      await takenOver(url, b, "fl-1");
      const second = await pollOne(b, session);
      assert.equal(second.attempt, 2);
      const done = await b.call("POST", "/v1/tasks/complete", { token: second.token, output: 7 });
      assert.equal(done.status, 200, JSON.stringify(done.body));
      await waitFor(async () => (await statusOf(b, "fl-1")) === "completed", "completion", 20_000);
      await waitFor(() => !a.n.runtime.executions.holds("fl-1"), "A to let fl-1 go", 10_000);
      const events = await history(b, "fl-1");
      const types = events.map((e) => `${e.type}:${e.attempt ?? ""}`);
      assert.equal(types.filter((t) => t === "TimerFired:").length, 1, types.join(","));
      assert.equal(types.filter((t) => t === "StepScheduled:2").length, 1, types.join(","));
      assert.equal(types.filter((t) => t === "StepScheduled:3").length, 0, types.join(","));
      assertOnTime(events);
    }),
});

const SLOW = {
  ir: "orbit-ir/2",
  name: "Slow",
  version: "1.0.0",
  steps: [
    { id: "t", task: "slow.run", contract: "1", timeout_s: 6, retry: { max_attempts: 1 } },
    { id: "r", return: "{% $steps.t %}" },
  ],
};

Deno.test({
  ...T,
  name: "shared timers: the start-to-close deadline of an attempt in flight at the takeover " +
    "fails it once, on the new owner",
  fn: () =>
    withTwo(async ({ url, a, b, wedge }) => {
      await deployAndStart(a, [SLOW], { workflow: "Slow", execution_id: "sl-1", input: null });
      const session = await register(a, "slow.run");
      const task = await pollOne(a, session);
      await wedge();
      await takenOver(url, b, "sl-1");
      // The worker stays alive (its heartbeats go through B) and never answers.
      const beat = setInterval(() => {
        b.call("POST", "/v1/workers/heartbeat", { session_id: session, tokens: [task.token] })
          .catch(() => {});
      }, 500);
      try {
        await waitFor(async () => (await statusOf(b, "sl-1")) === "failed", "the deadline", 20_000);
      } finally {
        clearInterval(beat);
      }
      await waitFor(() => !a.n.runtime.executions.holds("sl-1"), "A to let sl-1 go", 10_000);
      const events = await history(b, "sl-1");
      const types = events.map((e) => e.type);
      const failed = events.filter((e) => e.type === "StepFailed");
      assert.equal(failed.length, 1, types.join(","));
      assert.equal(failed[0].error.code, "STEP_TIMEOUT", JSON.stringify(failed[0]));
      const dispatched = events.find((e) => e.type === "StepDispatched");
      assert.ok(failed[0].time_ms >= dispatched.deadline_ms, "the deadline fired early");
    }, { sessionTimeoutMs: 20_000 }),
});

Deno.test({
  ...T,
  name: "shared timers: an http call in flight at the takeover is redone once by the new owner " +
    "after the session timeout; the old owner's late result is fenced",
  fn: async () => {
    const calls: Array<{ key: string | null; answer: (r: Response) => void }> = [];
    const target = Deno.serve(
      { hostname: "127.0.0.1", port: 0, onListen: () => {} },
      (req) =>
        new Promise<Response>((answer) => {
          calls.push({ key: req.headers.get("idempotency-key"), answer });
        }),
    );
    const port = target.addr.port;
    try {
      await withTwo(async ({ url, a, b, wedge }) => {
        const wf = {
          ir: "orbit-ir/2",
          name: "Call",
          version: "1.0.0",
          steps: [
            { id: "c", http: { url: `http://127.0.0.1:${port}/x`, timeout_s: 60 } },
            { id: "r", return: "{% $steps.c.body %}" },
          ],
        };
        await deployAndStart(a, [wf], { workflow: "Call", execution_id: "http-1", input: null });
        await waitFor(() => calls.length === 1, "A's call", 10_000, 20);
        await wedge();
        await takenOver(url, b, "http-1");
        await waitFor(() => calls.length === 2, "B's call, one session timeout later", 20_000, 20);
        assert.equal(calls[1]!.key, calls[0]!.key);
        // The old owner's call answers first: its result is not B's to record.
        calls[0]!.answer(Response.json("first"));
        await waitFor(() => !a.n.runtime.executions.holds("http-1"), "A to let it go", 10_000);
        calls[1]!.answer(Response.json("second"));
        await waitFor(async () => (await statusOf(b, "http-1")) === "completed", "done", 20_000);
        const events = await history(b, "http-1");
        const types = events.map((e) => e.type);
        assert.equal(types.filter((t) => t === "StepSucceeded").length, 1, types.join(","));
        assert.equal(types.filter((t) => t === "StepAttemptUncertain").length, 1, types.join(","));
        assert.equal((await b.call("GET", "/v1/executions/http-1")).body.output, "second");
        assert.equal(calls.length, 2);
      }, { httpAllow: [`127.0.0.1:${port}`] });
    } finally {
      for (const c of calls) c.answer(new Response("gone", { status: 500 }));
      await target.shutdown();
    }
  },
});

const PARENT = {
  ir: "orbit-ir/2",
  name: "Parent",
  version: "1.0.0",
  steps: [
    { id: "c", child: { workflow: "Nap", execution_id: "{% $execution.id & '-child' %}" } },
    { id: "r", return: "{% $steps.c %}" },
  ],
};

Deno.test({
  ...T,
  name: "shared timers: a child's sleep taken over with its parent fires once on the new owner, " +
    "which completes the parent",
  fn: () =>
    withTwo(async ({ url, a, b, wedge, unwedge }) => {
      await deployAndStart(a, [NAP, PARENT], {
        workflow: "Parent",
        execution_id: "par-1",
        input: null,
      });
      await waitFor(() => a.n.runtime.executions.holds("par-1-child"), "the child", 10_000, 20);
      await wedge();
      await takenOver(url, b, "par-1");
      await takenOver(url, b, "par-1-child");
      await waitFor(async () => (await statusOf(b, "par-1")) === "completed", "parent", 20_000);
      // The child's timer came due on A too, and was fenced; the parent waits there with
      // nothing due until A's heartbeat goes through again and A looks at what it owns.
      await waitFor(() => !a.n.runtime.executions.holds("par-1-child"), "A to drop the child");
      await unwedge();
      await waitFor(() => !a.n.runtime.executions.holds("par-1"), "A to drop the parent", 10_000);
      const child = await history(b, "par-1-child");
      const types = child.map((e) => e.type);
      assert.equal(types.filter((t) => t === "TimerFired").length, 1, types.join(","));
      assert.equal(types.filter((t) => t === "WorkflowCompleted").length, 1, types.join(","));
      assertOnTime(child);
      const parent = (await history(b, "par-1")).map((e) => e.type);
      assert.equal(parent.filter((t) => t === "WorkflowCompleted").length, 1, parent.join(","));
      assert.equal((await b.call("GET", "/v1/executions/par-1")).body.output, "rested");
    }),
});

const LOOP = {
  ir: "orbit-ir/2",
  name: "Loop",
  version: "1.0.0",
  steps: [
    { id: "nap", sleep_s: 3 },
    {
      id: "more",
      if: "{% $input.n < 3 %}",
      then: [{ id: "again", continue_as_new: { input: { n: "{% $input.n + 1 %}" } } }],
    },
    { id: "r", return: "{% $input.n %}" },
  ],
};

Deno.test({
  ...T,
  name: "shared timers: continue-as-new across a takeover: each run's sleep fires once, the " +
    "next runs start on the new owner",
  fn: () =>
    withTwo(async ({ url, a, b, wedge }) => {
      await deployAndStart(a, [LOOP], {
        workflow: "Loop",
        execution_id: "loop-1",
        input: { n: 1 },
      });
      await wedge();
      await takenOver(url, b, "loop-1");
      await waitFor(async () => (await statusOf(b, "loop-1")) === "completed", "the loop", 30_000);
      await waitFor(() => !a.n.runtime.executions.holds("loop-1"), "A to let it go", 10_000);
      assert.equal((await b.call("GET", "/v1/executions/loop-1")).body.output, 3);
      const runs = (await b.call("GET", "/v1/executions/loop-1/runs")).body;
      const sql = postgresClient(url, { max: 1, applicationName: "orbit-test" });
      try {
        const rows = await sql.unsafe(
          "SELECT run_id, type FROM execution_events WHERE execution_id = 'loop-1' ORDER BY run_id, seq",
          [],
        );
        const byRun = new Map<string, string[]>();
        for (const r of rows) {
          byRun.set(String(r.run_id), [...(byRun.get(String(r.run_id)) ?? []), String(r.type)]);
        }
        assert.equal(byRun.size, 3, JSON.stringify([...byRun], null, 1) + JSON.stringify(runs));
        for (const [run, types] of byRun) {
          assert.equal(types.filter((t) => t === "TimerFired").length, 1, `${run}: ${types}`);
          assert.equal(types.filter((t) => t === "WorkflowCreated").length, 1, `${run}: ${types}`);
        }
      } finally {
        await sql.end({ timeout: 1 });
      }
    }),
});

const LONG_NAP = {
  ir: "orbit-ir/2",
  name: "LongNap",
  version: "1.0.0",
  steps: [{ id: "nap", sleep_s: 12 }, { id: "r", return: "rested" }],
};

Deno.test({
  ...T,
  name: "shared timers, --cache-executions: a sleep taken over out of memory is loaded by the " +
    "new owner's wake-up poll and fires once, on time",
  fn: () =>
    withTwo(async ({ url, a, b }) => {
      await deployAndStart(a, [LONG_NAP], {
        workflow: "LongNap",
        execution_id: "ln-1",
        input: null,
      });
      // A stops without leaving: B takes it over after the node timeout, not due yet.
      await a.n.abort();
      await waitFor(async () => (await ownerOf(url, "ln-1")) === "node-b", "the takeover", 20_000);
      assert.equal(b.n.runtime.executions.holds("ln-1"), false);
      await waitFor(async () => (await statusOf(b, "ln-1")) === "completed", "the nap", 30_000);
      const events = await history(b, "ln-1");
      const types = events.map((e) => e.type);
      assert.equal(types.filter((t) => t === "TimerFired").length, 1, types.join(","));
      assertOnTime(events);
    }, { cacheExecutions: 10 }),
});

Deno.test({
  ...T,
  name: "shared timers: the attempt of a worker that died with its owner is redelivered once, " +
    "by the new owner, one session timeout after the worker's last contact",
  fn: () =>
    withTwo(async ({ url, a, b, wedge }) => {
      await deployAndStart(a, [SLOW], { workflow: "Slow", execution_id: "dw-1", input: null });
      const dead = await register(a, "slow.run");
      const first = await pollOne(a, dead);
      await wedge();
      await takenOver(url, b, "dw-1");
      const alive = await register(b, "slow.run");
      const again = await pollOne(b, alive);
      assert.equal(again.attempt, first.attempt);
      assert.equal(again.redelivery, true);
      const done = await b.call("POST", "/v1/tasks/complete", { token: again.token, output: 1 });
      assert.equal(done.body.accepted, true, JSON.stringify(done.body));
      await waitFor(async () => (await statusOf(b, "dw-1")) === "completed", "done", 20_000);
      const types = (await history(b, "dw-1")).map((e) => e.type);
      assert.equal(types.filter((t) => t === "StepAttemptUncertain").length, 1, types.join(","));
      assert.equal(types.filter((t) => t === "StepDispatched").length, 2, types.join(","));
    }),
});

Deno.test({
  ...T,
  name: "shared timers: a graceful leave hands a sleep over at once; it fires once, on time",
  fn: () =>
    withTwo(async ({ url, a, b }) => {
      await deployAndStart(a, [NAP], { workflow: "Nap", execution_id: "gl-1", input: null });
      await a.n.stop();
      await takenOver(url, b, "gl-1");
      await waitFor(async () => (await statusOf(b, "gl-1")) === "completed", "the nap", 20_000);
      const events = await history(b, "gl-1");
      const types = events.map((e) => e.type);
      assert.equal(types.filter((t) => t === "TimerFired").length, 1, types.join(","));
      assertOnTime(events);
    }),
});

Deno.test({
  ...T,
  name: "shared timers: a restart under the same node id resumes a sleep, which fires once, " +
    "on time",
  fn: async () => {
    const url = await migratedDatabase();
    const a = await startedNode(url, "node-a");
    let again: Node | null = null;
    try {
      await deployAndStart(a, [NAP], { workflow: "Nap", execution_id: "rs-1", input: null });
      await a.n.stop();
      again = await startedNode(url, "node-a");
      assert.ok(again.n.runtime.executions.holds("rs-1"));
      await waitFor(async () => (await statusOf(again!, "rs-1")) === "completed", "nap", 20_000);
      const events = await history(again, "rs-1");
      const types = events.map((e) => e.type);
      assert.equal(types.filter((t) => t === "TimerFired").length, 1, types.join(","));
      assertOnTime(events);
    } finally {
      await again?.n.stop();
      await a.n.stop();
    }
  },
});

const WAIT_CHILD = {
  ir: "orbit-ir/2",
  name: "WaitChild",
  version: "1.0.0",
  signals: { go: {} },
  steps: [{ id: "w", wait_signal: "go" }, { id: "r", return: "{% $steps.w %}" }],
};

const WAIT_PARENT = {
  ir: "orbit-ir/2",
  name: "WaitParent",
  version: "1.0.0",
  steps: [
    { id: "c", child: { workflow: "WaitChild", execution_id: "{% $execution.id & '-child' %}" } },
    { id: "r", return: "{% $steps.c %}" },
  ],
};

Deno.test({
  ...T,
  name: "shared children: a node that lost a parent while it was starting its child does not " +
    "cancel the child its new owner waits for",
  fn: async () => {
    const url = await migratedDatabase();
    // Node A's read of the child's row (the first thing it does for a new child step) waits
    // for the test: the tree moves to B meanwhile.
    let open!: () => void;
    const gate = new Promise<void>((r) => open = r);
    let held = false;
    let read!: () => void;
    const answered = new Promise<void>((r) => read = r);
    const hold = (store: Store): Store =>
      new Proxy(store, {
        get(target, key) {
          const v = Reflect.get(target, key, target);
          if (key !== "getExecution") return typeof v === "function" ? v.bind(target) : v;
          return async (id: string) => {
            if (id !== "wp-1-child" || held) return await target.getExecution(id);
            held = true;
            await gate;
            const row = await target.getExecution(id);
            setTimeout(read, 0); // once the caller has gone on with the row
            return row;
          };
        },
      });
    const a = await startedNode(url, "node-a", { store: hold });
    const b = await startedNode(url, "node-b");
    let wedged: { release(): Promise<void> } | null = null;
    try {
      await deployAndStart(a, [WAIT_CHILD, WAIT_PARENT], {
        workflow: "WaitParent",
        execution_id: "wp-1",
        input: null,
      });
      await waitFor(() => held, "A to look for the child", 10_000, 10);
      wedged = await wedgeHeartbeat(url, "node-a");
      await takenOver(url, b, "wp-1");
      // B, the owner now, starts the child and records it.
      await takenOver(url, b, "wp-1-child").catch(async () => {
        await waitFor(() => b.n.runtime.executions.holds("wp-1-child"), "B's child", 10_000);
      });
      await waitFor(
        async () => (await history(b, "wp-1")).some((e) => e.type === "ChildStarted"),
        "the ChildStarted of B",
        10_000,
      );
      // A's heartbeat goes through again: it finds it lost the parent and lets it go.
      await wedged.release();
      wedged = null;
      await waitFor(() => !a.n.runtime.executions.holds("wp-1"), "A to drop the parent", 10_000);
      // A's look for the child answers now; whatever A sends another node is awaited.
      const ex = a.n.runtime.executions;
      const remote = ex.remote!;
      const sent: Promise<unknown>[] = [];
      ex.remote = {
        forward: (...args: Parameters<RemoteCommands["forward"]>) => {
          const p = remote.forward(...args);
          sent.push(p.catch(() => {}));
          return p;
        },
        drainOwned: (id: string) => remote.drainOwned!(id),
      };
      open();
      await answered;
      await Promise.all(sent);
      assert.equal(await statusOf(b, "wp-1-child"), "running");
      assert.equal(sent.length, 0, "A sent a command for the tree it lost");
      const sig = await b.call("POST", "/v1/executions/wp-1-child/signals/go", { payload: "ok" });
      assert.equal(sig.status, 200, JSON.stringify(sig.body));
      await waitFor(async () => (await statusOf(b, "wp-1")) === "completed", "parent", 20_000);
      assert.equal((await b.call("GET", "/v1/executions/wp-1")).body.output, "ok");
    } finally {
      open();
      await (wedged as { release(): Promise<void> } | null)?.release();
      await b.n.stop();
      await a.n.stop();
    }
  },
});

Deno.test({
  ...T,
  name: "shared children: a parent cancelled on its own node while its child was starting " +
    "leaves no child running",
  fn: async () => {
    const url = await migratedDatabase();
    // Node A's read of the child's row waits for the test: the parent is cancelled meanwhile,
    // before the child exists (the parent's cancel of it then finds nothing to cancel). The
    // commit that creates the child is watched.
    let open!: () => void;
    const gate = new Promise<void>((r) => open = r);
    let held = false;
    let create: Promise<string> | null = null;
    const hold = (store: Store): Store =>
      new Proxy(store, {
        get(target, key) {
          const v = Reflect.get(target, key, target);
          if (key === "commit") {
            return (items: Parameters<Store["commit"]>[0]) => {
              const p = target.commit(items);
              if (items.some((i) => i.create && i.row.execution_id === "wp-2-child")) {
                create = p.then(
                  (r) =>
                    r?.fenced?.has("wp-2-child") || r?.lost?.has("wp-2-child")
                      ? "refused"
                      : "committed",
                  () => "refused",
                );
              }
              return p;
            };
          }
          if (key !== "getExecution") return typeof v === "function" ? v.bind(target) : v;
          return async (id: string) => {
            if (id !== "wp-2-child" || held) return await target.getExecution(id);
            held = true;
            await gate;
            return await target.getExecution(id);
          };
        },
      });
    const a = await startedNode(url, "node-a", { store: hold });
    try {
      await deployAndStart(a, [WAIT_CHILD, WAIT_PARENT], {
        workflow: "WaitParent",
        execution_id: "wp-2",
        input: null,
      });
      await waitFor(() => held, "A to look for the child", 10_000, 10);
      const c = await a.call("POST", "/v1/executions/wp-2/cancel", { reason: "test" });
      assert.equal(c.status, 200, JSON.stringify(c.body));
      await waitFor(async () => (await statusOf(a, "wp-2")) === "cancelled", "parent", 10_000);
      // A goes on: the child's create is refused (the parent's ownership row went with its
      // close), or, should it commit, the child is cancelled. Either way none runs.
      open();
      await waitFor(() => create !== null, "the child's create", 10_000, 10);
      if (await create! === "committed") {
        await waitFor(
          async () => (await statusOf(a, "wp-2-child")) === "cancelled",
          "the child to be cancelled",
          10_000,
        );
      } else {
        const r = await a.call("GET", "/v1/executions/wp-2-child");
        assert.equal(r.status, 404, JSON.stringify(r.body));
      }
    } finally {
      open();
      await a.n.stop();
    }
  },
});

Deno.test({
  ...T,
  name: "shared children: the check after a takeover leaves a child alone while its running " +
    "parent is not in memory yet",
  fn: async () => {
    const url = await migratedDatabase();
    const a = await startedNode(url, "node-a");
    try {
      await deployAndStart(a, [WAIT_CHILD, WAIT_PARENT], {
        workflow: "WaitParent",
        execution_id: "wp-3",
        input: null,
      });
      await waitFor(
        async () => (await history(a, "wp-3")).some((e) => e.type === "ChildStarted"),
        "the child to start",
        10_000,
      );
      const ex = a.n.runtime.executions;
      // A tree taken over or back in parts (#reclaim loads the rest of a tree while its
      // caller loads the parent): the child is held, the parent not yet.
      ex.drop("wp-3");
      const cancels: string[] = [];
      const cancel = ex.cancel.bind(ex);
      ex.cancel = (id, reason) => {
        cancels.push(id);
        return cancel(id, reason);
      };
      let reads = 0;
      const get = ex.store.getExecution.bind(ex.store);
      ex.store.getExecution = async (id) => {
        const row = await get(id);
        if (id === "wp-3") reads++;
        return row;
      };
      a.n.runtime.children.afterRecovery(["wp-3-child"]);
      await waitFor(() => reads > 0 || cancels.length > 0, "a decision about the child", 10_000, 5);
      await new Promise((r) => setTimeout(r, 0)); // the decision after the read
      assert.deepEqual(cancels, []);
      assert.equal(await statusOf(a, "wp-3-child"), "running");
    } finally {
      await a.n.stop();
    }
  },
});

const TWO_SIGNALS = {
  ir: "orbit-ir/2",
  name: "TwoSignals",
  version: "1.0.0",
  signals: { one: {}, two: {} },
  steps: [
    { id: "a", wait_signal: "one" },
    { id: "b", wait_signal: "two" },
    { id: "r", return: "{% [$steps.a, $steps.b] %}" },
  ],
};

Deno.test({
  ...T,
  name: "shared takeover: a node that takes back an execution it still holds from before it " +
    "lost it rebuilds it from history",
  fn: async () => {
    const url = await migratedDatabase();
    const a = await startedNode(url, "node-a");
    const b = await startedNode(url, "node-b");
    const sql = postgresClient(url, { max: 1, applicationName: "orbit-test" });
    try {
      await deployAndStart(a, [TWO_SIGNALS], {
        workflow: "TwoSignals",
        execution_id: "ts-1",
        input: null,
      });
      assert.ok(a.n.runtime.executions.holds("ts-1"));
      // Node B takes the execution over (as after a silence of A's) while A, which has not
      // noticed, keeps it in memory; the history moves on B.
      assert.equal(await takeOverFrom(sql, "node-a", b, ["ts-1"]), 1);
      const one = await b.call("POST", "/v1/executions/ts-1/signals/one", { payload: 1 });
      assert.equal(one.status, 200, JSON.stringify(one.body));
      const last = (await history(b, "ts-1")).at(-1)!.seq;
      // B leaves; A takes its executions back, this one included.
      await b.n.stop();
      await waitFor(async () => (await ownerOf(url, "ts-1")) === "node-a", "A to take it back");
      await waitFor(
        () => a.n.runtime.executions.stateOf("ts-1")?.last_seq === last,
        "A's memory to hold the history B wrote",
        10_000,
      );
      const two = await a.call("POST", "/v1/executions/ts-1/signals/two", { payload: 2 });
      assert.equal(two.status, 200, JSON.stringify(two.body));
      const done = await a.call("GET", "/v1/executions/ts-1/wait?timeout_s=10");
      assert.equal(done.body.status, "completed", JSON.stringify(done.body));
      assert.deepEqual(done.body.output, [1, 2]);
    } finally {
      await sql.end({ timeout: 1 });
      await b.n.stop();
      await a.n.stop();
    }
  },
});
