/**
 * Issue 36, shared mode: a worker served by node B claims the first tasks of two executions
 * owned by node A; A records both dispatches (the claims' inbox entries) in one group commit,
 * which lands and then reports a lost connection; each append, retried alone, finds its inbox
 * entry gone — deleted by the batch that landed. Before the fix that answer meant "nothing was
 * written": A's memory stayed behind a StepDispatched in its history, the worker's results were
 * answered `{"accepted": false}`, and both executions waited for ever. Now the outcome is the
 * batch's, unknown: A resolves it and rebuilds from the history, accepts the results, and both
 * orders go on to complete, each history whole.
 */
import assert from "node:assert/strict";
import { sharedPostgres } from "../tests/support/pg.ts";
import { ORDER_STEPS, ORDER_WORKFLOW, orderInput } from "../tests/support/orders.ts";
import { startedNode } from "../tests/support/in_process_node.ts";
import { type FaultyStore, faultyStore } from "../tests/support/faulty_store.ts";
import { waitFor } from "../tests/support/server.ts";
import { historyProblems } from "../lib/store/history_check.ts";
import type { HistoryEvent } from "../lib/engine/events.ts";

const NODE_TIMEOUT_MS = 60_000;

Deno.test({
  name: "shared: a group commit of claimed dispatches that lands and reports an error leaves " +
    "the owner level with its history, and the workers' results are accepted",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const url = await (await sharedPostgres()).createDatabase();
    let store!: FaultyStore;
    const a = await startedNode(url, "node-a", {
      nodeTimeoutMs: NODE_TIMEOUT_MS,
      store: (s) => (store = faultyStore(s)),
    });
    const b = await startedNode(url, "node-b", { nodeTimeoutMs: NODE_TIMEOUT_MS });
    try {
      assert.equal((await a.call("POST", "/v1/workflows", ORDER_WORKFLOW)).status, 201);
      const ids = ["ad-1", "ad-2"];
      for (const id of ids) {
        const r = await a.call("POST", "/v1/executions", {
          workflow: "OrderProcessing",
          execution_id: id,
          input: orderInput(id),
        });
        assert.equal(r.status, 201, JSON.stringify(r.body));
      }
      // A's first batch with both dispatches lands and fails; the appends alone then find
      // their inbox entries gone.
      let hit = false;
      store.plan = {
        commit: (_n, items) => {
          const dispatches = items.filter((i) => i.events.some((e) => e.type === "StepDispatched"));
          if (hit || dispatches.length < 2) return "ok";
          hit = true;
          return "after";
        },
      };
      const tasks = (ORDER_WORKFLOW.steps as { task?: string }[]).flatMap((s) =>
        s.task ? [{ name: s.task, contract: "1" }] : []
      );
      const reg = await b.call("POST", "/v1/workers/register", {
        worker_id: "w",
        tasks,
        concurrency: 2,
      });
      assert.equal(reg.status, 200, JSON.stringify(reg.body));
      const session = reg.body.session_id as string;
      // The worker polls B until it holds both first tasks.
      const got = new Map<string, { token: string; input: unknown }>();
      await waitFor(
        async () => {
          const p = await b.call("POST", "/v1/workers/poll", {
            session_id: session,
            max_tasks: 2 - got.size,
            wait_s: 1,
          });
          for (const t of p.body.tasks ?? []) got.set(t.execution_id, t);
          return got.size === 2;
        },
        "both first tasks at B",
        10_000,
      );
      await waitFor(() => hit, "the group commit of both dispatches at A", 10_000);
      store.plan = {};
      // The results, through B (forwarded to A), retried on 5xx as the SDKs do.
      for (const [id, t] of got) {
        const r = await waitFor(
          async () => {
            const c = await b.call("POST", "/v1/tasks/complete", {
              token: t.token,
              output: { order_id: id, total: 19 },
            });
            return c.status < 500 ? c : null;
          },
          `the result of ${id}`,
          15_000,
        );
        assert.equal(r.status, 200, JSON.stringify(r.body));
        assert.equal(r.body.accepted, true, `${id}: ${JSON.stringify(r.body)}`);
      }
      // The rest of both orders, served the same way, until both complete.
      await waitFor(
        async () => {
          const p = await b.call("POST", "/v1/workers/poll", {
            session_id: session,
            max_tasks: 2,
            wait_s: 0.2,
          });
          for (const t of p.body.tasks ?? []) {
            await b.call("POST", "/v1/tasks/complete", {
              token: t.token,
              output: t.step === "validate" ? { order_id: t.execution_id, total: 19 } : {},
            });
          }
          for (const id of ids) {
            if ((await a.call("GET", `/v1/executions/${id}`)).body.status !== "completed") {
              return false;
            }
          }
          return true;
        },
        "both orders to complete",
        30_000,
      );
      for (const id of ids) {
        const row = (await a.call("GET", `/v1/executions/${id}`)).body;
        const h = await a.call("GET", `/v1/executions/${id}/history?limit=1000`);
        const events = h.body.events as HistoryEvent[];
        assert.deepEqual(historyProblems(row, events), [], id);
        for (const step of ORDER_STEPS) {
          const n = events.filter((e) =>
            e.type === "StepSucceeded" && (e as { step: string }).step === step
          ).length;
          assert.equal(n, 1, `${id}: ${n} StepSucceeded for ${step}`);
        }
      }
    } finally {
      await a.n.stop();
      await b.n.stop();
    }
  },
});
