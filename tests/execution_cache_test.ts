/**
 * Bounded memory (`--cache-executions`, lib/executions/cache.ts): executions that only wait
 * leave memory and come back from history for whatever happens to them — a signal, a query, a
 * wait, a cancel, a start of their id; a restart loads only executions with work due, and a
 * timer is found from the store (`wake_at_ms`), not from memory.
 */
import assert from "node:assert/strict";
import { api, startServer, waitFor } from "./support/server.ts";
import { testEachStore } from "./support/stores.ts";
import { NOTES_WORKFLOW } from "./support/orders.ts";

const WAITER = { ...NOTES_WORKFLOW, name: "Waiter" };

const NAP = {
  ir: "orbit-ir/2",
  name: "Nap",
  version: "1.0.0",
  steps: [{ id: "nap", sleep_s: 12 }, { id: "r", return: "rested" }],
};

async function metric(url: string, name: string): Promise<number> {
  const text = await (await fetch(`${url}/v1/metrics`)).text();
  const m = new RegExp(`^${name} (\\d+)`, "m").exec(text);
  return m ? Number(m[1]) : NaN;
}

const inMemory = (url: string) => metric(url, "orbit_cached_executions");

testEachStore(
  "--cache-executions 0: waiting executions leave memory and load from history for a signal, a query, a wait, a cancel and a start",
  async (target) => {
    const db = await target.newDb();
    const args = ["--cache-executions", "0"];
    let s = await startServer({ db, args });
    try {
      const c = api(s.url);
      assert.equal((await c.post("/v1/workflows", WAITER)).status, 201);
      for (let i = 0; i < 6; i++) {
        const r = await c.post("/v1/executions", { workflow: "Waiter", execution_id: `w-${i}` });
        assert.equal(r.status, 201, JSON.stringify(r.body));
      }
      await waitFor(async () => (await inMemory(s.url)) === 0, "the waiting executions to leave");
      assert.equal(await metric(s.url, "orbit_executions_evicted_total"), 6);

      // A signal (handled by a handler), then a query of what it changed.
      assert.equal((await c.post("/v1/executions/w-0/signals/note", { payload: "a" })).status, 200);
      await waitFor(async () => (await inMemory(s.url)) === 0, "w-0 to leave again");
      const q = await c.get("/v1/executions/w-0/queries/notes");
      assert.deepEqual(q.body, { result: ["a"] });
      // A wait that a signal ends.
      const waiting = c.get("/v1/executions/w-0/wait?timeout_s=20");
      await waitFor(async () => (await inMemory(s.url)) === 1, "the wait to load w-0");
      assert.equal((await c.post("/v1/executions/w-0/signals/go", { payload: 7 })).status, 200);
      const done = await waiting;
      assert.equal(done.body.status, "completed");
      assert.equal(done.body.output, 7);
      // A start of an existing id answers its row; a cancel loads and cancels it.
      const again = await c.post("/v1/executions", { workflow: "Waiter", execution_id: "w-1" });
      assert.equal(again.status, 200);
      assert.equal(again.body.status, "running");
      const cancelled = await c.post("/v1/executions/w-1/cancel", { reason: "test" });
      assert.equal(cancelled.status, 200, JSON.stringify(cancelled.body));
      assert.equal(cancelled.body.status, "cancelled");
      // A finished one still answers as before.
      const late = await c.post("/v1/executions/w-1/signals/go", {});
      assert.equal(late.status, 409);
      assert.equal(late.body.error.code, "EXECUTION_FINISHED");
      assert.equal((await c.post("/v1/executions/nope/signals/go", {})).status, 404);

      // A restart loads none of the waiting ones; they still answer and finish.
      await s.kill("SIGTERM");
      s = await startServer({ db, args });
      await s.waitForLog(/recovered active executions from history executions=0/);
      const c2 = api(s.url);
      assert.equal(await inMemory(s.url), 0);
      for (const id of ["w-2", "w-3", "w-4", "w-5"]) {
        const r = await c2.post(`/v1/executions/${id}/signals/go`, { payload: id });
        assert.equal(r.status, 200, JSON.stringify(r.body));
        const w = await c2.get(`/v1/executions/${id}/wait?timeout_s=20`);
        assert.equal(w.body.status, "completed");
        assert.equal(w.body.output, id);
      }
      // Each was rebuilt from history once, for its signal.
      assert.equal(await metric(s.url, "orbit_executions_loaded_total"), 4);
      const events = await c2.get("/v1/executions/w-2/history");
      assert.equal(
        events.body.events.filter((e: { type: string }) => e.type === "WorkflowCompleted").length,
        1,
      );
    } finally {
      await s.kill("SIGTERM");
    }
  },
);

testEachStore(
  "a timer due after a restart is found from the store, not from memory",
  async (target) => {
    const db = await target.newDb();
    let s = await startServer({ db });
    try {
      const c = api(s.url);
      assert.equal((await c.post("/v1/workflows", NAP)).status, 201);
      const r = await c.post("/v1/executions", { workflow: "Nap", execution_id: "nap-1" });
      assert.equal(r.status, 201);
      await s.kill("SIGTERM");
      s = await startServer({ db });
      // Due in more than the start-up look-ahead: not loaded at start.
      const line = await s.waitForLog(/recovered active executions from history/);
      const c2 = api(s.url);
      // Read the row only (a wait would load the execution and arm its timer from memory).
      await waitFor(
        async () => (await c2.get("/v1/executions/nap-1")).body.status === "completed",
        "the sleep to end",
        30_000,
      );
      assert.equal((await c2.get("/v1/executions/nap-1")).body.output, "rested");
      if (!/executions=0/.test(line)) console.warn(`loaded at start (a slow start?): ${line}`);
    } finally {
      await s.kill("SIGTERM");
    }
  },
);
