/**
 * The reference page's failover timeline, end to end: two servers on one PostgreSQL, a proxy
 * that routes to whichever answers 200 on /v1/ready and closes connections to the old leader,
 * the TypeScript example worker, and a payment that takes 3 s in flight when the leader is
 * killed with SIGKILL. The late result is accepted by the new leader: one StepSucceeded.
 */
import assert from "node:assert/strict";
import { api, type ServerProcess, startServer, waitFor } from "./support/server.ts";
import { sharedPostgres } from "./support/pg.ts";
import { startProxy } from "./support/proxy.ts";
import {
  assertCleanOrderHistory,
  fullHistory,
  ORDER_WORKFLOW,
  orderInput,
  retrying,
  startOrderWorker,
} from "./support/orders.ts";

Deno.test({
  name: "cluster failover: a payment in flight during SIGKILL of the leader succeeds once",
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
    const worker = startOrderWorker(proxy.url, { ORDER_CHARGE_DELAY_MS: "3000" });
    try {
      await waitFor(() => proxy.ready().length === 1, "the proxy to find the leader");
      const lb = api(proxy.url);
      assert.equal((await lb.post("/v1/workflows", ORDER_WORKFLOW)).status, 201);
      assert.equal(
        (await lb.post("/v1/executions", {
          workflow: "OrderProcessing",
          execution_id: "fo-1",
          input: orderInput("fo-1"),
        })).status,
        201,
      );
      await waitFor(
        () =>
          worker.lines.some((l) =>
            l.includes('"step":"charge"') && l.includes('"event":"executing"')
          ),
        "the charge to be in flight on the worker",
      );
      const killedAt = Date.now();
      await one.kill("SIGKILL");
      await waitFor(
        async () => (await api(two.url).get("/v1/ready")).status === 200,
        "node-2 to serve",
        30_000,
        20,
      );
      const servingMs = Date.now() - killedAt;
      await two.waitForLog(/recovered active executions from history executions=1 in_flight=1/);
      const done = await retrying(() => lb.get("/v1/executions/fo-1/wait?timeout_s=30"));
      assert.equal(done.body.status, "completed", JSON.stringify(done.body));
      const completedMs = Date.now() - killedAt;
      console.log(
        `failover: new leader serving ${servingMs} ms after SIGKILL; order completed after ${completedMs} ms`,
      );

      const events = await fullHistory(two.url, "fo-1");
      assertCleanOrderHistory("fo-1", events);
      const charge = events.filter((e) => e.step === "charge");
      assert.deepEqual(charge.map((e) => e.type), [
        "StepScheduled",
        "StepDispatched",
        "StepSucceeded",
      ]);
      assert.equal(events.some((e) => e.type === "StepAttemptUncertain"), false);
      // The worker registered again with the new leader (404 UNKNOWN_SESSION, then register).
      await two.waitForLog(
        /worker registered worker_id=orders-typescript runtime=typescript tasks=8/,
      );
    } finally {
      await worker.kill("SIGKILL");
      await proxy.close();
      await one.kill("SIGKILL");
      await two.kill("SIGKILL");
    }
  },
});
