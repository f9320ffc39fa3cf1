/**
 * `GET /v1/executions/{id}/wait` in shared mode (reference page: reads work on every server,
 * "wait wakes on NOTIFY orbit_done"), in process on a real PostgreSQL: a wait held by the node
 * that ran the execution must follow it when that node lets it go (another node took it over),
 * and answer as soon as the new owner ends it, not when the wait's own timeout runs out.
 */
import assert from "node:assert/strict";
import { migratedDatabase } from "../tests/support/pg.ts";
import { WAITER_WORKFLOW } from "../tests/support/orders.ts";
import { deployAndStart, startedNode, takeOverFrom } from "../tests/support/in_process_node.ts";
import { waitFor } from "../tests/support/server.ts";
import { postgresClient } from "../lib/store/postgres.ts";

Deno.test({
  name: "shared: a wait on a node that lets the execution go answers when the new owner ends it",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const url = await migratedDatabase();
    const a = await startedNode(url, "node-a");
    const b = await startedNode(url, "node-b");
    const sql = postgresClient(url, { max: 1, applicationName: "orbit-test" });
    try {
      await deployAndStart(a, [WAITER_WORKFLOW], {
        workflow: "Waiter",
        execution_id: "wl-1",
        input: {},
      });
      // A client waits on node A, which runs wl-1.
      const t0 = performance.now();
      const waiting = a.call("GET", "/v1/executions/wl-1/wait?timeout_s=30");
      // Node B takes wl-1 over, as from a node that was silent past the node timeout.
      assert.equal(await takeOverFrom(sql, "node-a", b, ["wl-1"]), 1);
      // Node A's next append is fenced: it lets wl-1 go.
      const fenced = await a.call("POST", "/v1/executions/wl-1/signals/go", { payload: 0 });
      assert.equal(fenced.status, 500, JSON.stringify(fenced.body));
      assert.match(fenced.body.error.message, /fenced/);
      await waitFor(
        async () => (await a.call("GET", "/v1/health")).body.owned_executions === 0,
        "node A to let wl-1 go",
        10_000,
      );
      // The new owner ends it.
      const sent = await b.call("POST", "/v1/executions/wl-1/signals/go", { payload: 7 });
      assert.equal(sent.status, 200, JSON.stringify(sent.body));
      const r = await waiting;
      const ms = performance.now() - t0;
      assert.equal(r.status, 200, JSON.stringify(r.body));
      assert.equal(r.body.status, "completed", JSON.stringify(r.body));
      assert.deepEqual(r.body.output, 7);
      // NOTIFY orbit_done, or the one-second re-read at worst; not the 30 s of the wait.
      assert.ok(ms < 10_000, `the wait answered after ${Math.round(ms)} ms`);
    } finally {
      await sql.end({ timeout: 1 });
      await b.n.stop();
      await a.n.stop();
    }
  },
});

/** A counter of a node's /v1/metrics, summed over its lines that carry `labels`. */
async function metric(
  node: {
    n: { fetch: (req: Request, info: Deno.ServeHandlerInfo) => Response | Promise<Response> };
  },
  name: string,
  labels: string,
): Promise<number> {
  const res = await node.n.fetch(
    new Request("http://node/v1/metrics"),
    {} as Deno.ServeHandlerInfo,
  );
  let sum = 0;
  for (const line of (await res.text()).split("\n")) {
    if (line.startsWith(`${name}{`) && line.includes(labels)) sum += Number(line.split(" ").at(-1));
  }
  return sum;
}

Deno.test({
  name: "shared: an execution's end is announced (orbit_done) only when a client waits for it " +
    "on another server, which announced its wait (orbit_wait)",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const url = await migratedDatabase();
    const a = await startedNode(url, "node-a");
    const b = await startedNode(url, "node-b");
    const doneSent = () => metric(a, "orbit_notifications_sent_total", 'channel="orbit_done"');
    try {
      await deployAndStart(a, [WAITER_WORKFLOW], {
        workflow: "Waiter",
        execution_id: "wd-1",
        input: {},
      });
      // A client waits on the owner, which holds wd-1: woken in memory, nothing announced.
      const here = a.call("GET", "/v1/executions/wd-1/wait?timeout_s=30");
      assert.equal(
        (await a.call("POST", "/v1/executions/wd-1/signals/go", { payload: 1 })).status,
        200,
      );
      assert.equal((await here).body.status, "completed");

      // A client waits on node B, which does not hold wd-2: B announces the wait, A its end.
      const start = await a.call("POST", "/v1/executions", {
        workflow: "Waiter",
        execution_id: "wd-2",
        input: {},
      });
      assert.equal(start.status, 201, JSON.stringify(start.body));
      const there = b.call("GET", "/v1/executions/wd-2/wait?timeout_s=30");
      await waitFor(
        async () =>
          (await metric(a, "orbit_notifications_received_total", 'channel="orbit_wait"')) >= 1,
        "node A to hear of B's wait",
        10_000,
      );
      assert.equal(
        (await a.call("POST", "/v1/executions/wd-2/signals/go", { payload: 2 })).status,
        200,
      );
      const r = await there;
      assert.equal(r.body.status, "completed", JSON.stringify(r.body));
      assert.deepEqual(r.body.output, 2);
      await waitFor(
        async () =>
          (await metric(b, "orbit_notifications_received_total", 'channel="orbit_done"')) >= 1,
        "node B to hear of wd-2's end",
        10_000,
      );
      assert.equal(await doneSent(), 1, "one orbit_done: wd-2's, not wd-1's");
    } finally {
      await b.n.stop();
      await a.n.stop();
    }
  },
});
