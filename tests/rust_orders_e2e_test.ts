/**
 * The Rust example worker (sdk/rust/examples/orders.rs) runs OrderProcessing on its own against
 * a real server: orders complete with clean histories, a declined card fails the order and runs
 * the reservation's compensation, and SIGTERM stops the worker with exit code 0. Skipped,
 * loudly, where cargo or Debian's serde crates are not installed; CI installs them.
 */
import assert from "node:assert/strict";
import { tempDir } from "./support/server.ts";
import { exampleWorkerRunsOrders } from "./support/example_worker.ts";
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
    try {
      await exampleWorkerRunsOrders("rust", "rust", [bin], dir);
    } finally {
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    }
  },
});
