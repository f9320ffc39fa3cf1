/**
 * The Python worker survives the server restarting under it: the server on a fixed port is
 * killed with SIGKILL while a charge runs on the Python worker, and started again on the same
 * database. The worker logs its failed polls and keeps retrying, its result for the charge is
 * delivered to the new server and accepted (one dispatch, one StepSucceeded), it registers
 * again after 404 UNKNOWN_SESSION, and orders started afterwards complete.
 */
import assert from "node:assert/strict";
import { api, type ServerProcess, startServer, tempDir, waitFor } from "./support/server.ts";
import {
  assertCleanOrderHistory,
  fullHistory,
  orderInput,
  runOrders,
  startOrderWorker,
} from "./support/orders.ts";
import { PYTHON_WORKFLOW, startPythonWorker } from "../sdk/python/testing/process.ts";

const registrations = (lines: string[]) =>
  lines.filter((l) =>
    /INFO orbit worker registered worker_id=orders-python runtime=python tasks=5/.test(l)
  );

Deno.test({
  name: "the Python worker survives a server restart under it and re-registers",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const db = `${await tempDir()}/orbit.db`;
    let server: ServerProcess = await startServer({ db });
    const addr = new URL(server.url).host; // the port the workers know, kept across the restart
    const py = startPythonWorker(server.url, { ORDER_CHARGE_DELAY_MS: "1500" });
    const ts = startOrderWorker(server.url);
    try {
      assert.equal((await api(server.url).post("/v1/workflows", PYTHON_WORKFLOW)).status, 201);
      await py.waitForLine(/worker registered worker_id=orders-python/);
      const started = await api(server.url).post("/v1/executions", {
        workflow: "OrderProcessing",
        execution_id: "pr-1",
        input: orderInput("pr-1"),
      });
      assert.equal(started.status, 201);
      await py.waitForLine(/"execution_id":"pr-1","step":"charge"/);

      const killed = await server.kill("SIGKILL");
      assert.equal(killed.signal, "SIGKILL");
      // Nobody listens: the worker's polls fail and are retried with backoff, logged as the
      // reference page shows; the charge's result cannot be delivered yet.
      await py.waitForLine(
        /WARNING orbit poll failed: cannot reach ORBIT runtime at http:\/\/127\.0\.0\.1:\d+: .+; retrying in \d+(\.\d)?s/,
      );
      await py.waitForLine(/WARNING orbit report result failed: cannot reach ORBIT runtime/);

      server = await startServer({ db, addr });
      assert.equal(server.url, `http://${addr}`);
      await waitFor(
        () => registrations(py.lines).length >= 2,
        "the Python worker to register again",
      );
      assert.ok(
        py.lines.some((l) =>
          /the runtime does not know session \S+ \(UNKNOWN_SESSION\); registering again/.test(l)
        ),
        py.lines.join("\n"),
      );
      const done = await api(server.url).get("/v1/executions/pr-1/wait?timeout_s=30");
      assert.equal(done.body.status, "completed", JSON.stringify(done.body));
      const events = await fullHistory(server.url, "pr-1");
      assertCleanOrderHistory("pr-1", events);
      const charge = events.filter((e) => e.step === "charge");
      assert.deepEqual(charge.map((e) => e.type), [
        "StepScheduled",
        "StepDispatched",
        "StepSucceeded",
      ]);
      assert.equal(
        py.traces().filter((e) => e.execution_id === "pr-1" && e.step === "charge").length,
        1,
      );

      const ids = ["after-0", "after-1", "after-2"];
      const statuses = await runOrders(() => server.url, ids, 3);
      for (const id of ids) {
        assert.equal(statuses.get(id), "completed", id);
        assertCleanOrderHistory(id, await fullHistory(server.url, id));
      }
      assert.equal(registrations(py.lines).length, 2, py.lines.join("\n"));
    } finally {
      await py.kill("SIGKILL");
      await ts.kill("SIGKILL");
      await server.kill("SIGKILL");
    }
  },
});
