/**
 * A request forwarded to the owner's inbox and not answered within 10 s (reference page,
 * "Shared mode": "the receiving server waits up to 10 seconds for the owner's reply") is
 * withdrawn by the server that received it. In process, on a real PostgreSQL:
 *
 * - the withdrawal wins (its DELETE removes the entry): the answer is 503 OWNER_UNAVAILABLE,
 *   "nothing was applied", and it is true — the owner's commit of the entry, held back until
 *   then, writes nothing; a retry is applied once;
 * - the owner took the entry (it is gone when the withdrawal comes) but no reply arrives: the
 *   answer does not claim that nothing was applied (500 STORAGE_ERROR, "may have been applied").
 */
import assert from "node:assert/strict";
import postgres from "postgres";
import { sharedPostgres } from "../tests/support/pg.ts";
import { WAITER_WORKFLOW } from "../tests/support/orders.ts";
import { deployAndStart, startedNode } from "../tests/support/in_process_node.ts";
import { waitFor } from "../tests/support/server.ts";

/** Longer than any wait here: no takeover while a node is silent on purpose. */
const NODE_TIMEOUT_MS = 60_000;

async function historyTypes(
  node: Awaited<ReturnType<typeof startedNode>>,
  id: string,
): Promise<string[]> {
  const h = await node.call("GET", `/v1/executions/${id}/history`);
  assert.equal(h.status, 200, JSON.stringify(h.body));
  return (h.body.events as { type: string }[]).map((e) => e.type);
}

Deno.test({
  name: "shared: a forwarded signal withdrawn after 10 s is not applied by the owner's late " +
    "commit, and its retry is applied once",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const url = await (await sharedPostgres()).createDatabase();
    const a = await startedNode(url, "node-a", { nodeTimeoutMs: NODE_TIMEOUT_MS });
    const b = await startedNode(url, "node-b", { nodeTimeoutMs: NODE_TIMEOUT_MS });
    const blocker = postgres(url, { max: 1, onnotice: () => {} });
    let release!: () => void;
    const released = new Promise<void>((r) => release = r);
    try {
      await deployAndStart(a, [WAITER_WORKFLOW], {
        workflow: "Waiter",
        execution_id: "wd-1",
        input: {},
      });
      // Appends wait behind this lock (reads pass): node A takes the entry and its commit
      // waits until after node B has given up and withdrawn it.
      let locked!: () => void;
      const isLocked = new Promise<void>((r) => locked = r);
      const held = blocker.begin(async (tx) => {
        await tx.unsafe("LOCK TABLE execution_events IN EXCLUSIVE MODE");
        locked();
        await released;
      });
      await isLocked;
      const first = await b.call("POST", "/v1/executions/wd-1/signals/go", {
        payload: { n: 1 },
      });
      assert.equal(first.status, 503, JSON.stringify(first.body));
      assert.equal(first.body.error.code, "OWNER_UNAVAILABLE");
      assert.match(first.body.error.message, /nothing was applied, retry/);
      release();
      await held;
      // The retry: applied once, with its own payload.
      const retry = await b.call("POST", "/v1/executions/wd-1/signals/go", {
        payload: { n: 2 },
      });
      assert.equal(retry.status, 200, JSON.stringify(retry.body));
      const done = await waitFor(
        async () => {
          const r = await a.call("GET", "/v1/executions/wd-1");
          return r.body.status === "completed" ? r.body : null;
        },
        "wd-1 to complete",
        10_000,
      );
      assert.deepEqual(done.output, { n: 2 });
      const types = await historyTypes(a, "wd-1");
      assert.equal(types.filter((t) => t === "SignalReceived").length, 1, types.join(","));
      const [left] = await blocker`SELECT count(*)::int AS n FROM orbit_inbox`;
      assert.equal(left!.n, 0);
    } finally {
      release();
      await blocker.end({ timeout: 1 });
      await b.n.stop();
      await a.n.stop();
    }
  },
});

Deno.test({
  name: "shared: a forwarded signal whose entry the owner took but whose reply never came is " +
    "not answered as unapplied",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const url = await (await sharedPostgres()).createDatabase();
    const a = await startedNode(url, "node-a", { nodeTimeoutMs: NODE_TIMEOUT_MS });
    const b = await startedNode(url, "node-b", { nodeTimeoutMs: NODE_TIMEOUT_MS });
    const sql = postgres(url, { max: 1, onnotice: () => {} });
    try {
      await deployAndStart(a, [WAITER_WORKFLOW], {
        workflow: "Waiter",
        execution_id: "wd-2",
        input: {},
      });
      // Node A stops answering (no leave: it still owns wd-2 for the node timeout).
      await a.n.abort();
      const pending = b.call("POST", "/v1/executions/wd-2/signals/go", { payload: { n: 1 } });
      // The entry leaves the inbox as an owner's commit of it would, and no reply comes.
      await waitFor(
        async () => {
          const gone = await sql`DELETE FROM orbit_inbox WHERE execution_id = 'wd-2' RETURNING seq`;
          return gone.length > 0;
        },
        "the forwarded entry",
        5_000,
        20,
      );
      const r = await pending;
      assert.equal(r.status, 500, JSON.stringify(r.body));
      assert.equal(r.body.error.code, "STORAGE_ERROR");
      assert.match(r.body.error.message, /may have been applied/);
      assert.doesNotMatch(r.body.error.message, /nothing was applied/);
    } finally {
      await sql.end({ timeout: 1 });
      await b.n.stop();
    }
  },
});
