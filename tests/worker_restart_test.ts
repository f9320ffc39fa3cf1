/**
 * The worker survives the server restarting under it. One SDK worker process (the
 * OrderProcessing example) keeps running while the server on a fixed port is stopped twice,
 * with SIGTERM and then with SIGKILL, and restarted on the same database: each time an order
 * whose charge is running on the worker crosses the restart (its result is reported to the
 * server that is gone, retried through the connection errors, and accepted by the new one),
 * the worker registers again (its session is UNKNOWN_SESSION to the new server), and the
 * orders started after the restart complete. Every history has one StepSucceeded per step.
 */
import assert from "node:assert/strict";
import { api, type ServerProcess, startServer, waitFor } from "./support/server.ts";
import {
  assertCleanOrderHistory,
  fullHistory,
  ORDER_WORKFLOW,
  orderInput,
  runOrders,
  startOrderWorker,
} from "./support/orders.ts";
import { testEachStore } from "./support/stores.ts";

/** The worker's per-attempt trace lines (ORDER_TRACE=1). */
function traces(lines: string[]): Array<{ execution_id: string; step: string }> {
  return lines.filter((l) => l.startsWith("{")).map((l) => JSON.parse(l));
}

const count = (lines: string[], re: RegExp) => lines.filter((l) => re.test(l)).length;

/** What the SDK logs when a poll or heartbeat finds its session unknown (a new server). */
const UNKNOWN_SESSION =
  /the runtime does not know session \S+ \(UNKNOWN_SESSION\); registering again/;

/** The session ids the worker registered, in order. */
const sessions = (lines: string[]) =>
  lines.map((l) => l.match(/worker registered worker_id=\S+ .*session_id=(\S+)/)?.[1])
    .filter((s): s is string => s !== undefined);

async function completeOrders(server: () => string, prefix: string, n: number): Promise<void> {
  const ids = Array.from({ length: n }, (_, i) => `${prefix}-${i}`);
  const statuses = await runOrders(server, ids, n);
  for (const id of ids) assert.equal(statuses.get(id), "completed", id);
  for (const id of ids) assertCleanOrderHistory(id, await fullHistory(server(), id));
}

testEachStore("the worker survives the server restarting under it", async (store) => {
  const db = await store.newDb();
  let server: ServerProcess = await startServer({ db });
  const addr = new URL(server.url).host; // the port the worker knows, kept across restarts
  // A charge takes 1.5 s: long enough to be still running when the server has gone away.
  const worker = startOrderWorker(server.url, {
    ORDER_CHARGE_DELAY_MS: "1500",
    ORDER_CONCURRENCY: "16",
  });
  let workerExit: Deno.CommandStatus | null = null;
  worker.status.then((s) => (workerExit = s));
  try {
    assert.equal((await api(server.url).post("/v1/workflows", ORDER_WORKFLOW)).status, 201);
    await completeOrders(() => server.url, "before", 8);
    assert.equal(sessions(worker.lines).length, 1);

    for (const signal of ["SIGTERM", "SIGKILL"] as const) {
      const id = `inflight-${signal}`;
      const started = await api(server.url).post("/v1/executions", {
        workflow: "OrderProcessing",
        execution_id: id,
        input: orderInput(id),
      });
      assert.equal(started.status, 201, JSON.stringify(started.body));
      await waitFor(
        () => traces(worker.lines).some((e) => e.execution_id === id && e.step === "charge"),
        `the worker to start the charge of ${id}`,
      );
      const failedReports = count(worker.lines, /report result failed: /);
      const registered = sessions(worker.lines).length;
      const unknown = count(worker.lines, UNKNOWN_SESSION);

      const stopped = await server.kill(signal);
      if (signal === "SIGTERM") {
        assert.equal(stopped.code, 0, "a graceful stop");
        assert.ok(server.logs.some((l) => /INFO .*stopped/.test(l)));
      } else {
        assert.equal(stopped.signal, "SIGKILL");
      }
      assert.equal(await api(`http://${addr}`).get("/v1/health").catch(() => null), null);
      // The charge finishes while no server listens: its result is retried, not dropped.
      await waitFor(
        () => count(worker.lines, /report result failed: /) > failedReports,
        "the worker to retry the charge's result",
      );

      server = await startServer({ db, addr });
      assert.equal(server.url, `http://${addr}`);
      await server.waitForLog(
        /recovered active executions from history executions=\d+ in_flight=[1-9]/,
      );

      // The old session is unknown to the new server: the worker registers again.
      await waitFor(
        () => sessions(worker.lines).length > registered,
        `the worker to register again after ${signal}`,
      );
      assert.ok(count(worker.lines, UNKNOWN_SESSION) > unknown, worker.lines.join("\n"));
      const current = sessions(worker.lines).at(-1)!;
      await waitFor(async () => {
        const r = await api(server.url).get("/v1/workers");
        return r.body.workers?.some((w: { session_id: string }) => w.session_id === current);
      }, "the new session in /v1/workers");

      const done = await api(server.url).get(`/v1/executions/${id}/wait?timeout_s=30`);
      assert.equal(done.body.status, "completed", JSON.stringify(done.body));
      const events = await fullHistory(server.url, id);
      assertCleanOrderHistory(id, events);
      // The result the old server never saw was accepted by the new one: the charge was
      // dispatched once and never given up on (no redelivery).
      const charge = events.filter((e) => e.step === "charge");
      assert.equal(charge.filter((e) => e.type === "StepDispatched").length, 1);
      assert.equal(charge.filter((e) => e.type === "StepAttemptUncertain").length, 0);
      assert.equal(traces(worker.lines).filter((e) => e.execution_id === id).length, 6);

      await completeOrders(() => server.url, `after-${signal}`, 8);
      assert.equal(workerExit, null, "the worker process is still running");
    }
    const all = sessions(worker.lines);
    assert.equal(all.length, 3);
    assert.equal(new Set(all).size, 3, `a new session each time: ${all}`);
  } finally {
    await worker.kill("SIGKILL");
    await server.kill("SIGKILL");
  }
});
