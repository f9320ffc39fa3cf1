/**
 * The README's walk as a test: a server on SQLite, the OrderProcessing workflow deployed with
 * `orbit deploy`, the example worker as a separate process, orders started with
 * `orbit start … --wait`, and their histories read back with `orbit executions history
 * --json`. Exit codes and outputs are asserted, including a declined card (exit 1, the saga
 * releases the reservation).
 */
import assert from "node:assert/strict";
import { MAIN, type ServerProcess, startServer, tempDir, waitFor } from "./support/server.ts";
import {
  assertCleanOrderHistory,
  fullHistory,
  ORDER_STEPS,
  orderInput,
  startOrderWorker,
  type WorkerProcess,
} from "./support/orders.ts";
import { described, type Run, runDeno } from "./support/run.ts";

const ROOT = new URL("../", import.meta.url).pathname;

/** `orbit …` from the repository root, as the README runs it. */
function orbit(args: string[]): Promise<Run> {
  return runDeno(["run", "-A", MAIN, ...args], { cwd: ROOT });
}

function expectCode(r: Run, code: number): void {
  assert.equal(r.code, code, `expected exit code ${code}; ${described(r)}`);
}

// deno-lint-ignore no-explicit-any
async function cliHistory(id: string, s: string[]): Promise<any[]> {
  const r = await orbit(["executions", "history", id, "--json", ...s]);
  expectCode(r, 0);
  const h = JSON.parse(r.stdout);
  assert.equal(h.execution_id, id);
  return h.events;
}

Deno.test({
  name: "the example worker completes orders started through the CLI (SQLite)",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async (t) => {
    const dir = await tempDir();
    let server: ServerProcess | undefined;
    let worker: WorkerProcess | undefined;
    try {
      server = await startServer({ db: `${dir}/orbit.db` });
      const s = ["--server", server.url];

      await t.step("orbit deploy examples/order-processing/workflow.json", async () => {
        let r = await orbit(["deploy", "examples/order-processing/workflow.json", ...s]);
        expectCode(r, 0);
        assert.equal(
          r.stdout,
          "deployed OrderProcessing 1.0.0 (orbit-ir/1) from examples/order-processing/workflow.json\n",
        );
        r = await orbit(["deploy", "examples/order-processing/workflow.json", ...s]);
        expectCode(r, 0);
        assert.match(r.stdout, /^unchanged OrderProcessing 1\.0\.0 .*already deployed/);
      });

      await t.step("the worker process registers; orbit workers lists it", async () => {
        worker = startOrderWorker(server!.url);
        await waitFor(async () => {
          const r = await orbit(["workers", "--json", ...s]);
          expectCode(r, 0);
          return JSON.parse(r.stdout).workers.some((w: { worker_id: string; tasks: unknown[] }) =>
            w.worker_id === "orders-typescript"
          );
        }, "the order worker in `orbit workers`");
      });

      const ids = Array.from({ length: 4 }, (_, i) => `cli-order-${i}`);
      await t.step(
        "orbit start --wait --json: four orders at once, exit 0, completed",
        async () => {
          const runs = await Promise.all(ids.map((id) =>
            orbit([
              "start",
              "OrderProcessing",
              "--input",
              JSON.stringify(orderInput(id)),
              "--id",
              id,
              "--wait",
              "--json",
              ...s,
            ])
          ));
          runs.forEach((r, i) => {
            expectCode(r, 0);
            const x = JSON.parse(r.stdout);
            assert.equal(x.execution_id, ids[i]);
            assert.equal(x.workflow, "OrderProcessing");
            assert.equal(x.version, "1.0.0");
            assert.equal(x.status, "completed");
            assert.equal(x.output.order_id, ids[i]);
            assert.equal(x.output.tracking, `trk-${ids[i]}`);
            assert.match(x.output.charge_id, /^ch-/);
            assert.equal(x.output.points, 19); // 2 × 9.50, floored
          });
        },
      );

      await t.step("orbit start --wait (a table) and orbit executions show", async () => {
        const id = "cli-order-table";
        let r = await orbit([
          "start",
          "OrderProcessing",
          "--input",
          JSON.stringify(orderInput(id)),
          "--id",
          id,
          "--wait",
          ...s,
        ]);
        expectCode(r, 0);
        assert.match(r.stdout, /^started execution cli-order-table of OrderProcessing 1\.0\.0$/m);
        assert.match(r.stdout, /^status +completed$/m);
        assert.match(r.stdout, /^output +\{"order_id":"cli-order-table",/m);
        r = await orbit(["executions", "show", id, ...s]);
        expectCode(r, 0);
        assert.match(r.stdout, /^status +completed$/m);
        ids.push(id);
      });

      await t.step("orbit executions history --json: one clean history per order", async () => {
        const histories = await Promise.all(ids.map((id) => cliHistory(id, s)));
        for (const [i, id] of ids.entries()) {
          const events = histories[i]!;
          assertCleanOrderHistory(id, events);
          // The CLI joins every page: the same events the API serves.
          assert.deepEqual(events, await fullHistory(server!.url, id));
          const dispatched = events.filter((e) => e.type === "StepDispatched");
          assert.deepEqual(dispatched.map((e) => e.step), ORDER_STEPS);
          assert.ok(dispatched.every((e) => e.worker_id === "orders-typescript"));
        }
        const r = await orbit(["executions", "history", ids[0]!, ...s]);
        expectCode(r, 0);
        for (const step of ORDER_STEPS) {
          assert.match(r.stdout, new RegExp(`StepSucceeded +${step} +1\\b`), r.stdout);
        }
        assert.match(r.stdout.trim().split("\n").at(-1)!, /WorkflowCompleted/);
      });

      await t.step("a declined card: exit 1, the reservation released", async () => {
        const id = "cli-order-declined";
        const r = await orbit([
          "start",
          "OrderProcessing",
          "--input",
          JSON.stringify({ ...orderInput(id), customer: "declined" }),
          "--id",
          id,
          "--wait",
          "--json",
          ...s,
        ]);
        expectCode(r, 1);
        assert.equal(JSON.parse(r.stdout).status, "failed");
        assert.match(r.stderr, /^error: EXECUTION_FAILED: execution cli-order-declined failed: /m);
        assert.match(r.stderr, /CARD_DECLINED/);
        const events = await cliHistory(id, s);
        const succeeded = events.filter((e) => e.type === "StepSucceeded").map((e) => e.step);
        // The charge failed for good (non-retryable): nothing after it ran, and only the
        // reservation had a compensation to run (the charge never succeeded).
        assert.deepEqual(succeeded, ["validate", "reserve", "reserve.compensate"]);
        const failed = events.filter((e) => e.type === "StepFailed");
        assert.deepEqual(failed.map((e) => [e.step, e.attempt]), [["charge", 1]]);
        assert.ok(events.some((e) => e.type === "CompensationStarted"), "the saga ran");
        assert.ok(
          worker!.lines.some((l) => l.includes('"task":"inventory.release"') && l.includes(id)),
          "the worker released the reservation",
        );
        assert.equal(events.at(-1).type, "WorkflowFailed");
      });

      await t.step("orbit executions list --status completed --json", async () => {
        const r = await orbit(["executions", "list", "--status", "completed", "--json", ...s]);
        expectCode(r, 0);
        const listed = JSON.parse(r.stdout).executions.map((x: { execution_id: string }) =>
          x.execution_id
        );
        assert.deepEqual(listed.sort(), [...ids].sort());
      });
    } finally {
      await worker?.kill("SIGKILL");
      await server?.kill("SIGKILL");
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    }
  },
});
