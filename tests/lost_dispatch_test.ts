/**
 * A task whose answer never reached its worker (the connection was cut after the server wrote
 * it) is redelivered on one server too: the worker is alive and heartbeats, but its heartbeats
 * never list the attempt, so after a session timeout the attempt is uncertain and handed out
 * again with the same idempotency key and `redelivery: true`. Found by the chaos suite
 * (single server on SQLite, the worker link black-holed while a poll answered): without this,
 * the step stayed dispatched to a live worker that never had it, and the execution never ended.
 */
import assert from "node:assert/strict";
import { api, startServer, tempDir, waitFor } from "./support/server.ts";
import { registerWorker } from "./support/workers.ts";

Deno.test({
  name: "an attempt its live worker never lists in its heartbeats is redelivered",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const server = await startServer({
      db: `${await tempDir()}/orbit.db`,
      args: ["--session-timeout", "1"],
    });
    try {
      const c = api(server.url);
      assert.equal(
        (await c.post("/v1/workflows", {
          ir: "orbit-ir/1",
          name: "Lost",
          version: "1.0.0",
          steps: [{ id: "work", task: "lost.work", contract: "1", input: {} }],
        })).status,
        201,
      );
      const session = await registerWorker(c, {
        worker_id: "w",
        runtime: "typescript",
        tasks: [{ name: "lost.work", contract: "1" }],
        concurrency: 2,
      });
      assert.equal(
        (await c.post("/v1/executions", { workflow: "Lost", execution_id: "l-1" }))
          .status,
        201,
      );
      const first = await c.post("/v1/workers/poll", { session_id: session, wait_s: 10 });
      assert.equal(first.body.tasks.length, 1);
      const lost = first.body.tasks[0];
      assert.equal(lost.redelivery, false);
      // The worker never got that answer: it keeps heartbeating without the token.
      const again = await waitFor(
        async () => {
          await c.post("/v1/workers/heartbeat", { session_id: session, tokens: [] });
          const r = await c.post("/v1/workers/poll", { session_id: session, wait_s: 0.2 });
          return r.body.tasks?.[0];
        },
        "the lost attempt to be handed out again",
        30_000,
        200,
      );
      assert.notEqual(again.token, lost.token);
      assert.equal(again.redelivery, true);
      assert.equal(again.idempotency_key, lost.idempotency_key);
      const events = (await c.get("/v1/executions/l-1/history")).body.events;
      const uncertain = events.find((e: { type: string }) => e.type === "StepAttemptUncertain");
      assert.equal(uncertain.token, lost.token);
      assert.match(uncertain.reason, /does not list the attempt in its heartbeats/);
      assert.equal(
        (await c.post("/v1/tasks/complete", { token: again.token, output: 1 })).body.accepted,
        true,
      );
      assert.equal((await c.get("/v1/executions/l-1/wait?timeout_s=10")).body.status, "completed");
    } finally {
      await server.kill("SIGKILL");
    }
  },
});
