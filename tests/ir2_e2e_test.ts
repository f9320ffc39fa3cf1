/**
 * orbit-ir/2 end to end, with a real server process on both stores: signals and queries over
 * HTTP (every error code), sleep timers, child workflows (result and cancel), parallel
 * branches run by a worker, continue-as-new with the old run's history readable, the HTTP
 * adapter against a local server (Idempotency-Key, a retry on 500, --http-allow refusals at
 * deploy and at run time), and the workflow timeout. No fixed sleeps: every wait is for a
 * condition.
 */
import assert from "node:assert/strict";
import { api, type ServerProcess, startServer, waitFor } from "./support/server.ts";
import { testEachStore } from "./support/stores.ts";
import { registerWorker } from "./support/workers.ts";

type Api = ReturnType<typeof api>;

async function deploy(c: Api, doc: Record<string, unknown>): Promise<void> {
  const r = await c.post("/v1/workflows", doc);
  assert.equal(r.status, 201, JSON.stringify(r.body));
}

async function start(c: Api, workflow: string, input: unknown, id: string) {
  const r = await c.post("/v1/executions", { workflow, input, execution_id: id });
  assert.equal(r.status, 201, JSON.stringify(r.body));
  return r.body;
}

/** Long-waits (server side) until the execution is no longer running. */
async function finish(c: Api, id: string) {
  return await waitFor(async () => {
    const r = await c.get(`/v1/executions/${id}/wait?timeout_s=10`);
    return r.body.status !== "running" ? r.body : null;
  }, `execution ${id} to finish`);
}

async function history(c: Api, id: string, runId?: string) {
  const r = await c.get(`/v1/executions/${id}/history${runId ? `?run_id=${runId}` : ""}`);
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body.events as Array<Record<string, unknown> & { seq: number; type: string }>;
}

const wf = (name: string, steps: unknown[], extra: Record<string, unknown> = {}) => ({
  ir: "orbit-ir/2",
  name,
  version: "1.0.0",
  steps,
  ...extra,
});

/** A worker over the raw protocol: register, long-poll, complete (or fail when told to). */
function rawWorker(
  base: string,
  handlers: Record<string, (input: unknown) => unknown>,
): { stop(): Promise<void> } {
  let stopped = false;
  const c = api(base);
  const loop = (async () => {
    const session = await registerWorker(c, {
      worker_id: "e2e-worker",
      runtime: "typescript",
      tasks: Object.keys(handlers).map((name) => ({ name, contract: "1" })),
      concurrency: 8,
    });
    while (!stopped) {
      const r = await c.post("/v1/workers/poll", {
        session_id: session,
        max_tasks: 8,
        wait_s: 0.5,
      });
      if (r.status !== 200) continue;
      for (const t of r.body.tasks) {
        const output = handlers[t.task]!(t.input);
        await c.post("/v1/tasks/complete", { token: t.token, output });
      }
    }
  })();
  return {
    stop: async () => {
      stopped = true;
      await loop;
    },
  };
}

async function withServer(
  db: string,
  args: string[],
  fn: (s: ServerProcess, c: Api) => Promise<void>,
): Promise<void> {
  const server = await startServer({ db, args });
  try {
    await fn(server, api(server.url));
  } finally {
    await server.kill("SIGKILL");
  }
}

