/**
 * Shared mode, in process on a real PostgreSQL: `/v1/health`'s `worker_sessions` counts the
 * cluster's sessions (`orbit_sessions`), as `GET /v1/workers` lists them: a worker registered
 * through one server is served by every one, so each server reports it.
 */
import assert from "node:assert/strict";
import { migratedDatabase } from "../tests/support/pg.ts";
import { startedNode } from "../tests/support/in_process_node.ts";

Deno.test({
  name: "shared: every server's health counts the worker sessions of the cluster",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const url = await migratedDatabase();
    const a = await startedNode(url, "node-a");
    const b = await startedNode(url, "node-b");
    try {
      for (const w of ["w-1", "w-2"]) {
        const r = await a.call("POST", "/v1/workers/register", {
          worker_id: w,
          tasks: [{ name: "t", contract: "1" }],
          concurrency: 1,
        });
        assert.equal(r.status, 200, JSON.stringify(r.body));
      }
      for (const n of [a, b]) {
        const h = await n.call("GET", "/v1/health");
        assert.equal(h.body.worker_sessions, 2, JSON.stringify(h.body));
        const list = await n.call("GET", "/v1/workers");
        assert.equal(list.body.workers.length, 2, JSON.stringify(list.body));
      }
    } finally {
      await b.n.stop();
      await a.n.stop();
    }
  },
});
