/**
 * Shared mode, as on one server: a worker's result that leaves its slot free (the execution has
 * nothing more for that worker) comes back with the next queued task in the same answer instead
 * of the worker having to poll for it: a task of an execution the server owns is dispatched in
 * the result's own commit, which claims its `orbit_tasks` row (COMMIT_OWNED's take). Each task
 * is handed out once and every execution completes once.
 */
import assert from "node:assert/strict";
import postgres from "postgres";
import { sharedPostgres } from "./support/pg.ts";
import { startSharedCluster } from "./support/shared_cluster.ts";

const ONE = {
  ir: "orbit-ir/1",
  name: "One",
  version: "1.0.0",
  steps: [{ id: "only", task: "t.one", contract: "1", input: "{% $input %}" }],
};

Deno.test({
  name: "shared: a result that frees its slot takes the next queued task in its answer",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const db = await (await sharedPostgres()).createDatabase();
    const c = await startSharedCluster({ db, nodes: 1, proxy: false });
    try {
      const api = c.nodes[0]!.api();
      const dep = await api.post("/v1/workflows", ONE);
      assert.equal(dep.status, 201, JSON.stringify(dep.body));
      const reg = await api.post("/v1/workers/register", {
        worker_id: "w",
        runtime: "typescript",
        tasks: [{ name: "t.one", contract: "1" }],
        concurrency: 1,
      });
      assert.equal(reg.status, 200, JSON.stringify(reg.body));
      const session = reg.body.session_id as string;
      const start = async (id: string, input: number) => {
        const r = await api.post("/v1/executions", { workflow: "One", execution_id: id, input });
        assert.equal(r.status, 201, JSON.stringify(r.body));
      };

      await start("a", 1);
      const pa = await api.post("/v1/workers/poll", {
        session_id: session,
        max_tasks: 1,
        wait_s: 5,
      });
      assert.equal(pa.status, 200, JSON.stringify(pa.body));
      assert.deepEqual(pa.body.tasks.map((t: { execution_id: string }) => t.execution_id), ["a"]);
      await start("b", 2);
      await start("c", 3);

      // a's result frees the slot: a queued task (b's or c's) comes back in the answer, its
      // dispatch written in the result's commit (which also claims its row): one commit.
      const commits = async () => {
        const m = await api.get("/v1/metrics");
        return Number(String(m.body).match(/^orbit_commits_total (\S+)$/m)?.[1]);
      };
      const before = await commits();
      const ra = await api.post("/v1/tasks/complete", {
        token: pa.body.tasks[0].token,
        output: 10,
        session_id: session,
        max_tasks: 1,
      });
      assert.equal(ra.status, 200, JSON.stringify(ra.body));
      assert.equal(ra.body.accepted, true);
      assert.equal(ra.body.tasks.length, 1, JSON.stringify(ra.body));
      const next = ra.body.tasks[0];
      assert.ok(["b", "c"].includes(next.execution_id), JSON.stringify(next));
      const other = next.execution_id === "b" ? "c" : "b";
      assert.equal(await commits(), before + 1, "the result and the dispatch share one commit");
      const sql = postgres(db, { max: 1, onnotice: () => {} });
      try {
        const rows = await sql`SELECT state, token FROM orbit_tasks WHERE execution_id = ${next
          .execution_id as string}`;
        assert.deepEqual(rows.map((r) => [r.state, r.token]), [["claimed", next.token]]);
      } finally {
        await sql.end();
      }

      // Its result takes the last one; the last result's answer has nothing left to give.
      const rn = await api.post("/v1/tasks/complete", {
        token: next.token,
        output: 20,
        session_id: session,
        max_tasks: 1,
      });
      assert.deepEqual(
        rn.body.tasks.map((t: { execution_id: string }) => t.execution_id),
        [other],
      );
      const rl = await api.post("/v1/tasks/complete", {
        token: rn.body.tasks[0].token,
        output: 30,
        session_id: session,
        max_tasks: 1,
      });
      assert.equal(rl.body.accepted, true);
      assert.deepEqual(rl.body.tasks, []);

      for (const id of ["a", "b", "c"]) {
        const w = await api.get(`/v1/executions/${id}/wait?timeout_s=10`);
        assert.equal(w.body?.status, "completed", JSON.stringify(w.body));
        const h = await api.get(`/v1/executions/${id}/history`);
        const types = (h.body.events as { type: string }[]).map((e) => e.type);
        assert.equal(types.filter((t) => t === "StepDispatched").length, 1, `${id}: ${types}`);
        assert.equal(types.filter((t) => t === "StepSucceeded").length, 1, `${id}: ${types}`);
      }
    } finally {
      await c.close();
    }
  },
});