testEachStore(
  "ir/2 signals and queries: every error code, the seq, handlers, replay after the end",
  async (store) => {
    await withServer(await store.newDb(), [], async (_s, c) => {
      await deploy(
        c,
        wf("Approval", [
          { id: "init", assign: { status: "waiting", notes: [] } },
          { id: "wait", wait_signal: "approve" },
          { id: "done", assign: { status: "approved" } },
        ], {
          signals: {
            approve: {
              schema: {
                type: "object",
                required: ["by"],
                properties: { by: { type: "string" } },
              },
            },
            note: {},
          },
          queries: {
            status: "{% $vars.status %}",
            notes: "{% $vars.notes %}",
            approver: "{% $steps.wait.by %}",
          },
          handlers: {
            note: [{ id: "add", assign: { notes: "{% $append($vars.notes, $signal) %}" } }],
          },
        }),
      );
      assert.deepEqual((await c.get("/v1/health")).body.ir_versions, ["orbit-ir/1", "orbit-ir/2"]);
      await start(c, "Approval", {}, "appr-1");
      assert.deepEqual((await c.get("/v1/executions/appr-1/queries/status")).body, {
        result: "waiting",
      });

      const note = await c.post("/v1/executions/appr-1/signals/note", { payload: "hi" });
      assert.equal(note.status, 200, JSON.stringify(note.body));
      assert.equal(note.body.execution_id, "appr-1");
      const events = await history(c, "appr-1");
      const received = events.find((e) => e.seq === note.body.seq)!;
      assert.equal(received.type, "SignalReceived");
      assert.equal(received.signal, "note");
      assert.deepEqual(received.payload, "hi");
      assert.deepEqual((await c.get("/v1/executions/appr-1/queries/notes")).body, {
        result: ["hi"],
      });

      const errors: Array<
        [Promise<{ status: number; body: { error: { code: string } } }>, number, string]
      > = [
        [c.post("/v1/executions/nope/signals/note", {}), 404, "UNKNOWN_EXECUTION"],
        [c.post("/v1/executions/appr-1/signals/ghost", {}), 404, "UNKNOWN_SIGNAL"],
        [
          c.post("/v1/executions/appr-1/signals/approve", { payload: { by: 7 } }),
          422,
          "SIGNAL_PAYLOAD_INVALID",
        ],
        [c.post("/v1/executions/appr-1/signals/approve", {}), 422, "SIGNAL_PAYLOAD_INVALID"],
        [c.get("/v1/executions/appr-1/queries/ghost"), 404, "UNKNOWN_QUERY"],
        [c.get("/v1/executions/nope/queries/status"), 404, "UNKNOWN_EXECUTION"],
      ];
      for (const [p, status, code] of errors) {
        const r = await p;
        assert.equal(r.status, status, JSON.stringify(r.body));
        assert.equal(r.body.error.code, code);
      }
      assert.equal((await history(c, "appr-1")).length, events.length, "refusals wrote nothing");

      const approve = await c.post("/v1/executions/appr-1/signals/approve", {
        payload: { by: "ann" },
      });
      assert.equal(approve.status, 200);
      assert.ok(approve.body.seq > note.body.seq);
      const done = await finish(c, "appr-1");
      assert.equal(done.status, "completed");
      const late = await c.post("/v1/executions/appr-1/signals/note", { payload: "late" });
      assert.equal(late.status, 409);
      assert.equal(late.body.error.code, "EXECUTION_FINISHED");
      // A finished execution is evaluated on the state replayed from the store.
      assert.deepEqual((await c.get("/v1/executions/appr-1/queries/status")).body, {
        result: "approved",
      });
      assert.deepEqual((await c.get("/v1/executions/appr-1/queries/approver")).body, {
        result: "ann",
      });
    });
  },
);

