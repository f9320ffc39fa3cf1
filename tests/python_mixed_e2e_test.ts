/**
 * One workflow, two languages: the OrderProcessing variant whose charge is pinned to
 * `language: python`, run by the TypeScript example worker and the Python one
 * (`orders-python`, five tasks) on one server. Every charge runs on the Python worker, the
 * steps only TypeScript serves run there, every history is clean; a declined card fails the
 * order after the Python worker's TaskError and the compensation runs.
 */
import assert from "node:assert/strict";
import { api, startServer, tempDir, waitFor } from "./support/server.ts";
import {
  assertCleanOrderHistory,
  fullHistory,
  runOrders,
  startOrderWorker,
} from "./support/orders.ts";
import { PYTHON_WORKFLOW, startPythonWorker } from "../sdk/python/testing/process.ts";

Deno.test({
  name: "mixed workers: TypeScript and Python share OrderProcessing, the charge runs on Python",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const server = await startServer({ db: `${await tempDir()}/orbit.db` });
    const py = startPythonWorker(server.url);
    const ts = startOrderWorker(server.url);
    try {
      const c = api(server.url);
      assert.equal((await c.post("/v1/workflows", PYTHON_WORKFLOW)).status, 201);
      await server.waitForLog(/worker registered worker_id=orders-python runtime=python tasks=5/);
      await server.waitForLog(/worker registered worker_id=orders-typescript runtime=typescript/);

      const ids = Array.from({ length: 8 }, (_, i) => `mix-${i}`);
      const statuses = await runOrders(() => server.url, ids, 4);
      for (const id of ids) assert.equal(statuses.get(id), "completed", id);
      for (const id of ids) {
        const events = await fullHistory(server.url, id);
        assertCleanOrderHistory(id, events);
        const by = (step: string) =>
          events.find((e) => e.type === "StepDispatched" && e.step === step)?.worker_id;
        assert.equal(by("charge"), "orders-python", `${id}: the pinned charge`);
        for (const step of ["reserve", "loyalty"]) assert.equal(by(step), "orders-typescript");
        const done = (await c.get(`/v1/executions/${id}`)).body;
        assert.match(done.output.charge_id, new RegExp(`^ch-.+:charge$`));
      }
      // The Python worker logged each attempt as the reference page shows it.
      assert.ok(
        py.lines.some((l) =>
          /INFO orbit executing \{"execution_id": "mix-\d", "step": "charge", "attempt": 1, "task": "payments.charge", "redelivery": false\}/
            .test(l)
        ),
        py.lines.join("\n"),
      );

      // A declined card: the Python task raises TaskError CARD_DECLINED (not retryable), the
      // saga releases the reservation on the TypeScript worker.
      const declined = await c.post("/v1/executions", {
        workflow: "OrderProcessing",
        execution_id: "mix-declined",
        input: {
          order_id: "mix-declined",
          customer: "declined",
          items: [{ sku: "a", qty: 1, price: 5 }],
        },
      });
      assert.equal(declined.status, 201);
      const failed = (await c.get("/v1/executions/mix-declined/wait?timeout_s=30")).body;
      assert.equal(failed.status, "failed", JSON.stringify(failed));
      const events = await fullHistory(server.url, "mix-declined");
      const chargeFailed = events.filter((e) => e.type === "StepFailed" && e.step === "charge");
      assert.equal(chargeFailed.length, 1, JSON.stringify(events));
      assert.equal(chargeFailed[0].error.code, "CARD_DECLINED");
      assert.deepEqual(chargeFailed[0].error, {
        code: "CARD_DECLINED",
        message: "the card was declined",
        retryable: false,
        details: {},
      });
      const release = events.filter((e) => e.step === "reserve.compensate");
      assert.deepEqual(release.map((e) => e.type), [
        "StepScheduled",
        "StepDispatched",
        "StepSucceeded",
      ]);
      assert.equal(release[1].worker_id, "orders-typescript");
      assert.equal(events.at(-1).type, "WorkflowFailed");

      // Both workers are listed with their runtimes.
      const workers = (await c.get("/v1/workers")).body.workers;
      const runtimes = new Set(workers.map((w: { runtime: string }) => w.runtime));
      assert.deepEqual([...runtimes].sort(), ["python", "typescript"]);

      // SIGTERM: the Python worker stops gracefully and unregisters (exit 0).
      const stopped = await py.kill("SIGTERM");
      assert.equal(stopped.code, 0, py.lines.join("\n"));
      assert.ok(py.lines.some((l) => /INFO orbit worker stopped worker_id=orders-python/.test(l)));
      await waitFor(
        async () => {
          const w = (await c.get("/v1/workers")).body.workers;
          return !w.some((x: { worker_id: string }) => x.worker_id === "orders-python");
        },
        "the Python session to be gone after unregister",
        10_000,
      );
    } finally {
      await py.kill("SIGKILL");
      await ts.kill("SIGKILL");
      await server.kill("SIGKILL");
    }
  },
});
