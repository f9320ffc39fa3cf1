/**
 * The workers file (`--workers-file`) in shared mode: a worker's session and its attempts are
 * checked on every server, not only on the one that registered or dispatched them. Two real
 * shared servers on one PostgreSQL: a worker allowed only `payments.charge` must not poll with
 * another worker's session, nor report another worker's `orders.validate` attempt, through a
 * server that has not cached that session or does not hold that execution (a single server
 * answers both with 403; before, a shared server that did not know them let them through).
 */
import assert from "node:assert/strict";
import { api, startServer, tempDir, waitFor } from "./support/server.ts";
import { migratedDatabase } from "./support/pg.ts";

const CLIENT = "client-token-0123456789abcdef";
const ORDERS = {
  worker_id: "orders-ts",
  token: "orders-token-0123456789abcdef",
  tasks: [{ name: "orders.*" }],
};
const PAYMENTS = {
  worker_id: "payments",
  token: "payments-token-0123456789abcdef",
  tasks: [{ name: "payments.charge", contract: "1" }],
};
const FLOW = {
  ir: "orbit-ir/1",
  name: "Secure.Order",
  version: "1.0.0",
  steps: [{ id: "validate", task: "orders.validate", contract: "1", input: "{% $input %}" }],
};

Deno.test({
  name: "shared: another worker's session and attempts are refused on every server",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const file = `${await tempDir()}/workers.json`;
    await Deno.writeTextFile(file, JSON.stringify({ workers: [ORDERS, PAYMENTS] }));
    const db = await migratedDatabase();
    const args = (id: string) => [
      "--token",
      CLIENT,
      "--workers-file",
      file,
      "--cluster",
      "--cluster-mode",
      "shared",
      "--node-id",
      id,
    ];
    const a = await startServer({ db, args: args("a") });
    const b = await startServer({ db, args: args("b") });
    try {
      for (const s of [a, b]) {
        await waitFor(async () => (await api(s.url).get("/v1/ready")).status === 200, "ready");
      }
      const client = api(a.url, CLIENT);
      assert.equal((await client.post("/v1/workflows", FLOW)).status, 201);
      const reg = await api(a.url, ORDERS.token).post("/v1/workers/register", {
        worker_id: "orders-ts",
        runtime: "typescript",
        tasks: [{ name: "orders.validate", contract: "1" }],
        concurrency: 1,
      });
      assert.equal(reg.status, 200, JSON.stringify(reg.body));
      const session = reg.body.session_id;
      const start = await client.post("/v1/executions", {
        workflow: "Secure.Order",
        input: { n: 1 },
        execution_id: "wf-1",
      });
      assert.equal(start.status, 201, JSON.stringify(start.body));
      // Another worker's session, on the server that registered it and on the other one.
      for (const s of [a, b]) {
        const r = await api(s.url, PAYMENTS.token).post("/v1/workers/poll", {
          session_id: session,
          wait_s: 0,
        });
        assert.equal(r.status, 403, `${s.url}: ${JSON.stringify(r.body)}`);
        assert.equal(r.body.error.code, "FORBIDDEN_WORKER");
      }
      // The owner of the session takes the task through b (wf-1 is owned by a).
      const poll = await api(b.url, ORDERS.token).post("/v1/workers/poll", {
        session_id: session,
        wait_s: 5,
      });
      const token = poll.body.tasks?.[0]?.token;
      assert.ok(token, JSON.stringify(poll.body));
      // Another worker reports it, through either server: refused, nothing applied.
      for (const s of [a, b]) {
        const r = await api(s.url, PAYMENTS.token).post("/v1/tasks/complete", {
          token,
          output: { forged: true },
        });
        assert.equal(r.status, 403, `${s.url}: ${JSON.stringify(r.body)}`);
        assert.ok(
          ["FORBIDDEN_WORKER", "TASK_NOT_ALLOWED"].includes(r.body.error.code),
          JSON.stringify(r.body),
        );
      }
      // Its own worker's result is applied.
      const done = await api(b.url, ORDERS.token).post("/v1/tasks/complete", {
        token,
        output: { ok: true },
      });
      assert.equal(done.status, 200, JSON.stringify(done.body));
      assert.equal(done.body.accepted, true);
      const ex = await waitFor(async () => {
        const r = await client.get("/v1/executions/wf-1");
        return r.body.status === "completed" ? r.body : null;
      }, "wf-1 to complete");
      assert.deepEqual(ex.output, { validate: { ok: true } });
    } finally {
      await a.kill();
      await b.kill();
    }
  },
});
