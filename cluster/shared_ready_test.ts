/**
 * `/v1/ready` and `/v1/health` of a shared node answer in time while the nodes' list cannot be
 * read (in process, on a real PostgreSQL): the list comes from the request connections, and a
 * load balancer's check gives up after about a second, long before a statement that never
 * answers fails. Here `orbit_nodes` is locked by another session for 4 s, which holds both the
 * list's read and the heartbeat: the checks answer within the wait, from the last list read,
 * with the heartbeat's age growing; once the lock goes, a fresh list again.
 */
import assert from "node:assert/strict";
import { lockTable, sharedPostgres } from "../tests/support/pg.ts";
import { startedNode } from "../tests/support/in_process_node.ts";
import { waitFor } from "../tests/support/server.ts";

const NODE_TIMEOUT_MS = 2000;
const LOCK_MS = 4000;

Deno.test({
  name: "shared: /v1/ready and /v1/health answer within a second while the nodes' list " +
    "cannot be read, from the last list",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const url = await (await sharedPostgres()).createDatabase();
    const a = await startedNode(url, "node-a", { nodeTimeoutMs: NODE_TIMEOUT_MS });
    try {
      const before = await a.call("GET", "/v1/ready");
      assert.equal(before.status, 200, JSON.stringify(before.body));
      assert.deepEqual(before.body.nodes.map((x: { node_id: string }) => x.node_id), ["node-a"]);

      const lock = await lockTable(url, "orbit_nodes", LOCK_MS);
      const lockedAt = performance.now();
      const seen: { status: number; age: number }[] = [];
      for (const path of ["/v1/ready", "/v1/health", "/v1/ready", "/v1/health", "/v1/ready"]) {
        const r = await a.call("GET", path);
        if (performance.now() - lockedAt >= LOCK_MS) break;
        // The list's read waits for the lock: the answer comes from the last list, in time.
        assert.ok(r.ms < 1000, `${path} took ${Math.round(r.ms)} ms under the lock`);
        const me = r.body.nodes.find((x: { node_id: string }) => x.node_id === "node-a");
        assert.ok(me, JSON.stringify(r.body));
        if (path === "/v1/ready") {
          // Ready while the last heartbeat is younger than the node timeout, 503 after.
          assert.equal(r.status, r.body.ready ? 200 : 503);
          seen.push({ status: r.status, age: me.heartbeat_age_ms });
        } else {
          assert.equal(r.status, 200);
        }
      }
      assert.ok(seen.length >= 2, `only ${seen.length} checks inside the lock`);
      // The age is advanced by the time since the list was read, not frozen.
      assert.ok(
        seen.at(-1)!.age > seen[0]!.age,
        `heartbeat ages under the lock: ${JSON.stringify(seen)}`,
      );
      await lock.released;
      // The lock gone, the heartbeat and the list are fresh again.
      await waitFor(
        async () => {
          const r = await a.call("GET", "/v1/ready");
          const me = r.body.nodes.find((x: { node_id: string }) => x.node_id === "node-a");
          return r.status === 200 && me && me.heartbeat_age_ms < NODE_TIMEOUT_MS;
        },
        "ready again after the lock",
        10_000,
        100,
      );
    } finally {
      await a.n.stop();
    }
  },
});
