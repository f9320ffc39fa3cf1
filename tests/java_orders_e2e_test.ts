/**
 * The Java example worker (sdk/java/examples/orders, dev.orbit.examples.orders.OrderWorker)
 * runs OrderProcessing on its own against a real server: orders complete with clean histories,
 * a declined card fails the order and runs the reservation's compensation, and SIGTERM stops the
 * worker with exit code 0. Skipped, loudly, where the JDK or Gson is not installed; CI installs
 * them.
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
import { JAVA_FLAGS, javaBuild, MissingToolchain } from "./conformance/sdks.ts";

let build: { dir: string; classpath: string } | null = null;
let missing = "";
try {
  build = await javaBuild();
} catch (err) {
  if (!(err instanceof MissingToolchain)) throw err;
  missing = err.message;
  console.warn(
    `\n${"!".repeat(78)}\n!!! SKIPPING the Java example worker's test: ${missing}\n${
      "!".repeat(78)
    }\n`,
  );
}

Deno.test({
  name:
    "the Java example worker runs OrderProcessing alone, compensates a declined card, stops on SIGTERM",
  ignore: build === null,
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const dir = await tempDir();
    const server = await startServer({ db: `${dir}/orbit.db` });
    const worker = startWorkerProcess(
      "orders-java",
      ["java", ...JAVA_FLAGS, "-cp", build!.classpath, "dev.orbit.examples.orders.OrderWorker"],
      server.url,
      { ORDER_TRACE: "1", ORDER_CONCURRENCY: "4" },
    );
    try {
      assert.equal((await api(server.url).post("/v1/workflows", ORDER_WORKFLOW)).status, 201);
      await server.waitForLog(/worker registered worker_id=orders-java runtime=java tasks=8/);
      const ids = Array.from({ length: 6 }, (_, i) => `java-${i}`);
      const statuses = await runOrders(() => server.url, ids, 3);
      for (const id of ids) {
        assert.equal(statuses.get(id), "completed", id);
        assertCleanOrderHistory(id, await fullHistory(server.url, id));
      }
      const done = await api(server.url).get("/v1/executions/java-0");
      assert.match(done.body.output.charge_id, /^ch-/);
      assert.equal(done.body.output.tracking, "trk-java-0");

      const declined = await api(server.url).post("/v1/executions", {
        workflow: "OrderProcessing",
        execution_id: "java-declined",
        input: { ...orderInput("java-declined"), customer: "declined" },
      });
      assert.equal(declined.status, 201);
      const failed = await api(server.url).get("/v1/executions/java-declined/wait?timeout_s=30");
      assert.equal(failed.body.status, "failed", JSON.stringify(failed.body));
      assert.equal(failed.body.error.code, "CARD_DECLINED");
      const events = await fullHistory(server.url, "java-declined");
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
      if (build) await Deno.remove(build.dir, { recursive: true }).catch(() => {});
    }
  },
});
