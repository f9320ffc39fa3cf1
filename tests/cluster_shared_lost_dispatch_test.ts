/**
 * Shared mode: a task whose answer never reached its worker (the response was lost with a
 * server that paused, or a proxy that cut the connection) is redelivered although the worker
 * lives: its heartbeats do not list the attempt, so one session timeout after the claim the
 * owner records StepAttemptUncertain and queues it again, with the same idempotency key.
 */
import assert from "node:assert/strict";
import { api, waitFor } from "./support/server.ts";
import { sharedPostgres } from "./support/pg.ts";
import { startSharedCluster } from "./support/shared_cluster.ts";

const WORKFLOW = {
  ir: "orbit-ir/1",
  name: "One",
  version: "1.0.0",
  steps: [
    { id: "a", task: "t.one", contract: "1", input: "{% $input %}" },
    { id: "done", return: "{% $steps.a %}" },
  ],
};

Deno.test({
  name: "shared: an attempt the live worker never lists in its heartbeats is redelivered",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const db = await (await sharedPostgres()).createDatabase();
    const c = await startSharedCluster({ db, nodes: 2, proxy: false });
    try {
      const [owner, other] = c.nodes as [typeof c.nodes[0], typeof c.nodes[0]];
      const a = api(owner.url);
      const b = api(other.url);
      assert.equal((await a.post("/v1/workflows", WORKFLOW)).status, 201);
      const reg = await b.post("/v1/workers/register", {
        worker_id: "w-lost",
        runtime: "typescript",
        tasks: [{ name: "t.one", contract: "1" }],
        concurrency: 1,
      });
      const session = reg.body.session_id as string;
      assert.equal(
        (await a.post("/v1/executions", {
          workflow: "One",
          execution_id: "lost-1",
          input: 7,
        })).status,
        201,
      );
      // The worker polls through the other server and "loses" the answer: it never runs it.
      const first = await b.post("/v1/workers/poll", { session_id: session, wait_s: 10 });
      assert.equal(first.body.tasks.length, 1, JSON.stringify(first.body));
      const lost = first.body.tasks[0];
      assert.equal(lost.redelivery, false);
      // It stays alive: it heartbeats (listing nothing) and polls again, as a worker does, until
      // a task comes (the server answers a poll after half of --session-timeout at most).
      const again = (async () => {
        const end = Date.now() + 20_000;
        for (;;) {
          const r = await b.post("/v1/workers/poll", { session_id: session, wait_s: 20 });
          if (r.status !== 200 || r.body.tasks.length > 0 || Date.now() > end) return r;
        }
      })();
      const beat = setInterval(() => {
        b.post("/v1/workers/heartbeat", { session_id: session, tokens: [] }).catch(() => {});
      }, 500);
      try {
        const next = await again;
        assert.equal(next.body.tasks.length, 1, JSON.stringify(next.body));
        const task = next.body.tasks[0];
        assert.equal(task.redelivery, true);
        assert.equal(task.idempotency_key, lost.idempotency_key);
        assert.notEqual(task.token, lost.token);
        const done = await b.post("/v1/tasks/complete", { token: task.token, output: 8 });
        assert.equal(done.body.accepted, true);
      } finally {
        clearInterval(beat);
      }
      await waitFor(
        async () => {
          const r = await a.get("/v1/executions/lost-1");
          return r.body.status === "completed";
        },
        "lost-1 to complete",
        30_000,
      );
      const h = await a.get("/v1/executions/lost-1/history");
      const types = h.body.events.map((e: { type: string }) => e.type);
      assert.equal(types.filter((t: string) => t === "StepAttemptUncertain").length, 1);
      assert.equal(types.filter((t: string) => t === "StepSucceeded").length, 1);
      const unc = h.body.events.find((e: { type: string }) => e.type === "StepAttemptUncertain");
      assert.match(unc.reason, /does not list the attempt in its heartbeats/);
    } finally {
      await c.close();
    }
  },
});
