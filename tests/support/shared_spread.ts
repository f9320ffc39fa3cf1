/**
 * What the spread tests of every SDK share (tests/cluster_shared_spread*_test.ts): two real
 * shared servers on a fresh database, the workflows their workers run, starting executions
 * through a chosen server (which then owns them), and the check that every server was polled
 * and none forwarded anything to another.
 */
import assert from "node:assert/strict";
import { api, waitFor } from "./server.ts";
import { sharedPostgres } from "./pg.ts";
import { type NodeProcess, startSharedCluster, tail } from "./shared_cluster.ts";

/** Two steps of the task `t.spread` (contract 1), the second on the first's output. */
export const TWO_STEPS = {
  ir: "orbit-ir/1",
  name: "SpreadSteps",
  version: "1.0.0",
  steps: [
    { id: "a", task: "t.spread", contract: "1", input: "{% $input %}" },
    { id: "b", task: "t.spread", contract: "1", input: "{% $steps.a %}" },
  ],
};

/** One step of the task `t.slow` (contract 1). */
export const SLOW = {
  ir: "orbit-ir/1",
  name: "SpreadSlow",
  version: "1.0.0",
  steps: [{ id: "a", task: "t.slow", contract: "1", input: "{% $input %}" }],
};

/**
 * Two shared servers on a fresh database, `workflow` deployed through the first; `fn` gets both
 * (their last log lines are printed when it throws).
 */
export async function withTwo(
  workflow: Record<string, unknown>,
  fn: (one: NodeProcess, two: NodeProcess) => Promise<void>,
): Promise<void> {
  const db = await (await sharedPostgres()).createDatabase();
  const c = await startSharedCluster({ db, nodes: 2, proxy: false });
  try {
    const [one, two] = c.nodes as [NodeProcess, NodeProcess];
    assert.equal((await api(one.url).post("/v1/workflows", workflow)).status, 201);
    await fn(one, two);
  } catch (e) {
    console.error(c.nodes.map((n) => tail(n, 40)).join("\n"));
    throw e;
  } finally {
    await c.close();
  }
}

/**
 * One shared server, and a second that advertises an address nothing listens on (a port taken,
 * then closed), `workflow` deployed through the first; `fn` gets both and the dead address.
 */
export async function withDeadSecond(
  workflow: Record<string, unknown>,
  fn: (one: NodeProcess, two: NodeProcess, dead: string) => Promise<void>,
): Promise<void> {
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const dead = `http://127.0.0.1:${(l.addr as Deno.NetAddr).port}`;
  l.close();
  const db = await (await sharedPostgres()).createDatabase();
  const c = await startSharedCluster({ db, nodes: 1, proxy: false });
  try {
    const one = c.nodes[0]!;
    const two = await c.addNode("node-2", { args: ["--advertise-addr", dead] });
    assert.equal((await api(one.url).post("/v1/workflows", workflow)).status, 201);
    await fn(one, two, dead);
  } catch (e) {
    console.error(c.nodes.map((n) => tail(n, 40)).join("\n"));
    throw e;
  } finally {
    await c.close();
  }
}

/** Starts `id` of `workflow` through `base` (that server owns it). */
export async function start(base: string, workflow: string, id: string): Promise<void> {
  const end = Date.now() + 10_000;
  for (;;) {
    const r = await api(base).post("/v1/executions", { workflow, execution_id: id, input: { id } });
    if (r.status === 201) return;
    // The other server may not have read the definition yet.
    if (r.status === 404 && Date.now() < end) {
      await new Promise((r) => setTimeout(r, 100));
      continue;
    }
    assert.fail(`start ${id} through ${base}: ${r.status} ${JSON.stringify(r.body)}`);
  }
}

/** Starts `id` of SpreadSteps through `base` (that server owns it) and waits until it completed. */
export async function runOne(base: string, id: string): Promise<void> {
  await start(base, "SpreadSteps", id);
  const w = await api(base).get(`/v1/executions/${id}/wait?timeout_s=30`);
  assert.equal(w.body.status, "completed", `${id}: ${JSON.stringify(w.body)}`);
}

/**
 * Waits until every server holds a worker's long poll open (`orbit_worker_polls_open`): from then
 * on each has a slot of its own for the tasks of the executions it owns. Before it, a task whose
 * owner has no slot polling yet is any server's to claim at once.
 */
export async function waitForPolls(nodes: NodeProcess[], timeoutMs = 30_000): Promise<void> {
  for (const n of nodes) {
    await waitFor(
      async () => await n.metric("orbit_worker_polls_open") > 0,
      `${n.id} to hold a worker's poll`,
      timeoutMs,
      50,
    );
  }
}

/**
 * Every server was polled, and results stayed on the servers that own their executions: at most
 * one task's commands forwarded between them in all. One is allowed: a task its owner queued while none
 * of its slots was in a poll (the slot that ran the step before still on its way back, on a
 * loaded host) is the other server's to claim once the owner's 200 ms head start has passed
 * (`FOREIGN_TASK_DELAY_MS`), and its result then goes through the other server. A worker whose
 * slots do not spread has every task of the other server's executions forwarded (ten of twenty
 * in these tests).
 */
export async function assertPolledAndNothingForwarded(nodes: NodeProcess[]): Promise<void> {
  // One such claim shows as two commands: its dispatch and its result.
  const forwarded: string[] = [];
  for (const n of nodes) {
    assert.ok(await n.metric("orbit_poll_latency_seconds_count") > 0, `${n.id}: no polls`);
    for (const kind of ["complete", "fail", "dispatched"]) {
      const k = await n.metric("orbit_commands_forwarded_total", `{kind="${kind}"}`);
      for (let i = 0; i < k; i++) forwarded.push(`${n.id} forwarded ${kind}`);
    }
  }
  assert.ok(forwarded.length <= 2, forwarded.join(", "));
}
