/**
 * A shared server with no other live node (its heartbeat answers how many others heartbeat
 * within the node timeout) does not send `orbit_done` and `orbit_tasks` notifications — only
 * its own listener would get them, and it wakes its waits and polls in memory — and sends them
 * again once another node heartbeats (`orbit_done` for an execution a client waits for on the
 * other node, which announced the wait with `orbit_wait`).
 */
import assert from "node:assert/strict";
import postgres from "postgres";
import { waitFor } from "./support/server.ts";
import { sharedPostgres } from "./support/pg.ts";
import { startSharedCluster } from "./support/shared_cluster.ts";

const DONE_AT_ONCE = {
  ir: "orbit-ir/2",
  name: "DoneAtOnce",
  version: "1.0.0",
  steps: [{ id: "r", return: "{% $input %}" }],
};

const DONE_ON_SIGNAL = {
  ir: "orbit-ir/2",
  name: "DoneOnSignal",
  version: "1.0.0",
  signals: { go: {} },
  steps: [{ id: "w", wait_signal: "go" }, { id: "r", return: "{% $input %}" }],
};

Deno.test({
  name: "a lone shared server sends no orbit_done notifications; with a second node it does, " +
    "for a wait announced there",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const db = await (await sharedPostgres()).createDatabase();
    const c = await startSharedCluster({ db, nodes: 1, proxy: false });
    const sql = postgres(db, { max: 1, onnotice: () => {} });
    try {
      const heard: string[] = [];
      const waits: string[] = [];
      await sql.listen("orbit_done", (payload) => void heard.push(payload));
      await sql.listen("orbit_wait", (payload) => void waits.push(payload));
      const one = c.nodes[0]!;
      for (const wf of [DONE_AT_ONCE, DONE_ON_SIGNAL]) {
        const dep = await one.api().post("/v1/workflows", wf);
        assert.equal(dep.status, 201, JSON.stringify(dep.body));
      }

      // Two heartbeats after it became ready: it has read that no other node is live.
      const beat = async () =>
        Number(
          (await sql`SELECT heartbeat_ms FROM orbit_nodes WHERE node_id = 'node-1'`)[0]!
            .heartbeat_ms,
        );
      for (let i = 0; i < 2; i++) {
        const before = await beat();
        await waitFor(async () => (await beat()) > before, "node-1 to heartbeat", 10_000, 50);
      }

      const start = async (id: string) => {
        const r = await one.api().post("/v1/executions", {
          workflow: "DoneAtOnce",
          execution_id: id,
          input: id,
        });
        assert.equal(r.status, 201, JSON.stringify(r.body));
        const w = await one.api().get(`/v1/executions/${id}/wait?timeout_s=10`);
        assert.equal(w.body?.status, "completed", JSON.stringify(w.body));
      };
      for (let i = 0; i < 5; i++) await start(`alone-${i}`);

      // A second node: once node-1 has seen its heartbeat, the end of an execution a client
      // waits for on node-2 (which announces the wait) is announced again. Notifications arrive
      // in the order their statements committed, so the first `together-*` one heard would come
      // after any `alone-*` one that had been sent.
      const two = await c.addNode();
      let k = 0;
      await waitFor(
        async () => {
          const id = `together-${k++}`;
          const r = await one.api().post("/v1/executions", {
            workflow: "DoneOnSignal",
            execution_id: id,
            input: id,
          });
          assert.equal(r.status, 201, JSON.stringify(r.body));
          const waiting = two.api().get(`/v1/executions/${id}/wait?timeout_s=10`);
          await waitFor(() => waits.includes(id), `node-2 to announce its wait for ${id}`, 10_000);
          const sent = await one.api().post(`/v1/executions/${id}/signals/go`, { payload: 1 });
          assert.equal(sent.status, 200, JSON.stringify(sent.body));
          assert.equal((await waiting).body?.status, "completed");
          const until = Date.now() + 500;
          while (Date.now() < until && !heard.includes(id)) {
            await new Promise((r) => setTimeout(r, 20));
          }
          return heard.includes(id);
        },
        "an orbit_done notification once node-2 heartbeats",
        20_000,
        0,
      );
      assert.deepEqual(heard.filter((p) => p.startsWith("alone-")), [], JSON.stringify(heard));
    } finally {
      await sql.end();
      await c.close();
    }
  },
});
