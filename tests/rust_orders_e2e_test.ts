/**
 * The Rust example worker (sdk/rust/examples/orders.rs) runs OrderProcessing on its own against
 * a real server: orders complete with clean histories, a declined card fails the order and runs
 * the reservation's compensation, and SIGTERM stops the worker with exit code 0. Skipped,
 * loudly, where cargo or Debian's serde crates are not installed; CI installs them.
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
import { cargoCommand, rustMissing } from "./conformance/sdks.ts";

const RUST_DIR = new URL("../sdk/rust", import.meta.url).pathname;

const missing = await rustMissing();
if (missing) console.warn(`!!! SKIPPING the Rust example worker's test: ${missing}`);

Deno.test({
  name:
    "the Rust example worker runs OrderProcessing alone, compensates a declined card, stops on SIGTERM",
  ignore: missing !== null,
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const dir = await tempDir();
    const { cargo, env } = (await cargoCommand())!;
    const build = await new Deno.Command(cargo, {
      args: ["build", "--offline", "--quiet", "--example", "orders"],
      cwd: RUST_DIR,
      env,
      stderr: "piped",
    }).output();
    assert.ok(build.success, new TextDecoder().decode(build.stderr));
    // A copy: a build running meanwhile (the unit tests') may replace the target dir's file.
    const bin = `${dir}/orders-rust`;
    await Deno.copyFile(`${env.CARGO_TARGET_DIR}/debug/examples/orders`, bin);
    await Deno.chmod(bin, 0o755);
    const server = await startServer({ db: `${dir}/orbit.db` });
    const worker = startWorkerProcess("orders-rust", [bin], server.url, {
      ORDER_TRACE: "1",
      ORDER_CONCURRENCY: "4",
    });
    try {
      assert.equal((await api(server.url).post("/v1/workflows", ORDER_WORKFLOW)).status, 201);
      await server.waitForLog(/worker registered worker_id=orders-rust runtime=rust tasks=8/);
      const ids = Array.from({ length: 6 }, (_, i) => `rust-${i}`);
      const statuses = await runOrders(() => server.url, ids, 3);
      for (const id of ids) {
        assert.equal(statuses.get(id), "completed", id);
        assertCleanOrderHistory(id, await fullHistory(server.url, id));
      }
      const done = await api(server.url).get("/v1/executions/rust-0");
      assert.match(done.body.output.charge_id, /^ch-/);
      assert.equal(done.body.output.tracking, "trk-rust-0");

      const declined = await api(server.url).post("/v1/executions", {
        workflow: "OrderProcessing",
        execution_id: "rust-declined",
        input: { ...orderInput("rust-declined"), customer: "declined" },
      });
      assert.equal(declined.status, 201);
      const failed = await api(server.url).get("/v1/executions/rust-declined/wait?timeout_s=30");
      assert.equal(failed.body.status, "failed", JSON.stringify(failed.body));
      assert.equal(failed.body.error.code, "CARD_DECLINED");
      const events = await fullHistory(server.url, "rust-declined");
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
