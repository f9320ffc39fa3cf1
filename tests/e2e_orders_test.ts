/**
 * End to end with real processes: a server, the OrderProcessing example worker (SDK), 200
 * orders from 16 concurrent clients; every history has seq 1..n and one StepSucceeded per step.
 */
import assert from "node:assert/strict";
import { api, startServer } from "./support/server.ts";
import {
  assertCleanOrderHistory,
  fullHistory,
  ORDER_WORKFLOW,
  runOrders,
  startOrderWorker,
} from "./support/orders.ts";
import { testEachStore } from "./support/stores.ts";

testEachStore("a worker process completes 200 orders of the six-task workflow", async (store) => {
  const server = await startServer({ db: await store.newDb() });
  const worker = startOrderWorker(server.url);
  try {
    const deploy = await api(server.url).post("/v1/workflows", ORDER_WORKFLOW);
    assert.equal(deploy.status, 201, JSON.stringify(deploy.body));
    const ids = Array.from({ length: 200 }, (_, i) => `order-${i}`);
    const statuses = await runOrders(() => server.url, ids, 16);
    assert.equal(statuses.size, 200);
    for (const [id, status] of statuses) assert.equal(status, "completed", id);
    for (const id of ids) assertCleanOrderHistory(id, await fullHistory(server.url, id));
    const list = await api(server.url).get("/v1/executions?status=completed&limit=1000");
    assert.equal(list.body.executions.length, 200);
    const metrics = await api(server.url).get("/v1/metrics");
    assert.match(metrics.body, /orbit_tasks_succeeded_total 1200/);
  } finally {
    await worker.kill("SIGKILL");
    await server.kill("SIGKILL");
  }
});
