/**
 * The C# example worker (sdk/csharp/examples/Orders) runs OrderProcessing on its own against a
 * real server: orders complete with clean histories, a declined card fails the order and runs
 * the reservation's compensation, and SIGTERM stops the worker with exit code 0. Skipped,
 * loudly, where Mono (mcs, mono) or Debian's Newtonsoft.Json is not installed; CI installs them.
 */
import { tempDir } from "./support/server.ts";
import { exampleWorkerRunsOrders } from "./support/example_worker.ts";
import { csharpBuild, MissingToolchain } from "./conformance/sdks.ts";

let build: string | null = null;
let missing = "";
try {
  build = await csharpBuild("orders");
} catch (err) {
  if (!(err instanceof MissingToolchain)) throw err;
  missing = err.message;
  console.warn(`!!! SKIPPING the C# example worker's test: ${missing}`);
}

Deno.test({
  name:
    "the C# example worker runs OrderProcessing alone, compensates a declined card, stops on SIGTERM",
  ignore: build === null,
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const dir = await tempDir();
    try {
      await exampleWorkerRunsOrders("csharp", "cs", [
        "mono",
        "--debug",
        `${build}/Orbit.Examples.Orders.exe`,
      ], dir);
    } finally {
      await Deno.remove(dir, { recursive: true }).catch(() => {});
      await Deno.remove(build!, { recursive: true }).catch(() => {});
    }
  },
});
