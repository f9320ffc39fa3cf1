/**
 * `--max-active-executions` against a real server process: a start beyond the limit answers
 * 429 TOO_MANY_ACTIVE_EXECUTIONS with `retry-after: 1` and creates nothing; a start of an id
 * that exists is no new execution and is answered 200 even at the limit; a finished execution
 * frees its slot.
 */
import assert from "node:assert/strict";
import { api, startServer, waitFor } from "./support/server.ts";
import { testEachStore } from "./support/stores.ts";

// One task no worker serves: its executions stay running until cancelled.
const HOLD = {
  ir: "orbit-ir/1",
  name: "Limits.Hold",
  version: "1.0.0",
  steps: [{ id: "work", task: "limits.work", contract: "1", input: "{% $input %}" }],
};

testEachStore(
  "starts beyond --max-active-executions answer 429 with a retry hint",
  async (store) => {
    const server = await startServer({
      db: await store.newDb(),
      args: ["--max-active-executions", "2"],
    });
    try {
      const c = api(server.url);
      const start = (execution_id?: string) =>
        c.post("/v1/executions", {
          workflow: HOLD.name,
          ...(execution_id ? { execution_id } : {}),
        });
      const ids = async () =>
        ((await c.get("/v1/executions")).body.executions as Array<{ execution_id: string }>)
          .map((e) => e.execution_id).sort();
      const active = async () => (await c.get("/v1/health")).body.active_executions;

      assert.equal((await c.post("/v1/workflows", HOLD)).status, 201);
      assert.equal((await start("lim-1")).status, 201);
      const first = (await start("lim-2")).body;
      assert.equal(first.status, "running");

      for (const id of ["lim-3", undefined]) {
        const r = await start(id);
        assert.equal(r.status, 429);
        assert.equal(r.headers.get("retry-after"), "1");
        assert.equal(r.body.error.code, "TOO_MANY_ACTIVE_EXECUTIONS");
        assert.equal(r.body.error.retry_after_s, 1);
        assert.equal(r.body.error.limit, 2);
      }
      assert.deepEqual(await ids(), ["lim-1", "lim-2"], "the refused starts created nothing");
      assert.equal((await c.get("/v1/executions/lim-3")).body.error.code, "UNKNOWN_EXECUTION");

      // Starting an existing id is no new execution: 200 with it, even at the limit.
      let r = await start("lim-2");
      assert.equal(r.status, 200);
      assert.equal(r.body.execution_id, "lim-2");
      assert.equal(r.body.run_id, first.run_id);

      // A finished execution frees its slot.
      r = await c.post("/v1/executions/lim-1/cancel", { reason: "free a slot" });
      assert.equal(r.status, 200);
      await waitFor(async () => (await active()) === 1, "one active execution");
      assert.equal((await start("lim-3")).status, 201);
      assert.equal((await start("lim-4")).status, 429, "the limit holds again");
      r = await start("lim-1");
      assert.equal(r.status, 200, "a finished id at the limit is still no new execution");
      assert.equal(r.body.status, "cancelled");
      assert.deepEqual(await ids(), ["lim-1", "lim-2", "lim-3"]);
    } finally {
      await server.kill("SIGKILL");
    }
  },
);

testEachStore("concurrent starts never run more executions than the limit", async (store) => {
  const server = await startServer({
    db: await store.newDb(),
    args: ["--max-active-executions", "3"],
  });
  try {
    const c = api(server.url);
    assert.equal((await c.post("/v1/workflows", HOLD)).status, 201);
    const answers = await Promise.all(
      Array.from(
        { length: 20 },
        (_, i) => c.post("/v1/executions", { workflow: HOLD.name, execution_id: `burst-${i}` }),
      ),
    );
    const statuses = answers.map((a) => a.status);
    assert.equal(statuses.filter((s) => s === 201).length, 3, `statuses: ${statuses}`);
    assert.equal(statuses.filter((s) => s === 429).length, 17);
    assert.equal((await c.get("/v1/executions")).body.executions.length, 3);
    assert.equal((await c.get("/v1/health")).body.active_executions, 3);
  } finally {
    await server.kill("SIGKILL");
  }
});
