/**
 * The Go example worker (sdk/go/examples/orders) runs OrderProcessing on its own against a
 * real server: orders complete with clean histories, a declined card fails the order and runs
 * the reservation's compensation, and SIGTERM stops the worker with exit code 0. Skipped,
 * loudly, where Go is not installed; CI installs it.
 */
import assert from "node:assert/strict";
import { tempDir } from "./support/server.ts";
import { exampleWorkerRunsOrders } from "./support/example_worker.ts";
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
    try {
      await exampleWorkerRunsOrders("go", "go", [bin], dir);
    } finally {
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    }
  },
});
