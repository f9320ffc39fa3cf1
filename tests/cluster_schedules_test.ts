/**
 * only_the_leader_fires_schedules_and_a_new_leader_carries_on (reference page, "Schedules"):
 * with a 1-second interval schedule on two servers, the standby's orbit_schedules_fired_total
 * stays 0, the leader's counts every start, and after the leader is killed the new leader
 * carries on with the same schedule; every occurrence is one execution.
 */
import assert from "node:assert/strict";
import { api, type ServerProcess, startServer, waitFor } from "./support/server.ts";
import { sharedPostgres } from "./support/pg.ts";

const TICK = {
  ir: "orbit-ir/1",
  name: "Tick",
  version: "1.0.0",
  steps: [{ id: "done", return: "{% $input %}" }],
};

async function firedMetric(s: ServerProcess): Promise<number> {
  const text = (await api(s.url).get("/v1/metrics")).body as string;
  const m = text.match(/^orbit_schedules_fired_total (\d+)$/m);
  return m ? Number(m[1]) : 0;
}

Deno.test({
  name: "only_the_leader_fires_schedules_and_a_new_leader_carries_on",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const db = await (await sharedPostgres()).createDatabase();
    const args = (id: string) => ["--cluster", "--node-id", id];
    const a = await startServer({ db, args: args("a") });
    await a.waitForLog(/leader is serving node_id=a term=1/);
    const b = await startServer({ db, args: args("b") });
    await b.waitForLog(/following the leader term=1 leader="a"/);
    try {
      assert.equal((await api(a.url).post("/v1/workflows", TICK)).status, 201);
      const spec = {
        schedule_id: "tick",
        workflow: "Tick",
        every_s: 1,
        overlap: "allow_all",
        catch_up: "all",
        catch_up_window_s: 60,
      };
      assert.equal(
        (await api(b.url).post("/v1/schedules", spec)).status,
        503,
        "a standby refuses changes",
      );
      assert.equal((await api(a.url).post("/v1/schedules", spec)).status, 201);
      await waitFor(
        async () => (await api(a.url).get("/v1/schedules/tick")).body.fired >= 3,
        "three occurrences",
        15_000,
      );
      assert.equal(
        (await api(b.url).get("/v1/schedules/tick")).status,
        200,
        "the standby reads schedules",
      );
      assert.equal(await firedMetric(b), 0, "the standby fires nothing");
      const firedByA = await firedMetric(a);
      assert.ok(firedByA >= 3);

      await a.kill("SIGKILL");
      await waitFor(
        async () => (await api(b.url).get("/v1/ready")).status === 200,
        "b to lead",
        15_000,
      );
      await waitFor(async () => (await firedMetric(b)) >= 2, "b to fire the schedule", 15_000);
      assert.equal((await api(b.url).post("/v1/schedules/tick/pause", {})).status, 200);
      const s = (await api(b.url).get("/v1/schedules/tick")).body;
      const list =
        (await api(b.url).get("/v1/executions?workflow=Tick&limit=1000")).body.executions;
      const ids = list.map((e: { execution_id: string }) => e.execution_id);
      assert.equal(new Set(ids).size, ids.length);
      for (const id of ids) assert.match(id, /^tick@\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/);
      // Every fired occurrence is one execution (a start that already happened is a no-op).
      assert.equal(ids.length, s.fired, "one execution per fired occurrence");
    } finally {
      await a.kill("SIGKILL");
      await b.kill("SIGKILL");
    }
  },
});
