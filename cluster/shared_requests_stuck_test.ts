/**
 * A statement of a shared node's requests' pool (claims, forwards, sessions) that gets no answer
 * fails after requestsStuckMs (three node timeouts, 10 s at least), not after the store's
 * 30 s, and the pool goes on on new connections. Here `orbit_sessions` is locked by another
 * session for longer than that, so a worker's registration waits (in process, on a real
 * PostgreSQL).
 */
import assert from "node:assert/strict";
import { lockTable, sharedPostgres } from "../tests/support/pg.ts";
import { startedNode } from "../tests/support/in_process_node.ts";
import { requestsStuckMs } from "./shared/placement.ts";

const NODE_TIMEOUT_MS = 2000;
const LOCK_MS = 18_000;

Deno.test("shared: the requests' pool limit is three node timeouts, 10 s at least", () => {
  assert.equal(requestsStuckMs(2000), 10_000);
  assert.equal(requestsStuckMs(3000), 10_000);
  assert.equal(requestsStuckMs(5000), 15_000);
});

Deno.test({
  name: "shared: a requests' statement without an answer fails after 10 s, not 30, " +
    "and the pool works again",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const url = await (await sharedPostgres()).createDatabase();
    const a = await startedNode(url, "node-a", { nodeTimeoutMs: NODE_TIMEOUT_MS });
    const register = () =>
      a.call("POST", "/v1/workers/register", {
        worker_id: "w-1",
        tasks: [{ name: "orders.validate", contract: "1" }],
        concurrency: 1,
      });
    try {
      const lock = await lockTable(url, "orbit_sessions", LOCK_MS);
      const r = await register();
      assert.equal(r.status, 500, JSON.stringify(r.body));
      assert.equal(r.body.error.code, "STORAGE_ERROR");
      assert.match(r.body.error.message, /no answer from PostgreSQL within 10 s/);
      const limit = requestsStuckMs(NODE_TIMEOUT_MS);
      // WatchedClient looks every limit / 3: failed between the limit and that much later.
      assert.ok(
        r.ms >= limit - 50 && r.ms < limit + limit / 3 + 2000,
        `failed after ${Math.round(r.ms)} ms (the lock held ${LOCK_MS} ms)`,
      );
      await lock.released;
      // New connections: a registration goes through once the lock is gone.
      const again = await register();
      assert.equal(again.status, 200, JSON.stringify(again.body));
    } finally {
      await a.n.stop();
    }
  },
});
