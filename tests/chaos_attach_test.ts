/**
 * `deno task chaos --attach`: a short run against a server this test starts itself (SQLite,
 * with a token), as a user would against their own deployment. The run starts no server: it
 * deploys its workflows there, runs its own workers behind its worker-link fault proxy, injects
 * only worker and worker-link faults, and checks the history it reads back through the HTTP API.
 */
import assert from "node:assert/strict";
import { runChaos } from "../chaos/run.ts";
import type { FaultKind } from "../chaos/faults.ts";
import { readSnapshot } from "../chaos/history_db.ts";
import { startServer, tempDir } from "./support/server.ts";

Deno.test({
  name: "chaos --attach: a run against a running server injects worker faults and finds nothing",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const dir = await tempDir();
    const server = await startServer({
      db: `${dir}/orbit.db`,
      args: ["--token", "attach-secret", "--session-timeout", "2"],
    });
    // In this order each one starts within 20 s whatever the seed draws (waits of at most 3 s,
    // a kill of at most 1.5 s, a pause or a black hole of at most 5 s).
    const faults: FaultKind[] = [
      "worker-link-drop",
      "worker-kill",
      "worker-pause",
      "worker-link-blackhole",
    ];
    const lines: string[] = [];
    try {
      const report = await runChaos({
        mode: "attach",
        attach: server.url,
        token: "attach-secret",
        seconds: 20,
        seed: 404,
        faults,
        inOrder: true,
        clients: 3,
        settleSeconds: 120,
        log: (l) => {
          lines.push(l);
          if (Deno.env.get("ORBIT_TEST_LOGS")) console.error(l);
        },
      });
      const out = lines.join("\n");
      assert.equal(report.role, "single", out);
      assert.deepEqual(report.violations, [], out);
      for (const kind of faults) {
        assert.ok((report.faults[kind] ?? 0) >= 1, `fault ${kind} was never injected:\n${out}`);
      }
      assert.ok(report.driver.ordersDone > 0, `no order finished:\n${out}`);
      assert.equal(report.driver.ordersDone, report.driver.ordersStarted, out);
      // The checker read the history through the API: every finished order is in it.
      assert.ok(report.check.executions >= report.driver.ordersDone, out);
      assert.ok(report.check.attempts > 0 && report.check.occurrences > 0, out);
      // What the checker read through the API is what the database holds.
      const db = await readSnapshot(`${dir}/orbit.db`, report.tag);
      const events = [...db.events.values()].reduce((n, l) => n + l.length, 0);
      assert.deepEqual(
        [report.check.executions, report.check.events],
        [db.executions.length, events],
        out,
      );
    } finally {
      await server.kill("SIGKILL");
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    }
  },
});
