/**
 * A worker killed in the middle of a task: one --session-timeout after its last contact the
 * attempt becomes StepAttemptUncertain and another worker gets it again, with the same
 * idempotency key and `redelivery: true`; the step succeeds once.
 */
import assert from "node:assert/strict";
import { api, startServer, waitFor } from "./support/server.ts";
import {
  assertCleanOrderHistory,
  fullHistory,
  ORDER_WORKFLOW,
  orderInput,
  startOrderWorker,
} from "./support/orders.ts";
import { testEachStore } from "./support/stores.ts";

testEachStore(
  "a killed worker's attempt is redelivered after the session timeout",
  async (store) => {
    const server = await startServer({ db: await store.newDb(), args: ["--session-timeout", "2"] });
    const slow = startOrderWorker(server.url, {
      ORDER_CHARGE_DELAY_MS: "600000",
      ORDER_WORKER_ID: "slow",
    });
    let fresh: ReturnType<typeof startOrderWorker> | null = null;
    try {
      const c = api(server.url);
      assert.equal((await c.post("/v1/workflows", ORDER_WORKFLOW)).status, 201);
      assert.equal(
        (await c.post("/v1/executions", {
          workflow: "OrderProcessing",
          execution_id: "wk-1",
          input: orderInput("wk-1"),
        }))
          .status,
        201,
      );
      const firstCharge = await waitFor(
        () =>
          slow.lines.map((l) => l.startsWith("{") ? JSON.parse(l) : null).find((e) =>
            e?.step === "charge"
          ),
        "the slow worker to start the charge",
      );
      await slow.kill("SIGKILL");
      const killedAt = Date.now();
      fresh = startOrderWorker(server.url, { ORDER_WORKER_ID: "fresh" });
      const done = await c.get("/v1/executions/wk-1/wait?timeout_s=30");
      assert.equal(done.body.status, "completed");
      assert.ok(Date.now() - killedAt >= 1500, "redelivered only after the session timeout");

      const events = await fullHistory(server.url, "wk-1");
      assertCleanOrderHistory("wk-1", events);
      const charge = events.filter((e) => e.step === "charge");
      const uncertain = charge.find((e) => e.type === "StepAttemptUncertain");
      assert.ok(uncertain, "StepAttemptUncertain recorded for the charge");
      assert.equal(uncertain.attempt, 1);
      assert.match(uncertain.reason, /worker `slow` stopped responding/);
      const dispatches = charge.filter((e) => e.type === "StepDispatched");
      assert.equal(dispatches.length, 2);
      assert.equal(dispatches[1].redelivery, true);
      assert.equal(dispatches[1].worker_id, "fresh");
      assert.ok(uncertain.seq > dispatches[0].seq && uncertain.seq < dispatches[1].seq);

      const redelivered = fresh.lines.map((l) => l.startsWith("{") ? JSON.parse(l) : null)
        .find((e) => e?.step === "charge");
      assert.equal(redelivered.redelivery, true);
      assert.equal(redelivered.attempt, 1);
      assert.equal(redelivered.idempotency_key, firstCharge.idempotency_key);
      assert.ok(
        server.logs.some((l) =>
          /WARN .*attempt outcome uncertain; redelivering execution_id=wk-1 step=charge attempt=1/
            .test(l)
        ),
      );
    } finally {
      await slow.kill("SIGKILL");
      await fresh?.kill("SIGKILL");
      await server.kill("SIGKILL");
    }
  },
);