testEachStore(
  "ir/2 sleep_s is a durable timer and a workflow timeout_s ends timed_out after compensation",
  async (store) => {
    await withServer(await store.newDb(), [], async (server, c) => {
      await deploy(c, wf("Nap", [{ id: "nap", sleep_s: 0.3 }, { id: "r", return: "rested" }]));
      await deploy(
        c,
        wf("Deadline", [
          {
            id: "charge",
            task: "pay.charge",
            contract: "1",
            compensate: { task: "pay.refund", contract: "1", input: "{% $steps.charge %}" },
          },
          { id: "forever", wait_signal: "never" },
        ], { timeout_s: 1, signals: { never: {} } }),
      );
      const refunds: unknown[] = [];
      const worker = rawWorker(server.url, {
        "pay.charge": () => ({ charge: "ch-1" }),
        "pay.refund": (input) => {
          refunds.push(input);
          return "refunded";
        },
      });
      try {
        const began = Date.now();
        await start(c, "Nap", null, "nap-1");
        await start(c, "Deadline", null, "dl-1");
        const napped = await finish(c, "nap-1");
        assert.equal(napped.status, "completed");
        assert.equal(napped.output, "rested");
        assert.ok(Date.now() - began >= 300, "the sleep took its time");
        const nap = await history(c, "nap-1");
        const timer = nap.find((e) => e.type === "TimerStarted")!;
        assert.equal(timer.purpose, "sleep");
        assert.equal((timer.fire_at_ms as number) - (nap[0]!.time_ms as number), 300);
        assert.ok(nap.some((e) => e.type === "TimerFired" && e.timer_id === "sleep:nap"));

        const timedOut = await finish(c, "dl-1");
        assert.equal(timedOut.status, "timed_out");
        assert.equal(timedOut.error.code, "WORKFLOW_TIMEOUT");
        assert.deepEqual(refunds, [{ charge: "ch-1" }]);
        const types = (await history(c, "dl-1")).map((e) => e.type);
        assert.equal(types.at(-1), "WorkflowTimedOut");
        assert.ok(types.includes("CompensationStarted"));
        assert.equal((await c.get("/v1/executions?status=timed_out")).body.executions.length, 1);
      } finally {
        await worker.stop();
      }
    });
  },
);

testEachStore(
  "ir/2 child workflows share the root, give their output to the parent, and are cancelled with it",
  async (store) => {
    await withServer(await store.newDb(), [], async (_s, c) => {
      await deploy(
        c,
        wf("Shipping", [{ id: "label", return: { tracking: "{% 'T-' & $input.order %}" } }]),
      );
      await deploy(c, wf("Hold", [{ id: "w", wait_signal: "go" }], { signals: { go: {} } }));
      await deploy(
        c,
        wf("Order", [
          { id: "ship", child: { workflow: "Shipping", input: { order: "{% $input.order %}" } } },
          { id: "done", return: "{% $steps.ship %}" },
        ]),
      );
      await deploy(c, wf("Holder", [{ id: "hold", child: { workflow: "Hold" } }]));

      await start(c, "Order", { order: 7 }, "order-7");
      const parent = await finish(c, "order-7");
      assert.equal(parent.status, "completed", JSON.stringify(parent));
      assert.deepEqual(parent.output, { tracking: "T-7" });
      const child = (await c.get("/v1/executions/order-7.ship")).body;
      assert.equal(child.status, "completed");
      assert.equal(child.parent_id, "order-7");
      assert.equal(child.root_id, "order-7");
      const types = (await history(c, "order-7")).map((e) => e.type);
      assert.deepEqual(types, [
        "WorkflowCreated",
        "StepStarted",
        "ChildStarted",
        "StepSucceeded",
        "WorkflowCompleted",
      ]);

      await start(c, "Holder", null, "holder-1");
      await waitFor(
        async () => (await c.get("/v1/executions/holder-1.hold")).body.status === "running",
        "the child to run",
      );
      const cancel = await c.post("/v1/executions/holder-1/cancel", { reason: "stop" });
      assert.equal(cancel.status, 200);
      assert.equal((await finish(c, "holder-1")).status, "cancelled");
      const held = await finish(c, "holder-1.hold");
      assert.equal(held.status, "cancelled");
      assert.equal(held.root_id, "holder-1");
    });
  },
);

