/**
 * The Python example worker under --workers-file: with its own worker token it registers and
 * serves; a file that does not allow one of its tasks makes the registration fail with 403
 * TASK_NOT_ALLOWED, and the worker exits 1 with the server's message instead of retrying.
 */
import assert from "node:assert/strict";
import { startServer, tempDir } from "./support/server.ts";
import { startPythonWorker } from "../sdk/python/testing/process.ts";

const WORKER_TOKEN = "orders-python-token-0123456789";

async function serverWith(tasks: Array<{ name: string }>) {
  const dir = await tempDir();
  await Deno.writeTextFile(
    `${dir}/workers.json`,
    JSON.stringify({ workers: [{ worker_id: "orders-python", token: WORKER_TOKEN, tasks }] }),
  );
  return await startServer({
    db: `${dir}/orbit.db`,
    args: ["--token", "client-token-0123456789", "--workers-file", `${dir}/workers.json`],
  });
}

Deno.test({
  name: "the Python worker under --workers-file: its own token serves, a refused task exits 1",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const allowed = await serverWith([{ name: "orders.*" }, { name: "payments.*" }, {
      name: "shipping.create",
    }, { name: "email.confirm" }]);
    const ok = startPythonWorker(allowed.url, { ORBIT_TOKEN: WORKER_TOKEN });
    const refusing = await serverWith([{ name: "orders.*" }]);
    const refused = startPythonWorker(refusing.url, { ORBIT_TOKEN: WORKER_TOKEN });
    try {
      await allowed.waitForLog(/worker registered worker_id=orders-python runtime=python tasks=5/);
      const status = await refused.status;
      assert.equal(status.code, 1, refused.lines.join("\n"));
      assert.ok(
        refused.lines.some((l) =>
          /^error: TASK_NOT_ALLOWED: worker orders-python may not serve /.test(l)
        ),
        refused.lines.join("\n"),
      );
      assert.equal(refused.lines.some((l) => /retrying/.test(l)), false);
    } finally {
      await ok.kill("SIGKILL");
      await refused.kill("SIGKILL");
      await allowed.kill("SIGKILL");
      await refusing.kill("SIGKILL");
    }
  },
});
