/**
 * The reference page's shared-mode setup with both example workers: three shared servers
 * behind the round-robin proxy, the Python worker (`orders-python`, the charge pinned to
 * Python) and the TypeScript one. A node is killed while Python charges are in flight: every
 * order completes with one StepSucceeded per step, the charges all on the Python worker.
 */
import assert from "node:assert/strict";
import { sharedPostgres } from "./support/pg.ts";
import { assertCleanOrderHistory, fullHistory, runOrders } from "./support/orders.ts";
import { startSharedCluster, tail } from "./support/shared_cluster.ts";
import { PYTHON_WORKFLOW, startPythonWorker } from "../sdk/python/testing/process.ts";
import { waitFor } from "./support/server.ts";

Deno.test({
  name: "shared: Python and TypeScript workers through the proxy, a node killed mid-run",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const db = await (await sharedPostgres()).createDatabase();
    const c = await startSharedCluster({ db, nodes: 3 });
    const py = startPythonWorker(c.proxy.url, { ORDER_CHARGE_DELAY_MS: "1000" });
    try {
      c.startWorker();
      assert.equal((await c.lb.post("/v1/workflows", PYTHON_WORKFLOW)).status, 201);
      await py.waitForLine(/worker registered|registered/, 30_000);
      const ids = Array.from({ length: 12 }, (_, i) => `pysh-${i}`);
      const victim = c.nodes[1]!;
      let killed = false;
      const run = runOrders(() => c.proxy.url, ids, 6);
      // Once charges are running on the Python worker, kill one server.
      await waitFor(
        // The worker's log line for each attempt (its trace lines can interleave between
        // threads, so they are not parsed here).
        () => py.lines.some((l) => /executing .*"task": "payments\.charge"/.test(l)),
        "a charge on the Python worker",
        60_000,
      );
      await victim.kill();
      killed = true;
      const statuses = await run;
      for (const id of ids) assert.equal(statuses.get(id), "completed", id);
      for (const id of ids) {
        const events = await fullHistory(c.nodes[0]!.url, id);
        assertCleanOrderHistory(id, events);
        const chargers = events.filter((e) => e.type === "StepDispatched" && e.step === "charge")
          .map((e) => e.worker_id);
        assert.ok(chargers.length >= 1 && chargers.every((w) => w === "orders-python"), id);
      }
      assert.ok(killed);
    } catch (e) {
      console.error(c.nodes.map((n) => tail(n, 40)).join("\n"), py.lines.slice(-40).join("\n"));
      throw e;
    } finally {
      await py.kill("SIGKILL");
      await c.close();
    }
  },
});
