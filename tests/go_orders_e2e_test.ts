/**
 * The Go example worker (sdk/go/examples/orders) runs OrderProcessing on its own against a
 * real server: orders complete with clean histories, a declined card fails the order and runs
 * the reservation's compensation, and SIGTERM stops the worker with exit code 0. Skipped,
 * loudly, where Go is not installed; CI installs it.
 */
import assert from "node:assert/strict";
import { api, startServer, tempDir } from "./support/server.ts";
import {
  assertCleanOrderHistory,
  fullHistory,
  ORDER_WORKFLOW,
  orderInput,
  runOrders,
} from "./support/orders.ts";
import { startWorkerProcess } from "./conformance/worker_process.ts";
import { goEnv } from "./conformance/sdks.ts";

const GO_DIR = new URL("../sdk/go", import.meta.url).pathname;

let hasGo = false;
try {
  hasGo = (await new Deno.Command("go", { args: ["version"], stdout: "null", stderr: "null" })
    .output()).success;
} catch { /* not installed */ }
if (!hasGo) console.warn("!!! SKIPPING the Go example worker's test: go is not installed");

Deno.test({
  name:
    "the Go example worker runs OrderProcessing alone, compensates a declined card, stops on SIGTERM",
  ignore: !hasGo,
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const dir = await tempDir();
    const bin = `${dir}/orders-go`;
    const build = await new Deno.Command("go", {
      args: ["build", "-o", bin, "./examples/orders"],
      cwd: GO_DIR,
      env: goEnv(),
      stderr: "piped",
    }).output();
    assert.ok(build.success, new TextDecoder().decode(build.stderr));
    const server = await startServer({ db: `${dir}/orbit.db` });
    const worker = startWorkerProcess("orders-go", [bin], server.url, {
      ORDER_TRACE: "1",
      ORDER_CONCURRENCY: "4",
    });
    try {
      assert.equal((await api(server.url).post("/v1/workflows", ORDER_WORKFLOW)).status, 201);
      await server.waitForLog(/worker registered worker_id=orders-go runtime=go tasks=8/);
      const ids = Array.from({ length: 6 }, (_, i) => `go-${i}`);
      const statuses = await runOrders(() => server.url, ids, 3);
      for (const id of ids) {
        assert.equal(statuses.get(id), "completed", id);
        assertCleanOrderHistory(id, await fullHistory(server.url, id));
      }
      const done = await api(server.url).get("/v1/executions/go-0");
      assert.match(done.body.output.charge_id, /^ch-/);
      assert.equal(done.body.output.tracking, "trk-go-0");

      const declined = await api(server.url).post("/v1/executions", {
        workflow: "OrderProcessing",
        execution_id: "go-declined",
        input: { ...orderInput("go-declined"), customer: "declined" },
      });
      assert.equal(declined.status, 201);
      const failed = await api(server.url).get("/v1/executions/go-declined/wait?timeout_s=30");
      assert.equal(failed.body.status, "failed", JSON.stringify(failed.body));
      assert.equal(failed.body.error.code, "CARD_DECLINED");
      const events = await fullHistory(server.url, "go-declined");
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
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    }
  },
});
