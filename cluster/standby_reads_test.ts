/**
 * Standby mode, in process on a real PostgreSQL: a leader past its lease (paused, or its
 * election session lost, and it has not noticed yet) may have been replaced and its executions
 * moved on by a successor; its memory then answers no query or `/pending` (they replay the
 * history, lib/executions/executions.ts currentStateOf), as in shared mode past the node timeout.
 */
import assert from "node:assert/strict";
import { StandbyNode } from "./standby_node.ts";
import { LEASE_MS } from "./standby.ts";
import { Runtime } from "../lib/runtime.ts";
import { openStore } from "../lib/store/open.ts";
import { migratedDatabase } from "../tests/support/pg.ts";
import { NOTES_WORKFLOW } from "../tests/support/orders.ts";
import { waitFor } from "../tests/support/server.ts";
import { appCaller } from "../tests/support/in_process_node.ts";
import { createApp } from "../routes/app.ts";

Deno.test({
  name: "standby: a leader past its lease answers queries from the history, not from memory",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const url = await migratedDatabase();
    let skew = 0;
    const node: StandbyNode = new StandbyNode({
      url,
      nodeId: "a",
      openStore: (term) => openStore(url, term === null ? {} : { fence: () => term }),
      runtime: (store, readOnly) =>
        new Runtime(store, {
          sessionTimeoutMs: 60_000,
          maxActiveExecutions: null,
          cluster: node,
          readOnly,
        }),
      app: (rt) => createApp(rt, { token: null, maxBodyBytes: 1 << 20, ui: false, gate: node }),
      now: () => Date.now() + skew,
    });
    const call = appCaller(node.fetch);
    await node.open();
    try {
      node.start(null);
      await waitFor(() => node.role() === "leader", "node a to lead");
      assert.equal((await call("POST", "/v1/workflows", NOTES_WORKFLOW)).status, 201);
      const started = await call("POST", "/v1/executions", {
        workflow: "Notes",
        execution_id: "sb-1",
      });
      assert.equal(started.status, 201, JSON.stringify(started.body));
      assert.equal(
        (await call("POST", "/v1/executions/sb-1/signals/note", { payload: "a" })).status,
        200,
      );
      const ex = node.runtime.executions;
      assert.ok(ex.memoryCurrent());
      assert.ok(ex.currentStateOf("sb-1"), "memory answers while the lease holds");
      // The lease runs out (as after a pause): memory still holds sb-1, but answers nothing.
      skew += LEASE_MS + 1000;
      assert.equal(node.serving(), false);
      assert.ok(ex.stateOf("sb-1"));
      assert.equal(ex.memoryCurrent(), false);
      assert.equal(ex.currentStateOf("sb-1"), undefined);
      // A query still answers, from the history.
      const q = await call("GET", "/v1/executions/sb-1/queries/notes");
      assert.equal(q.status, 200, JSON.stringify(q.body));
      assert.deepEqual(q.body, { result: ["a"] });
    } finally {
      await node.stop();
    }
  },
});
