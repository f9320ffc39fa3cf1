/**
 * A signal or cancel that reaches a server that does not own the execution is validated there
 * first (reference page, "Inbox"): errors answer at once, exactly as on one server, and nothing
 * is written to the owner's inbox. In process, on a real PostgreSQL.
 */
import assert from "node:assert/strict";
import { migratedDatabase } from "../tests/support/pg.ts";
import { deployAndStart, startedNode } from "../tests/support/in_process_node.ts";
import { postgresClient } from "../lib/store/postgres.ts";

const TYPED = {
  ir: "orbit-ir/2",
  name: "Typed",
  version: "1.0.0",
  signals: { go: { schema: { type: "object", required: ["n"] } } },
  steps: [{ id: "w", wait_signal: "go" }, { id: "r", return: "{% $steps.w %}" }],
};

Deno.test({
  name: "shared: a bad signal or a cancel of a finished execution through another server is " +
    "refused there, as on one server, with nothing written to the owner's inbox",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const url = await migratedDatabase();
    const a = await startedNode(url, "node-a");
    const b = await startedNode(url, "node-b");
    const sql = postgresClient(url, { max: 1, applicationName: "orbit-test" });
    const inbox = async () =>
      Number((await sql.unsafe("SELECT count(*)::int AS n FROM orbit_inbox"))[0]!.n);
    try {
      await deployAndStart(a, [TYPED], { workflow: "Typed", execution_id: "sc-1", input: {} });
      const cases: Array<[string, unknown, number, string]> = [
        ["/v1/executions/sc-1/signals/nope", { payload: { n: 1 } }, 404, "UNKNOWN_SIGNAL"],
        ["/v1/executions/sc-1/signals/go", { payload: { m: 1 } }, 422, "SIGNAL_PAYLOAD_INVALID"],
        ["/v1/executions/none/signals/go", { payload: { n: 1 } }, 404, "UNKNOWN_EXECUTION"],
        ["/v1/executions/none/cancel", {}, 404, "UNKNOWN_EXECUTION"],
      ];
      for (const [path, body, status, code] of cases) {
        for (const node of [a, b]) {
          const r = await node.call("POST", path, body);
          assert.equal(r.status, status, `${path}: ${JSON.stringify(r.body)}`);
          assert.equal(r.body.error.code, code, `${path}: ${JSON.stringify(r.body)}`);
        }
        assert.equal(await inbox(), 0, path);
      }
      const ok = await b.call("POST", "/v1/executions/sc-1/signals/go", { payload: { n: 1 } });
      assert.equal(ok.status, 200, JSON.stringify(ok.body));
      assert.equal(typeof ok.body.seq, "number");
      // Finished now: both servers answer 409 EXECUTION_FINISHED, and write nothing.
      for (const node of [a, b]) {
        const s = await node.call("POST", "/v1/executions/sc-1/signals/go", { payload: { n: 2 } });
        assert.equal(s.status, 409, JSON.stringify(s.body));
        assert.equal(s.body.error.code, "EXECUTION_FINISHED");
        const c = await node.call("POST", "/v1/executions/sc-1/cancel", {});
        assert.equal(c.status, 409, JSON.stringify(c.body));
        assert.equal(c.body.error.code, "EXECUTION_FINISHED");
      }
      assert.equal(await inbox(), 0);
    } finally {
      await sql.end({ timeout: 1 });
      await b.n.stop();
      await a.n.stop();
    }
  },
});
