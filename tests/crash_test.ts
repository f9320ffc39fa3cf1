/**
 * Crash safety: the server is killed with SIGKILL in the middle of 200 orders and restarted on
 * the same database and port. Every order completes, with exactly one StepSucceeded per step.
 */
import assert from "node:assert/strict";
import { api, startServer, waitFor } from "./support/server.ts";
import {
  assertCleanOrderHistory,
  fullHistory,
  ORDER_WORKFLOW,
  runOrders,
  startOrderWorker,
} from "./support/orders.ts";
import { testEachStore } from "./support/stores.ts";

testEachStore("orders survive a SIGKILL of the server mid-run", async (store) => {
  const db = await store.newDb();
  const args = ["--session-timeout", "2"];
  let server = await startServer({ db, args });
  const addr = new URL(server.url).host;
  const worker = startOrderWorker(server.url, { ORDER_CHARGE_DELAY_MS: "20" });
  try {
    assert.equal((await api(server.url).post("/v1/workflows", ORDER_WORKFLOW)).status, 201);
    const ids = Array.from({ length: 200 }, (_, i) => `crash-${i}`);
    let done = 0;
    const run = runOrders(() => server.url, ids, 16, () => done++);
    await waitFor(() => done >= 40, "40 orders to complete before the crash", 60_000).catch((e) => {
      console.error(
        `server:\n${server.logs.slice(-40).join("\n")}\nworker:\n${
          worker.lines.slice(-40).join("\n")
        }`,
      );
      throw e;
    });
    const killed = await server.kill("SIGKILL");
    assert.equal(killed.signal, "SIGKILL");
    const running = await api(`http://${addr}`).get("/v1/health").catch(() => null);
    assert.equal(running, null, "the old server still answers");
    server = await startServer({ db, args, addr });
    const recovered = await server.waitForLog(
      /recovered active executions from history executions=\d+/,
    );
    assert.match(
      recovered,
      /executions=[1-9]\d* in_flight=\d+/,
      "some orders were in flight at the kill",
    );
    const statuses = await run;
    assert.equal(statuses.size, 200);
    for (const [id, status] of statuses) assert.equal(status, "completed", id);
    for (const id of ids) assertCleanOrderHistory(id, await fullHistory(server.url, id));
  } finally {
    await worker.kill("SIGKILL");
    await server.kill("SIGKILL");
  }
});
