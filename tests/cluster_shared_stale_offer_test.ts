/**
 * Shared mode: a task row queued before its attempt turned uncertain (a dispatch whose commit
 * failed but landed puts its row back on the queue) is not the unit the step waits for. When
 * another server claims it, the owner refuses the offer (the worker hears cancel) instead of
 * recording a redelivery the worker was told was a first delivery; the current row goes out
 * with `redelivery: true`. Found by the chaos suite (shared mode, black-holed database link).
 */
import assert from "node:assert/strict";
import postgres from "postgres";
import { api, waitFor } from "./support/server.ts";
import { sharedPostgres } from "./support/pg.ts";
import { startSharedCluster } from "./support/shared_cluster.ts";

const WORKFLOW = {
  ir: "orbit-ir/1",
  name: "Stale",
  version: "1.0.0",
  steps: [{ id: "a", task: "t.stale", contract: "1", input: "{% $input %}" }],
};

Deno.test({
  name: "shared: a stale queued offer of an uncertain attempt is refused, not dispatched",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const db = await (await sharedPostgres()).createDatabase();
    const c = await startSharedCluster({ db, nodes: 2, proxy: false });
    const sql = postgres(db, { max: 1, onnotice: () => {} });
    try {
      const [owner, other] = c.nodes as [typeof c.nodes[0], typeof c.nodes[0]];
      const a = api(owner.url);
      const b = api(other.url);
      assert.equal((await a.post("/v1/workflows", WORKFLOW)).status, 201);
      const reg = (worker_id: string, via: typeof a) =>
        via.post("/v1/workers/register", {
          worker_id,
          runtime: "typescript",
          tasks: [{ name: "t.stale", contract: "1" }],
          concurrency: 1,
        }).then((r) => r.body.session_id as string);
      const s1 = await reg("w-gone", a);
      const started = await a.post("/v1/executions", {
        workflow: "Stale",
        execution_id: "stale-1",
        input: 1,
      });
      assert.equal(started.status, 201);
      const first = await a.post("/v1/workers/poll", { session_id: s1, wait_s: 10 });
      assert.equal(first.body.tasks.length, 1, JSON.stringify(first.body));
      const lost = first.body.tasks[0];
      // Its worker goes silent: after a session timeout the attempt is uncertain and queued again.
      const history = async () => (await a.get("/v1/executions/stale-1/history")).body.events;
      await waitFor(
        async () =>
          (await history()).some((e: { type: string }) => e.type === "StepAttemptUncertain"),
        "the attempt to turn uncertain",
        30_000,
        200,
      );
      const [cur] = await sql`SELECT run_id, unit, payload FROM orbit_tasks
        WHERE execution_id = 'stale-1' AND state = 'queued'`;
      assert.ok(cur, "the redelivery is queued");
      assert.equal(cur.payload.redelivery, true);
      const staleUnit = String(cur.unit).replace(/\/1$/, "/0");
      // What a dispatch that failed but landed does: its row goes back on the queue.
      const back = await sql`UPDATE orbit_tasks SET state = 'queued', token = NULL,
          claimed_by = NULL, session_id = NULL, claimed_ms = NULL, enqueued_ms = 0
        WHERE unit = ${staleUnit} RETURNING payload`;
      assert.equal(back.length, 1, "the first delivery's row");
      assert.equal(back[0]!.payload.redelivery, false);
      // Another server claims the stale row for a live worker and forwards the offer.
      const s2 = await reg("w-live", b);
      const offer = await b.post("/v1/workers/poll", { session_id: s2, wait_s: 10 });
      assert.equal(offer.body.tasks.length, 1);
      const stale = offer.body.tasks[0];
      assert.equal(stale.redelivery, false);
      // The owner refuses it: the worker hears cancel, and the history never dispatches it.
      await waitFor(
        async () =>
          (await b.post("/v1/workers/heartbeat", { session_id: s2, tokens: [stale.token] }))
            .body.cancel?.includes(stale.token),
        "the stale offer to be cancelled",
        30_000,
        200,
      );
      assert.equal(
        (await history()).some((e: { token?: string }) => e.token === stale.token),
        false,
        "the stale offer is not in the history",
      );
      // The current row goes out as the redelivery it is.
      const next = await b.post("/v1/workers/poll", { session_id: s2, wait_s: 10 });
      assert.equal(next.body.tasks.length, 1);
      assert.equal(next.body.tasks[0].redelivery, true);
      assert.equal(next.body.tasks[0].idempotency_key, lost.idempotency_key);
      // The owner records it from its inbox: two dispatches, the second a redelivery.
      await waitFor(
        async () => {
          const flags = (await history()).filter((e: { type: string }) =>
            e.type === "StepDispatched"
          ).map((e: { redelivery?: boolean }) => e.redelivery === true);
          return flags.length === 2 && !flags[0] && flags[1];
        },
        "the redelivery to be recorded",
        30_000,
        200,
      );
    } finally {
      await sql.end({ timeout: 5 });
      await c.close();
    }
  },
});