testEachStore(
  "ir/2 parallel branches run side by side on a worker; the output lists each branch's last output",
  async (store) => {
    await withServer(await store.newDb(), [], async (server, c) => {
      await deploy(
        c,
        wf("Fan", [
          {
            id: "both",
            parallel: [
              [{ id: "left", task: "fan.left", contract: "1", input: "{% $input %}" }],
              [
                { id: "right", task: "fan.right", contract: "1" },
                { id: "after", task: "fan.after", contract: "1", input: "{% $steps.right %}" },
              ],
            ],
          },
          {
            id: "check",
            if: "{% $steps.both[0] = 'L:x' %}",
            then: [{ id: "yes", assign: { ok: true } }],
            else: [{ id: "no", assign: { ok: false } }],
          },
          { id: "done", return: { both: "{% $steps.both %}", ok: "{% $vars.ok %}" } },
        ]),
      );
      await deploy(
        c,
        wf("OnSignal", [{ id: "w", wait_signal: "done" }], {
          signals: { done: {}, order: {} },
          queries: { reserved: "{% $vars.reserved %}" },
          handlers: {
            order: [
              { id: "reserve", task: "fan.reserve", contract: "1", input: "{% $signal.sku %}" },
              { id: "keep", assign: { reserved: "{% $append($vars.reserved, $steps.reserve) %}" } },
            ],
          },
        }),
      );
      const worker = rawWorker(server.url, {
        "fan.left": (input) => `L:${input}`,
        "fan.right": () => "R",
        "fan.after": (input) => `${input}!`,
        "fan.reserve": (input) => `reserved ${input}`,
      });
      try {
        await start(c, "Fan", "x", "fan-1");
        const done = await finish(c, "fan-1");
        assert.equal(done.status, "completed", JSON.stringify(done));
        assert.deepEqual(done.output, { both: ["L:x", "R!"], ok: true });
        const events = await history(c, "fan-1");
        const scheduled = events.filter((e) => e.type === "StepScheduled");
        assert.deepEqual(scheduled.map((e) => [e.step, e.frame]), [
          ["left", "both[0]"],
          ["right", "both[1]"],
          ["after", "both[1]"],
        ]);

        // A handler runs a worker task for each signal; the run ends after its handler runs.
        await start(c, "OnSignal", null, "on-1");
        for (const sku of ["a", "b"]) {
          const r = await c.post("/v1/executions/on-1/signals/order", { payload: { sku } });
          assert.equal(r.status, 200, JSON.stringify(r.body));
        }
        await waitFor(async () => {
          const q = await c.get("/v1/executions/on-1/queries/reserved");
          return q.body.result?.length === 2 ? q.body.result : null;
        }, "both handler runs to reserve");
        assert.equal((await c.post("/v1/executions/on-1/signals/done", {})).status, 200);
        assert.equal((await finish(c, "on-1")).status, "completed");
        const onEvents = await history(c, "on-1");
        // Each run's steps are named after the seq of the signal that started it.
        const signalSeqs = onEvents.filter((e) => e.type === "SignalReceived" && e.handler)
          .map((e) => e.seq);
        assert.deepEqual(
          onEvents.filter((e) => e.type === "StepScheduled").map((e) => e.step),
          signalSeqs.map((seq) => `reserve@${seq}`),
        );
        assert.equal(onEvents.filter((e) => e.type === "HandlerCompleted").length, 2);
      } finally {
        await worker.stop();
      }
    });
  },
);

