/**
 * The Python worker killed with SIGKILL in the middle of the charge: one --session-timeout
 * after its last contact the attempt becomes StepAttemptUncertain, and a new Python worker
 * gets it again with the same idempotency key and `redelivery: true` (the charge is pinned to
 * Python, so no TypeScript worker may take it). The charge succeeds once.
 */
import assert from "node:assert/strict";
import { api, startServer, tempDir } from "./support/server.ts";
import {
  assertCleanOrderHistory,
  fullHistory,
  orderInput,
  startOrderWorker,
} from "./support/orders.ts";
import { PYTHON_WORKFLOW, startPythonWorker } from "../sdk/python/testing/process.ts";

Deno.test({
  name: "a SIGKILLed Python worker's charge is redelivered with the same idempotency key",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const server = await startServer({
      db: `${await tempDir()}/orbit.db`,
      args: ["--session-timeout", "2"],
    });
    // Short long polls: a poll in progress counts as contact, and the server does not always
    // hear at once that a SIGKILLed worker's open poll lost its connection (then the session
    // lives until that poll's wait ends, up to 30 s with the default wait).
    const slow = startPythonWorker(server.url, {
      ORDER_CHARGE_DELAY_MS: "600000",
      ORDER_WORKER_ID: "py-slow",
      ORDER_POLL_WAIT_S: "1",
    });
    const ts = startOrderWorker(server.url);
    let fresh: ReturnType<typeof startPythonWorker> | null = null;
    try {
      const c = api(server.url);
      assert.equal((await c.post("/v1/workflows", PYTHON_WORKFLOW)).status, 201);
      const started = await c.post("/v1/executions", {
        workflow: "OrderProcessing",
        execution_id: "pk-1",
        input: orderInput("pk-1"),
      });
      assert.equal(started.status, 201);
      await slow.waitForLine(/"step":"charge"/);
      const first = slow.traces().find((e) => e.step === "charge")!;
      assert.equal(first.redelivery, false);
      const killed = await slow.kill("SIGKILL");
      assert.equal(killed.signal, "SIGKILL");
      const killedAt = Date.now();

      fresh = startPythonWorker(server.url, { ORDER_WORKER_ID: "py-fresh" });
      const done = await c.get("/v1/executions/pk-1/wait?timeout_s=30");
      assert.equal(
        done.body.status,
        "completed",
        `${JSON.stringify(done.body)}\n${server.logs.join("\n")}\n${fresh.lines.join("\n")}\n${
          JSON.stringify((await fullHistory(server.url, "pk-1")).map((e) => [e.type, e.step]))
        }`,
      );
      assert.ok(Date.now() - killedAt >= 1500, "redelivered only after the session timeout");

      const events = await fullHistory(server.url, "pk-1");
      assertCleanOrderHistory("pk-1", events);
      const charge = events.filter((e) => e.step === "charge");
      const uncertain = charge.filter((e) => e.type === "StepAttemptUncertain");
      assert.equal(uncertain.length, 1);
      assert.match(uncertain[0].reason, /worker `py-slow` stopped responding/);
      const dispatches = charge.filter((e) => e.type === "StepDispatched");
      assert.deepEqual(dispatches.map((e) => [e.worker_id, e.redelivery ?? false]), [
        ["py-slow", false],
        ["py-fresh", true],
      ]);

      const again = fresh.traces().find((e) => e.step === "charge")!;
      assert.equal(again.redelivery, true);
      assert.equal(again.attempt, 1);
      assert.equal(again.idempotency_key, first.idempotency_key);
      // The charge id is derived from the idempotency key: the same on both attempts.
      assert.equal(done.body.output.charge_id, `ch-${first.idempotency_key}`);
      assert.ok(
        fresh.lines.some((l) =>
          /INFO orbit executing \{"execution_id": "pk-1", "step": "charge", "attempt": 1, "task": "payments.charge", "redelivery": true\}/
            .test(l)
        ),
        fresh.lines.join("\n"),
      );
    } finally {
      await slow.kill("SIGKILL");
      await fresh?.kill("SIGKILL");
      await ts.kill("SIGKILL");
      await server.kill("SIGKILL");
    }
  },
});
