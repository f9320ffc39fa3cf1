/**
 * Workflow definitions in shared mode (reference page: "Any server registers; the others
 * reload on a notification"), in process on a real PostgreSQL: a version deployed through one
 * server is started by another without a version once the deploy's NOTIFY orbit_defs reached
 * it, even when that server had resolved an older "latest" before, and also when the
 * notification never reached it (its listening connection was down): it drops its cached
 * latest versions when it listens again. With an explicit version it is started at once.
 */
import assert from "node:assert/strict";
import { migratedDatabase } from "../tests/support/pg.ts";
import { WAITER_WORKFLOW } from "../tests/support/orders.ts";
import { startedNode } from "../tests/support/in_process_node.ts";
import { postgresClient } from "../lib/store/postgres.ts";

const version = (v: string) => ({ ...WAITER_WORKFLOW, version: v });

Deno.test({
  name:
    "shared: another server starts a newly deployed version, also after its notification was lost",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const url = await migratedDatabase();
    const a = await startedNode(url, "node-a");
    const b = await startedNode(url, "node-b");
    const sql = postgresClient(url, { max: 1, applicationName: "orbit-test" });
    let n = 0;
    const start = async (body: Record<string, unknown>) => {
      const r = await b.call("POST", "/v1/executions", {
        workflow: "Waiter",
        execution_id: `d-${++n}`,
        input: {},
        ...body,
      });
      assert.equal(r.status, 201, JSON.stringify(r.body));
      return r.body.version as string;
    };
    // Starts without a version through node B until one starts `want` (each a new execution).
    const eventually = async (want: string) => {
      const deadline = Date.now() + 10_000;
      for (;;) {
        const got = await start({});
        if (got === want) return;
        if (Date.now() > deadline) assert.fail(`node B still starts ${got}, not ${want}`);
        await new Promise((r) => setTimeout(r, 20));
      }
    };
    try {
      assert.equal((await a.call("POST", "/v1/workflows", version("1.0.0"))).status, 201);
      // Node B resolves the latest version: 1.0.0.
      assert.equal(await start({}), "1.0.0");
      // 1.1.0 through node A: node B starts it by its version at once, without one once the
      // deploy's notification arrived.
      assert.equal((await a.call("POST", "/v1/workflows", version("1.1.0"))).status, 201);
      assert.equal(await start({ version: "1.1.0" }), "1.1.0");
      await eventually("1.1.0");
      // Node B's listening connection breaks; 1.2.0 is deployed through node A meanwhile, so
      // its notification is lost to node B, which still caches 1.1.0 as the latest.
      await sql.unsafe(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
        ["orbit-listen:node-b"],
      );
      assert.equal((await a.call("POST", "/v1/workflows", version("1.2.0"))).status, 201);
      assert.equal(await start({ version: "1.2.0" }), "1.2.0");
      await eventually("1.2.0");
      assert.equal(await start({ version: "1.0.0" }), "1.0.0");
      const list = await b.call("GET", "/v1/workflows/Waiter");
      assert.deepEqual(
        (list.body.versions as { version: string }[]).map((v) => v.version).sort(),
        ["1.0.0", "1.1.0", "1.2.0"],
      );
    } finally {
      await sql.end({ timeout: 1 });
      await b.n.stop();
      await a.n.stop();
    }
  },
});