testEachStore(
  "ir/2 continue_as_new keeps the execution id, starts a new run with the buffered signal, keeps the old history",
  async (store) => {
    await withServer(await store.newDb(), [], async (_s, c) => {
      await deploy(
        c,
        wf("Counter", [
          { id: "nap", sleep_s: "{% $input.n = 1 ? 1 : 0 %}" },
          {
            id: "more",
            if: "{% $input.n < 2 %}",
            then: [{ id: "again", continue_as_new: { input: { n: "{% $input.n + 1 %}" } } }],
          },
          { id: "w", wait_signal: "go" },
          {
            id: "done",
            return: { n: "{% $input.n %}", got: "{% $steps.w %}", run: "{% $execution.run %}" },
          },
        ], { signals: { go: {} } }),
      );
      const first = await start(c, "Counter", { n: 1 }, "count-1");
      const sig = await c.post("/v1/executions/count-1/signals/go", { payload: "carried" });
      assert.equal(sig.status, 200, JSON.stringify(sig.body));
      assert.equal(
        sig.body.run_id,
        first.run_id,
        "the signal reached the first run, during its sleep",
      );
      const done = await finish(c, "count-1");
      assert.equal(done.status, "completed", JSON.stringify(done));
      assert.deepEqual(done.output, { n: 2, got: "carried", run: 2 });
      assert.notEqual(done.run_id, first.run_id);
      assert.equal(done.execution_id, "count-1");

      const current = await history(c, "count-1");
      assert.equal(current[0]!.type, "WorkflowCreated");
      assert.equal(current[0]!.continued_from, first.run_id);
      assert.equal(current[0]!.run, 2);
      assert.equal(current[1]!.type, "SignalReceived");
      assert.equal(current[1]!.carried_over, true);

      const old = await history(c, "count-1", first.run_id);
      assert.equal(old[0]!.run_id, first.run_id);
      const last = old.at(-1)!;
      assert.equal(last.type, "WorkflowContinuedAsNew");
      assert.equal(last.new_run_id, done.run_id);
      assert.deepEqual(last.input, { n: 2 });
      const bogus = await c.get("/v1/executions/count-1/history?run_id=not-a-run");
      assert.equal(bogus.status, 404);
    });
  },
);

testEachStore(
  "ir/2 continue_as_new reached in the start's own commit starts the next run",
  async (store) => {
    await withServer(await store.newDb(), [], async (_s, c) => {
      await deploy(
        c,
        wf("Again", [
          {
            id: "more",
            if: "{% $input.again %}",
            then: [{ id: "again", continue_as_new: { input: { again: false } } }],
          },
          { id: "done", return: { run: "{% $execution.run %}" } },
        ]),
      );
      await start(c, "Again", { again: true }, "again-1");
      const done = await finish(c, "again-1");
      assert.equal(done.status, "completed", JSON.stringify(done));
      assert.deepEqual(done.output, { run: 2 });
    });
  },
);

testEachStore(
  "ir/2 a chain of 100 runs that each continue at once completes, every run in its history",
  async (store) => {
    await withServer(await store.newDb(), [], async (_s, c) => {
      await deploy(
        c,
        wf("Chain", [
          {
            id: "more",
            if: "{% $input < 100 %}",
            then: [{ id: "again", continue_as_new: { input: "{% $input + 1 %}" } }],
          },
          { id: "done", return: { n: "{% $input %}", run: "{% $execution.run %}" } },
        ]),
      );
      await start(c, "Chain", 1, "chain-1");
      const done = await waitFor(async () => {
        const r = await c.get(`/v1/executions/chain-1/wait?timeout_s=10`);
        return r.body.status === "completed" ? r.body : null;
      }, "the chain to complete");
      assert.deepEqual(done.output, { n: 100, run: 100 });
      // Run 100 continues run 99, which continues run 98 …
      let runId: string | undefined = done.run_id;
      for (let run = 100; run > 97; run--) {
        const events = await history(c, "chain-1", runId);
        assert.equal(events[0]!.run ?? 1, run);
        runId = events[0]!.continued_from as string | undefined;
      }
      // A cancel between two runs of an endless chain ends it.
      await deploy(c, wf("Endless", [{ id: "again", continue_as_new: {} }]));
      await start(c, "Endless", null, "endless-1");
      const r = await c.post("/v1/executions/endless-1/cancel", { reason: "enough" });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      assert.equal(r.body.status, "cancelled");
      const last = await history(c, "endless-1");
      assert.deepEqual(last.map((e) => e.type).slice(-2), [
        "WorkflowCancelRequested",
        "WorkflowCancelled",
      ]);
    });
  },
);

