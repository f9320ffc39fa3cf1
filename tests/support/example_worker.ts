/**
 * What every SDK's example worker is held to (tests/<lang>_orders_e2e_test.ts): against a real
 * server on SQLite in `dir`, the worker program `command` (worker id `orders-<runtime>`)
 * registers its eight tasks and runs six orders alone with clean histories, a declined card fails
 * its order with CARD_DECLINED after the reservation's compensation, every attempt is traced, and
 * SIGTERM stops it with exit code 0. Kills what it starts by PID.
 */
import assert from "node:assert/strict";
import { api, startServer } from "./server.ts";
import {
  assertCleanOrderHistory,
  fullHistory,
  ORDER_WORKFLOW,
  orderInput,
  runOrders,
} from "./orders.ts";
import { startWorkerProcess } from "../conformance/worker_process.ts";

export async function exampleWorkerRunsOrders(
  runtime: string,
  prefix: string,
  command: string[],
  dir: string,
): Promise<void> {
  const server = await startServer({ db: `${dir}/orbit.db` });
  const worker = startWorkerProcess(`orders-${runtime}`, command, server.url, {
    ORDER_TRACE: "1",
    ORDER_CONCURRENCY: "4",
  });
  try {
    assert.equal((await api(server.url).post("/v1/workflows", ORDER_WORKFLOW)).status, 201);
    await server.waitForLog(
      new RegExp(`worker registered worker_id=orders-${runtime} runtime=${runtime} tasks=8`),
    );
    const ids = Array.from({ length: 6 }, (_, i) => `${prefix}-${i}`);
    const statuses = await runOrders(() => server.url, ids, 3);
    for (const id of ids) {
      assert.equal(statuses.get(id), "completed", id);
      assertCleanOrderHistory(id, await fullHistory(server.url, id));
    }
    const done = await api(server.url).get(`/v1/executions/${prefix}-0`);
    assert.match(done.body.output.charge_id, /^ch-/);
    assert.equal(done.body.output.tracking, `trk-${prefix}-0`);

    const declined = await api(server.url).post("/v1/executions", {
      workflow: "OrderProcessing",
      execution_id: `${prefix}-declined`,
      input: { ...orderInput(`${prefix}-declined`), customer: "declined" },
    });
    assert.equal(declined.status, 201);
    const failed = await api(server.url).get(`/v1/executions/${prefix}-declined/wait?timeout_s=30`);
    assert.equal(failed.body.status, "failed", JSON.stringify(failed.body));
    assert.equal(failed.body.error.code, "CARD_DECLINED");
    const events = await fullHistory(server.url, `${prefix}-declined`);
    assert.ok(
      events.some((e) => e.type === "StepSucceeded" && e.step === "reserve.compensate"),
      events.map((e) => `${e.type} ${e.step ?? ""}`).join("\n"),
    );
    const traced = worker.events.filter((e) => e.event === "executing");
    assert.ok(traced.length >= 6 * 6, `${traced.length} traced attempts`);

    const status = await worker.kill("SIGTERM");
    assert.equal(status.code, 0, worker.tail());
  } finally {
    await worker.kill("SIGKILL");
    await server.kill("SIGKILL");
  }
}
