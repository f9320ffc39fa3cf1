/**
 * The Java example worker (sdk/java/examples/orders, dev.orbit.examples.orders.OrderWorker)
 * runs OrderProcessing on its own against a real server: orders complete with clean histories,
 * a declined card fails the order and runs the reservation's compensation, and SIGTERM stops the
 * worker with exit code 0. Skipped, loudly, where the JDK or Gson is not installed; CI installs
 * them.
 */
import { tempDir } from "./support/server.ts";
import { exampleWorkerRunsOrders } from "./support/example_worker.ts";
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
    try {
      await exampleWorkerRunsOrders("java", "java", [
        "java",
        ...JAVA_FLAGS,
        "-cp",
        build!.classpath,
        "dev.orbit.examples.orders.OrderWorker",
      ], dir);
    } finally {
      await Deno.remove(dir, { recursive: true }).catch(() => {});
      if (build) await Deno.remove(build.dir, { recursive: true }).catch(() => {});
    }
  },
});
