/**
 * The reference page's mixed-worker failover: two servers on one PostgreSQL, a proxy that
 * routes to whichever answers 200 on /v1/ready, the Python and TypeScript example workers, and
 * a 3-second payment in flight on the Python worker when the leader is killed with SIGKILL.
 * The Python worker's polls break and are retried (logged as on the page), its late result is
 * accepted by the new leader (one StepSucceeded for the charge), it registers again. Before
 * the kill, the Python client sent to the standby follows NOT_LEADER to the leader.
 */
import assert from "node:assert/strict";
import { api, type ServerProcess, startServer, waitFor } from "./support/server.ts";
import { sharedPostgres } from "./support/pg.ts";
import { startProxy } from "./support/proxy.ts";
import {
  assertCleanOrderHistory,
  fullHistory,
  orderInput,
  retrying,
  startOrderWorker,
} from "./support/orders.ts";
import { PYTHON_WORKFLOW, runPython, startPythonWorker } from "../sdk/python/testing/process.ts";

Deno.test({
  name: "cluster failover: a Python payment in flight during SIGKILL of the leader succeeds once",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const db = await (await sharedPostgres()).createDatabase();
    const args = (id: string) => ["--cluster", "--node-id", id, "--session-timeout", "10"];
    const one = await startServer({ db, args: args("node-1") });
    await one.waitForLog(/leader is serving node_id=node-1 term=1/);
    const two = await startServer({ db, args: args("node-2") });
    await two.waitForLog(/following the leader term=1 leader="node-1"/);
    const servers: ServerProcess[] = [one, two];
    const proxy = startProxy(() => servers.map((s) => s.url));
    await waitFor(() => proxy.ready().length === 1, "the proxy to find the leader");
    const py = startPythonWorker(proxy.url, { ORDER_CHARGE_DELAY_MS: "3000" });
    const ts = startOrderWorker(proxy.url);
    try {
      const lb = api(proxy.url);
      assert.equal((await lb.post("/v1/workflows", PYTHON_WORKFLOW)).status, 201);

      // The Python client sent to the standby: 503 NOT_LEADER, repeated once at the leader.
      const viaStandby = await runPython(
        `import json, sys
from orbit_sdk import Client
c = Client(sys.argv[1])
ex = c.start("OrderProcessing", json.loads(sys.argv[2]), execution_id="fo-py-client")
print(json.dumps({"status": ex["status"], "workflow": ex["workflow"]}))`,
        [two.url, JSON.stringify(orderInput("fo-py-client"))],
      );
      assert.equal(viaStandby.code, 0, viaStandby.stderr);
      assert.deepEqual(JSON.parse(viaStandby.stdout), {
        status: "running",
        workflow: "OrderProcessing",
      });
      assert.equal(
        (await lb.get("/v1/executions/fo-py-client/wait?timeout_s=30")).body.status,
        "completed",
      );

      assert.equal(
        (await lb.post("/v1/executions", {
          workflow: "OrderProcessing",
          execution_id: "fo-1",
          input: orderInput("fo-1"),
        })).status,
        201,
      );
      await py.waitForLine(/"execution_id":"fo-1","step":"charge"/);
      const killedAt = Date.now();
      await one.kill("SIGKILL");
      await waitFor(
        async () => (await api(two.url).get("/v1/ready")).status === 200,
        "node-2 to serve",
        15_000,
        20,
      );
      const servingMs = Date.now() - killedAt;
      await two.waitForLog(/recovered active executions from history executions=1 in_flight=1/);
      const done = await retrying(() => lb.get("/v1/executions/fo-1/wait?timeout_s=30"));
      assert.equal(done.body.status, "completed", JSON.stringify(done.body));
      const completedMs = Date.now() - killedAt;
      console.log(
        `python failover: new leader serving ${servingMs} ms after SIGKILL; order completed after ${completedMs} ms`,
      );

      const events = await fullHistory(two.url, "fo-1");
      assertCleanOrderHistory("fo-1", events);
      const charge = events.filter((e) => e.step === "charge");
      assert.deepEqual(charge.map((e) => e.type), [
        "StepScheduled",
        "StepDispatched",
        "StepSucceeded",
      ]);
      assert.equal(charge[1].worker_id, "orders-python");
      assert.equal(events.some((e) => e.type === "StepAttemptUncertain"), false);
      assert.equal(
        py.traces().filter((e) => e.execution_id === "fo-1" && e.step === "charge").length,
        1,
      );

      // The page's log lines: the Python worker's broken polls, then its new registration.
      assert.ok(
        py.lines.some((l) =>
          /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} WARNING orbit poll failed: cannot reach ORBIT runtime at http:\/\/127\.0\.0\.1:\d+: .+; retrying in \d+(\.\d)?s$/
            .test(l)
        ),
        py.lines.join("\n"),
      );
      await two.waitForLog(/worker registered worker_id=orders-python runtime=python tasks=5/);
      await two.waitForLog(/worker registered worker_id=orders-typescript runtime=typescript/);
    } finally {
      await py.kill("SIGKILL");
      await ts.kill("SIGKILL");
      await proxy.close();
      await one.kill("SIGKILL");
      await two.kill("SIGKILL");
    }
  },
});
