/**
 * Schedules in shared mode (reference page, "Schedules in shared mode"): every server looks for
 * due occurrences and claims each one with a compare-and-set, so an occurrence is started by
 * exactly one server; a schedule can be created, changed and triggered through any server; when
 * a server dies the others carry on, and deterministic ids keep every occurrence one execution.
 */
import assert from "node:assert/strict";
import { waitFor } from "./support/server.ts";
import { sharedPostgres } from "./support/pg.ts";
import {
  assertEveryOccurrence,
  type NodeProcess,
  type SharedCluster,
  startSharedCluster,
  tail,
} from "./support/shared_cluster.ts";

const T = { sanitizeOps: false, sanitizeResources: false };

const TICK = {
  ir: "orbit-ir/1",
  name: "Tick",
  version: "1.0.0",
  steps: [{ id: "done", return: "{% $input %}" }],
};

const EVERY_SECOND = {
  schedule_id: "tick",
  workflow: "Tick",
  every_s: 1,
  overlap: "allow_all",
  catch_up: "all",
  catch_up_window_s: 60,
};

async function withServers(fn: (c: SharedCluster) => Promise<void>): Promise<void> {
  const db = await (await sharedPostgres()).createDatabase();
  const c = await startSharedCluster({ db, nodes: 3, proxy: false });
  try {
    await fn(c);
  } catch (e) {
    console.error(c.nodes.map((n) => tail(n, 60)).join("\n"));
    throw e;
  } finally {
    await c.close();
  }
}

async function fired(n: NodeProcess): Promise<number> {
  return await n.metric("orbit_schedules_fired_total");
}

async function ids(n: NodeProcess, prefix = "tick@"): Promise<string[]> {
  const r = await n.api().get("/v1/executions?workflow=Tick&limit=1000");
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body.executions
    .map((e: { execution_id: string }) => e.execution_id)
    .filter((id: string) => id.startsWith(prefix));
}

/** Waits until the schedule's fired count, its executions and `metrics()` agree. */
async function settled(reader: NodeProcess, metrics: () => Promise<number>): Promise<string> {
  let last = "";
  await waitFor(
    async () => {
      const s = (await reader.api().get("/v1/schedules/tick")).body;
      const n = (await ids(reader)).length;
      const m = await metrics();
      last = `fired=${s.fired} skipped=${s.skipped} executions=${n} metrics=${m}`;
      return s.fired === n && m === s.fired;
    },
    "fired == executions == orbit_schedules_fired_total",
    20_000,
    250,
  ).catch((e) => {
    throw new Error(`${(e as Error).message}; last: ${last}`);
  });
  return last;
}

Deno.test({
  ...T,
  name: "each_schedule_occurrence_is_fired_by_exactly_one_node",
  fn: () =>
    withServers(async (c) => {
      const [one, two, three] = c.nodes as [NodeProcess, NodeProcess, NodeProcess];
      assert.equal((await one.api().post("/v1/workflows", TICK)).status, 201);
      const created = await two.api().post("/v1/schedules", EVERY_SECOND);
      assert.equal(created.status, 201, JSON.stringify(created.body));
      const t0 = Date.now();
      // A 1-second schedule on three servers for five seconds.
      await waitFor(
        async () => (await three.api().get("/v1/schedules/tick")).body.fired >= 5,
        "five occurrences",
        30_000,
        100,
      );
      assert.equal((await three.api().post("/v1/schedules/tick/pause", {})).status, 200);
      console.log(`five occurrences in ${Date.now() - t0} ms`);
      const perNode: number[] = [];
      console.log(
        await settled(one, async () => {
          perNode.splice(0, 3, ...await Promise.all(c.nodes.map(fired)));
          return perNode.reduce((a, b) => a + b, 0);
        }),
        `per node ${perNode.join("/")}`,
      );
      const s = (await one.api().get("/v1/schedules/tick")).body;
      const all = await ids(one);
      assert.ok(all.length >= 5);
      assert.equal(new Set(all).size, all.length);
      for (const id of all) assert.match(id, /^tick@\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/);
      assertEveryOccurrence(all, 1_000, s.skipped);
      // Every server reads the same schedule and executions.
      for (const n of c.nodes) {
        assert.equal((await n.api().get("/v1/schedules/tick")).body.fired, s.fired);
        assert.deepEqual((await ids(n)).sort(), [...all].sort());
      }
    }),
});

