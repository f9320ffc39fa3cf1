/**
 * Child workflows in shared mode (in process, two nodes on a real PostgreSQL): a child is owned
 * with its root, moves with its tree on a takeover, and hands its result to its parent on the
 * new owner; a signal to the child through either node reaches it.
 */
import assert from "node:assert/strict";
import postgres from "postgres";
import { sharedPostgres } from "../tests/support/pg.ts";
import { WAITER_WORKFLOW } from "../tests/support/orders.ts";
import { deployAndStart, startedNode } from "../tests/support/in_process_node.ts";
import { waitFor } from "../tests/support/server.ts";

const PARENT_WORKFLOW = {
  ir: "orbit-ir/2",
  name: "Parent",
  version: "1.0.0",
  steps: [
    { id: "w", child: { workflow: "Waiter" } },
    { id: "r", return: { child: "{% $steps.w %}" } },
  ],
};

Deno.test({
  name: "shared: a child is owned with its root, taken over with it, and completes its parent " +
    "on the new owner",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const url = await (await sharedPostgres()).createDatabase();
    const a = await startedNode(url, "node-a");
    const b = await startedNode(url, "node-b");
    const sql = postgres(url, { max: 1, onnotice: () => {} });
    const owners = async () =>
      (await sql<{ execution_id: string; root_id: string; node_id: string; epoch: number }[]>`
        SELECT execution_id, root_id, node_id, epoch::int FROM orbit_owners
        ORDER BY execution_id`).map((o) => [o.execution_id, o.root_id, o.node_id, o.epoch]);
    try {
      await deployAndStart(a, [WAITER_WORKFLOW, PARENT_WORKFLOW], {
        workflow: "Parent",
        execution_id: "p-1",
        input: {},
      });
      await waitFor(
        async () => {
          const r = await b.call("GET", "/v1/executions/p-1.w");
          return r.status === 200 && r.body.status === "running";
        },
        "the child to start",
        10_000,
      );
      assert.deepEqual(await owners(), [
        ["p-1", "p-1", "node-a", 1],
        ["p-1.w", "p-1", "node-a", 1],
      ]);
      // Node A stops without leaving: node B takes the tree over after the node timeout.
      await a.n.abort();
      await waitFor(
        async () => {
          const o = await owners();
          return o.length === 2 && o.every((x) => x[2] === "node-b") ? o : null;
        },
        "node B to take the tree over",
        15_000,
      );
      assert.deepEqual(await owners(), [
        ["p-1", "p-1", "node-b", 2],
        ["p-1.w", "p-1", "node-b", 2],
      ]);
      const sig = await b.call("POST", "/v1/executions/p-1.w/signals/go", {
        payload: { n: 7 },
      });
      assert.equal(sig.status, 200, JSON.stringify(sig.body));
      const done = await waitFor(
        async () => {
          const r = await b.call("GET", "/v1/executions/p-1");
          return r.body.status === "completed" ? r.body : null;
        },
        "the parent to complete",
        10_000,
      );
      assert.deepEqual(done.output, { child: { n: 7 } });
      assert.deepEqual(await owners(), []);
      const h = await b.call("GET", "/v1/executions/p-1/history");
      const types = (h.body.events as { type: string }[]).map((e) => e.type);
      assert.equal(types.filter((t) => t === "ChildStarted").length, 1, types.join(","));
    } finally {
      await sql.end({ timeout: 1 });
      await b.n.stop();
    }
  },
});

Deno.test({
  name: "shared: a child whose parent was cancelled by a node that stopped before the child's " +
    "cancel committed is cancelled by the node that takes the tree over",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const url = await (await sharedPostgres()).createDatabase();
    const a = await startedNode(url, "node-a");
    const b = await startedNode(url, "node-b");
    const sql = postgres(url, { max: 1, onnotice: () => {} });
    try {
      await deployAndStart(a, [WAITER_WORKFLOW, PARENT_WORKFLOW], {
        workflow: "Parent",
        execution_id: "p-2",
        input: {},
      });
      await waitFor(
        async () => (await b.call("GET", "/v1/executions/p-2.w")).body.status === "running",
        "the child to start",
        10_000,
      );
      // The window: the parent's cancel commits on A, and A stops before the child's does
      // (here the child's cancel fails on A, then A stops without leaving).
      const ex = a.n.runtime.executions;
      const cancel = ex.cancel.bind(ex);
      ex.cancel = (id: string, reason: string) =>
        id === "p-2.w" ? Promise.reject(new Error("the process stopped")) : cancel(id, reason);
      const c = await b.call("POST", "/v1/executions/p-2/cancel", { reason: "stop" });
      assert.equal(c.status, 200, JSON.stringify(c.body));
      assert.equal(c.body.status, "cancelled");
      await a.n.abort();
      const child = await waitFor(
        async () => {
          const r = await b.call("GET", "/v1/executions/p-2.w");
          return r.body.status === "cancelled" ? r.body : null;
        },
        "node B to take the tree over and cancel the child",
        20_000,
      );
      assert.equal(child.parent_id, "p-2");
      const [o] = await sql`SELECT count(*)::int AS n FROM orbit_owners`;
      assert.equal(o!.n, 0);
    } finally {
      await sql.end({ timeout: 1 });
      await b.n.stop();
    }
  },
});

Deno.test({
  name: "shared: a cancel of a tree's root sent to another node cancels every descendant on " +
    "the owner, and a depth past --max-child-depth fails with CHILD_LIMIT",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const url = await (await sharedPostgres()).createDatabase();
    const a = await startedNode(url, "node-a");
    const b = await startedNode(url, "node-b");
    // Three levels: Top → Mid → Waiter.
    const MID = {
      ir: "orbit-ir/2",
      name: "Mid",
      version: "1.0.0",
      steps: [{ id: "w", child: { workflow: "Waiter" } }],
    };
    const TOP = { ...MID, name: "Top", steps: [{ id: "m", child: { workflow: "Mid" } }] };
    const SELF = { ...MID, name: "Self", steps: [{ id: "s", child: { workflow: "Self" } }] };
    try {
      await deployAndStart(a, [WAITER_WORKFLOW, MID, TOP, SELF], {
        workflow: "Top",
        execution_id: "t-1",
        input: {},
      });
      await waitFor(
        async () => (await b.call("GET", "/v1/executions/t-1.m.w")).body.status === "running",
        "the grandchild to start",
        10_000,
      );
      const c = await b.call("POST", "/v1/executions/t-1/cancel", { reason: "stop" });
      assert.equal(c.status, 200, JSON.stringify(c.body));
      assert.equal(c.body.status, "cancelled");
      for (const id of ["t-1.m", "t-1.m.w"]) {
        await waitFor(
          async () => (await b.call("GET", `/v1/executions/${id}`)).body.status === "cancelled",
          `${id} to be cancelled`,
          10_000,
        );
      }
      // A workflow that starts itself stops at the default depth (32) on shared nodes too.
      const r = await b.call("POST", "/v1/executions", { workflow: "Self", execution_id: "s" });
      assert.equal(r.status, 201, JSON.stringify(r.body));
      const root = await waitFor(
        async () => {
          const x = await b.call("GET", "/v1/executions/s");
          return x.body.status === "failed" ? x.body : null;
        },
        "the self-starting root to fail",
        30_000,
      );
      assert.equal(root.error.code, "CHILD_FAILED");
      const deepest = await b.call("GET", `/v1/executions/s${".s".repeat(32)}`);
      assert.equal(deepest.body.error.code, "CHILD_LIMIT");
    } finally {
      await a.n.stop();
      await b.n.stop();
    }
  },
});
