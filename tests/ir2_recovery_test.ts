/**
 * orbit-ir/2 across restarts: a parent whose child finished while nobody delivered the result
 * gets it on recovery (the child's row is checked); a durable sleep and an HTTP call in flight
 * survive a SIGKILL of the server (the call is redone with the same Idempotency-Key).
 */
import assert from "node:assert/strict";
import { Runtime } from "../lib/runtime.ts";
import { openStore } from "../lib/store/open.ts";
import type { Store } from "../lib/store/store.ts";
import { sendSignal } from "../lib/executions/signals.ts";
import { api, startServer, waitFor } from "./support/server.ts";
import { testEachStore } from "./support/stores.ts";

const wf = (name: string, steps: unknown[], extra: Record<string, unknown> = {}) => ({
  ir: "orbit-ir/2",
  name,
  version: "1.0.0",
  steps,
  ...extra,
});

testEachStore(
  "ir/2 recovery hands a parent the result of a child that finished while it was not delivered",
  async (target) => {
    const db = await target.newDb();
    const open = async () => {
      const rt = new Runtime(await openStore(db), {
        sessionTimeoutMs: 30_000,
        maxActiveExecutions: null,
      });
      await rt.start();
      return rt;
    };
    let rt = await open();
    try {
      await rt.definitions.deploy(wf("Hold", [{ id: "w", wait_signal: "go" }, {
        id: "r",
        return: "{% $steps.w %}",
      }], { signals: { go: {} } }));
      await rt.definitions.deploy(wf("Parent", [{ id: "kid", child: { workflow: "Hold" } }]));
      await rt.executions.start({ workflow: "Parent", execution_id: "p-1" });
      await waitFor(() => rt.executions.holds("p-1.kid"), "the child to start");
      // The delivery is lost (as in a crash right after the child's last commit).
      rt.children.stop();
      await sendSignal(rt.executions, "p-1.kid", "go", "payload");
      await waitFor(
        async () => (await rt.store.getExecution("p-1.kid"))?.status === "completed",
        "the child to end",
      );
      assert.equal((await rt.store.getExecution("p-1"))?.status, "running");
      await rt.stop();

      rt = await open();
      const parent = await rt.executions.wait("p-1", 10_000);
      assert.equal(parent.status, "completed");
      assert.deepEqual(parent.output, { kid: "payload" });
    } finally {
      await rt.stop().catch(() => {});
    }
  },
);

testEachStore(
  "ir/2 recovery starts the next run when a crash came between a run's end and continue-as-new",
  async (target) => {
    const db = await target.newDb();
    const doc = wf("Again", [
      {
        id: "more",
        if: "{% $input.n < 2 %}",
        then: [{ id: "again", continue_as_new: { input: { n: 2 } } }],
      },
      { id: "r", return: "{% $input.n %}" },
    ]);
    // A store whose commit of a continued run's first events always fails: the crash window.
    const real = await openStore(db);
    const broken = new Proxy(real, {
      get(t, k) {
        if (k === "commit") {
          return (items: Parameters<Store["commit"]>[0]) =>
            items.some((i) =>
                i.events[0]?.type === "WorkflowCreated" && "continued_from" in i.events[0]
              )
              ? Promise.reject(new Error("disk on fire"))
              : t.commit(items);
        }
        const v = Reflect.get(t, k);
        return typeof v === "function" ? v.bind(t) : v;
      },
    });
    const rt1 = new Runtime(broken, { sessionTimeoutMs: 30_000, maxActiveExecutions: null });
    await rt1.start();
    await rt1.definitions.deploy(doc);
    const first = await rt1.executions.start({
      workflow: "Again",
      input: { n: 1 },
      execution_id: "a-1",
    });
    await waitFor(
      async () => (await real.getExecution("a-1"))?.status === "continued",
      "the run to end",
    );
    await rt1.stop();

    const rt2 = new Runtime(await openStore(db), {
      sessionTimeoutMs: 30_000,
      maxActiveExecutions: null,
    });
    try {
      await rt2.start();
      const done = await rt2.executions.wait("a-1", 10_000);
      assert.equal(done.status, "completed");
      assert.equal(done.output, 2);
      assert.notEqual(done.run_id, first.row.run_id);
      const old = await rt2.store.readHistory(first.row.run_id, 0, 100);
      assert.equal(old.at(-1)?.type, "WorkflowContinuedAsNew");
    } finally {
      await rt2.stop();
    }
  },
);

testEachStore(
  "ir/2 a durable sleep and an HTTP call in flight survive a SIGKILL of the server (the call is redone after --session-timeout)",
  async (target) => {
    const db = await target.newDb();
    const keys: string[] = [];
    let hang = true;
    let release = () => {};
    const hanging = new Promise<void>((r) => release = r);
    const http = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, async (req) => {
      keys.push(req.headers.get("idempotency-key") ?? "");
      await req.body?.cancel();
      if (hang) {
        // No answer to the first call until the server that made it is dead.
        await hanging;
      }
      return Response.json({ ok: true });
    });
    // An HTTP call in flight is redone one session timeout after the restart.
    const args = ["--http-allow", `127.0.0.1:${http.addr.port}`, "--session-timeout", "1"];
    let server = await startServer({ db, args });
    try {
      const c = api(server.url);
      for (
        const doc of [
          wf("Nap", [{ id: "nap", sleep_s: 1.5 }, { id: "r", return: "woke" }]),
          wf("Call", [{
            id: "call",
            http: { url: `http://127.0.0.1:${http.addr.port}/x` },
            timeout_s: 120,
          }]),
        ]
      ) {
        assert.equal((await c.post("/v1/workflows", doc)).status, 201);
      }
      const nap = await c.post("/v1/executions", { workflow: "Nap", execution_id: "nap-1" });
      const call = await c.post("/v1/executions", { workflow: "Call", execution_id: "call-1" });
      await waitFor(() => keys.length === 1, "the HTTP call to arrive");
      await server.kill("SIGKILL");
      hang = false;
      release();

      server = await startServer({ db, args });
      const c2 = api(server.url);
      const napped = await waitFor(async () => {
        const r = await c2.get("/v1/executions/nap-1/wait?timeout_s=10");
        return r.body.status !== "running" ? r.body : null;
      }, "the nap to end");
      assert.equal(napped.status, "completed");
      assert.equal(napped.output, "woke");
      assert.ok(napped.closed_ms - nap.body.created_ms >= 1500);
      const called = await waitFor(async () => {
        const r = await c2.get("/v1/executions/call-1/wait?timeout_s=10");
        return r.body.status !== "running" ? r.body : null;
      }, "the call to end");
      assert.equal(called.status, "completed", JSON.stringify(called));
      assert.deepEqual(keys, [`${call.body.run_id}:call`, `${call.body.run_id}:call`]);
      const events = (await c2.get("/v1/executions/call-1/history")).body.events;
      assert.ok(events.some((e: { type: string }) => e.type === "StepAttemptUncertain"));
    } finally {
      release();
      await server.kill("SIGKILL");
      await http.shutdown();
    }
  },
);