testEachStore(
  "ir/2 http adapter: Idempotency-Key, a retry on 500, --http-allow refusals at deploy and at run time",
  async (store) => {
    const seen: Array<
      { path: string; method: string; key: string | null; body: string; x: string | null }
    > = [];
    let flaky = 0;
    const target = Deno.serve(
      { hostname: "127.0.0.1", port: 0, onListen: () => {} },
      async (req) => {
        const url = new URL(req.url);
        seen.push({
          path: url.pathname,
          method: req.method,
          key: req.headers.get("idempotency-key"),
          body: await req.text(),
          x: req.headers.get("x-order"),
        });
        if (url.pathname === "/flaky" && ++flaky === 1) {
          return new Response("down", { status: 500 });
        }
        if (url.pathname === "/missing") return new Response("no", { status: 404 });
        return Response.json({ ok: true, calls: flaky });
      },
    );
    const port = target.addr.port;
    try {
      await withServer(
        await store.newDb(),
        ["--http-allow", `127.0.0.1:${port}`],
        async (_s, c) => {
          const refused = await c.post(
            "/v1/workflows",
            wf("Evil", [{ id: "call", http: { url: "https://evil.example/steal" } }]),
          );
          assert.equal(refused.status, 422);
          assert.equal(refused.body.error.code, "INVALID_WORKFLOW");
          assert.equal(refused.body.error.problems[0].path, "$.steps[0].http.url");
          assert.match(refused.body.error.problems[0].message, /HTTP_NOT_ALLOWED.*--http-allow/);

          await deploy(
            c,
            wf("Notify", [
              {
                id: "call",
                http: {
                  method: "POST",
                  url: `http://127.0.0.1:${port}/flaky`,
                  headers: { "x-order": "{% $input.id %}" },
                  body: { id: "{% $input.id %}" },
                },
                retry: { max_attempts: 3, initial_ms: 50 },
              },
              { id: "done", return: "{% $steps.call %}" },
            ]),
          );
          await deploy(c, wf("Dynamic", [{ id: "call", http: { url: "{% $input.url %}" } }]));

          const run = await start(c, "Notify", { id: "o-1" }, "notify-1");
          const done = await finish(c, "notify-1");
          assert.equal(done.status, "completed", JSON.stringify(done));
          assert.equal(done.output.status, 200);
          assert.deepEqual(done.output.body, { ok: true, calls: 2 });
          assert.match(done.output.headers["content-type"], /json/);
          const calls = seen.filter((s) => s.path === "/flaky");
          assert.equal(calls.length, 2, "one retry after the 500");
          for (const call of calls) {
            assert.equal(call.method, "POST");
            assert.equal(
              call.key,
              `${run.run_id}:call`,
              "the step's idempotency key on every attempt",
            );
            assert.equal(call.x, "o-1");
            assert.deepEqual(JSON.parse(call.body), { id: "o-1" });
          }
          const failed = (await history(c, "notify-1")).filter((e) => e.type === "StepFailed");
          assert.equal(failed.length, 1);
          assert.equal((failed[0]!.error as { code: string }).code, "HTTP_500");
          assert.equal(failed[0]!.will_retry, true);

          // 127.0.0.2 is not 127.0.0.1: refused at run time, never called.
          const before = seen.length;
          await start(c, "Dynamic", { url: `http://127.0.0.2:${port}/x` }, "dyn-1");
          const refusedRun = await finish(c, "dyn-1");
          assert.equal(refusedRun.status, "failed");
          assert.equal(refusedRun.error.code, "HTTP_NOT_ALLOWED");
          assert.match(refusedRun.error.message, /--http-allow/);
          assert.equal(seen.length, before);
          const attempts = (await history(c, "dyn-1")).filter((e) => e.type === "StepDispatched");
          assert.equal(attempts.length, 1, "HTTP_NOT_ALLOWED is not retried");

          // A 4xx is final too.
          await start(c, "Dynamic", { url: `http://127.0.0.1:${port}/missing` }, "dyn-2");
          const missing = await finish(c, "dyn-2");
          assert.equal(missing.error.code, "HTTP_404");
          assert.equal(seen.filter((s) => s.path === "/missing").length, 1);
        },
      );
    } finally {
      await target.shutdown();
    }
  },
);