Deno.test({
  ...T,
  name: "shared: a schedule is created, changed, triggered, paused and resumed through any server",
  fn: () =>
    withServers(async (c) => {
      const [one, two, three] = c.nodes as [NodeProcess, NodeProcess, NodeProcess];
      assert.equal((await one.api().post("/v1/workflows", TICK)).status, 201);
      const hourly = { ...EVERY_SECOND, every_s: 3600 };
      assert.equal((await one.api().post("/v1/schedules", hourly)).status, 201);
      const changed = await two.api().call("PATCH", "/v1/schedules/tick", { every_s: 7200 });
      assert.equal(changed.status, 200, JSON.stringify(changed.body));
      assert.equal((await three.api().get("/v1/schedules/tick")).body.every_s, 7200);

      const trig = await three.api().post("/v1/schedules/tick/trigger", {});
      assert.equal(trig.status, 201, JSON.stringify(trig.body));
      const id = trig.body.execution_id as string;
      assert.match(id, /^tick@/);
      const done = await one.api().get(
        `/v1/executions/${encodeURIComponent(id)}/wait?timeout_s=30`,
      );
      assert.equal(done.body.status, "completed", JSON.stringify(done.body));
      await waitFor(
        async () => (await one.api().get("/v1/schedules/tick")).body.fired === 1,
        "the trigger counted as fired, read on another server",
        10_000,
      );
      const metrics = await Promise.all(c.nodes.map(fired));
      assert.deepEqual(metrics.sort(), [0, 0, 1], "the server that started it counted it");

      assert.equal((await one.api().post("/v1/schedules/tick/pause", {})).status, 200);
      assert.equal((await two.api().get("/v1/schedules/tick")).body.paused, true);
      assert.equal((await three.api().post("/v1/schedules/tick/resume", {})).status, 200);
      assert.equal((await one.api().get("/v1/schedules/tick")).body.paused, false);
      assert.equal((await two.api().call("DELETE", "/v1/schedules/tick")).status < 300, true);
      assert.equal((await three.api().get("/v1/schedules/tick")).status, 404);
    }),
});

Deno.test({
  ...T,
  name: "shared: when a server that fires the schedule is killed, the others carry on",
  fn: () =>
    withServers(async (c) => {
      const [one, two] = c.nodes as [NodeProcess, NodeProcess, NodeProcess];
      assert.equal((await one.api().post("/v1/workflows", TICK)).status, 201);
      assert.equal((await two.api().post("/v1/schedules", EVERY_SECOND)).status, 201);
      await waitFor(
        async () => (await one.api().get("/v1/schedules/tick")).body.fired >= 3,
        "three occurrences",
        30_000,
        100,
      );
      // The server that has fired the most so far.
      const counts = await Promise.all(c.nodes.map(fired));
      const victim = c.nodes[counts.indexOf(Math.max(...counts))]!;
      const survivors = c.others(victim);
      const before = (await survivors[0]!.api().get("/v1/schedules/tick")).body.fired;
      const survivorsBefore = (await Promise.all(survivors.map(fired))).reduce((a, b) => a + b);
      await victim.kill();
      const killedAt = Date.now();
      // A claim the victim held when it died expires after 30 s; occurrences keep coming
      // (caught up) whichever server fires them.
      await waitFor(
        async () => (await survivors[0]!.api().get("/v1/schedules/tick")).body.fired >= before + 3,
        "three more occurrences after the kill",
        60_000,
        200,
      );
      console.log(`three more occurrences ${Date.now() - killedAt} ms after killing ${victim.id}`);
      assert.equal(
        (await survivors[0]!.api().post("/v1/schedules/tick/pause", {})).status,
        200,
      );
      // Once settled: every execution is one fired occurrence, and the survivors counted the
      // ones started after the kill.
      let s: { fired: number; skipped: number } = { fired: 0, skipped: 0 };
      let all: string[] = [];
      await waitFor(
        async () => {
          s = (await survivors[0]!.api().get("/v1/schedules/tick")).body;
          all = await ids(survivors[0]!);
          return all.length === s.fired;
        },
        "fired == executions",
        20_000,
        250,
      );
      assert.equal(new Set(all).size, all.length);
      assertEveryOccurrence(all, 1_000, s.skipped);
      const survivorsAfter = (await Promise.all(survivors.map(fired))).reduce((a, b) => a + b);
      assert.ok(survivorsAfter - survivorsBefore >= 3, "the survivors fired the new occurrences");
    }),
});
