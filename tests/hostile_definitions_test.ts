/**
 * Hostile definitions against a real server process (issue 37): expressions that never end,
 * recurse without end, build huge values or backtrack; definitions too large to run; versions
 * and sleeps past what the server can read; a signal handler, a query and a schedule that loop.
 *
 * Each case answers a clear 4xx at deploy or start, or fails its one execution with a clear code
 * (EXPRESSION_LIMIT, EXPRESSION_ERROR), while the server keeps answering (JSONata runs in the
 * server's expression sandbox, lib/expressions/sandbox.ts, not on its event loop). After every case: the
 * server answers /v1/health within 100 ms, and two witnesses started before the first case (one
 * completed, one waiting for a signal) read exactly as before, history included. One case kills
 * the server while a looping expression waits behind a timer and checks that the restarted
 * server fails that execution instead of hanging on it again.
 */
import assert from "node:assert/strict";
import { api, type ServerProcess, startServer, tempDir, waitFor } from "./support/server.ts";
import { registerWorker } from "./support/workers.ts";

const BUDGET_MS = 300;
const ARGS = [
  "--expression-timeout-ms",
  String(BUDGET_MS),
  "--max-body-bytes",
  "4194304",
  "--max-child-depth",
  "5",
];
const LOOP = "{% ($f := function($n){ $f($n + 1) }; $f(0)) %}";
const DEEP = "{% ($f := function($n){ 1 + $f($n + 1) }; $f(0)) %}";

const doc = (name: string, steps: unknown[], extra: Record<string, unknown> = {}) => ({
  ir: "orbit-ir/2",
  name,
  version: "1.0.0",
  steps,
  ...extra,
});

/** A definition whose one step returns `expr`. */
const returning = (name: string, expr: string) => doc(name, [{ id: "done", return: expr }]);

type Api = ReturnType<typeof api>;

/** Health answers within 100 ms (one of three tries, so one GC pause is not a failure). */
async function assertResponsive(c: Api, what: string): Promise<void> {
  const took: number[] = [];
  for (let i = 0; i < 3; i++) {
    const t = performance.now();
    const r = await c.get("/v1/health");
    took.push(performance.now() - t);
    assert.equal(r.status, 200, `${what}: health answered ${r.status}`);
    if (took.at(-1)! < 100) return;
  }
  assert.fail(`${what}: health took ${took.map((t) => t.toFixed(0)).join(", ")} ms`);
}

/** The witnesses as they read now: the execution and its whole history. */
async function witnesses(c: Api, ids: string[]): Promise<unknown[]> {
  const out = [];
  for (const id of ids) {
    const e = await c.get(`/v1/executions/${id}`);
    const h = await c.get(`/v1/executions/${id}/history`);
    assert.equal(e.status, 200);
    out.push({ execution: e.body, events: h.body.events });
  }
  return out;
}

async function deploy(c: Api, d: unknown): Promise<void> {
  const r = await c.post("/v1/workflows", d);
  assert.equal(r.status, 201, JSON.stringify(r.body));
}

async function start(c: Api, workflow: string, input: unknown = {}) {
  return await c.post("/v1/executions", { workflow, input });
}

/** Waits until execution `id` is closed; answers it. */
async function closed(c: Api, id: string) {
  const r = await c.get(`/v1/executions/${id}/wait?timeout_s=30`);
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.notEqual(r.body.status, "running", JSON.stringify(r.body));
  return r.body;
}

/** Starts `workflow` and answers its closed execution; health is probed while it runs. */
async function startAndClose(c: Api, workflow: string, input: unknown = {}) {
  const started = start(c, workflow, input);
  // While the expression runs out its budget the event loop still turns (sliced evaluation).
  const t = performance.now();
  const h = await c.get("/v1/health");
  const during = performance.now() - t;
  assert.equal(h.status, 200);
  assert.ok(during < 250, `health took ${during.toFixed(0)} ms during the evaluation`);
  const r = await started;
  assert.ok(r.status === 201, JSON.stringify(r.body));
  return await closed(c, r.body.execution_id);
}

Deno.test("hostile definitions fail their own execution or are refused, and the server keeps answering", async (t) => {
  const dir = await tempDir();
  const db = `${dir}/orbit.db`;
  let server: ServerProcess = await startServer({ db, args: ARGS });
  let c = api(server.url);
  try {
    await deploy(c, returning("Hostile.Instant", "{% $input %}"));
    await deploy(
      c,
      doc("Hostile.Waiter", [{ id: "w", wait_signal: "go" }], { signals: { go: {} } }),
    );
    const done = await start(c, "Hostile.Instant", { n: 1 });
    const waiting = await start(c, "Hostile.Waiter");
    const ids = [done.body.execution_id, waiting.body.execution_id];
    const before = await witnesses(c, ids);
    const check = async (what: string) => {
      await assertResponsive(c, what);
      assert.deepEqual(await witnesses(c, ids), before, `${what}: a witness changed`);
    };

    const limitCases: Array<[string, string]> = [
      ["a tail call that never ends", LOOP],
      ["recursion without end", DEEP],
      ["a huge array built by an expression", "{% $map([1..100000], function($v){ [1..100] }) %}"],
      ["a sequence past the limit", "{% [1..5000000].($ * 2) %}"],
      ["a string built past the result limit", '{% $pad("", 5000000) %}'],
      ["a quadratic built-in over a large array", "{% $count($distinct([1..100000])) %}"],
      ["an order-by over a large array", "{% $count([1..100000]^(-$)) %}"],
    ];
    for (const [name, expr] of limitCases) {
      await t.step(`${name} in a return fails the execution with EXPRESSION_LIMIT`, async () => {
        const wf = `Hostile.${name.replace(/[^A-Za-z]+/g, "_")}`;
        await deploy(c, returning(wf, expr));
        const e = await startAndClose(c, wf);
        assert.equal(e.status, "failed");
        assert.equal(e.error.code, "EXPRESSION_LIMIT", JSON.stringify(e.error));
        await check(name);
      });
    }

    await t.step("a loop in every expression position fails its execution", async () => {
      const positions: Record<string, unknown[]> = {
        input: [{ id: "t", task: "never.runs", contract: "1", input: { x: LOOP } }],
        if: [{ id: "b", if: LOOP, then: [] }],
        assign: [{ id: "a", assign: { x: DEEP } }],
        sleep: [{ id: "s", sleep_s: LOOP }],
        child: [{ id: "c", child: { workflow: "Hostile.Instant", input: LOOP } }],
        continue: [{ id: "again", continue_as_new: { input: DEEP } }],
      };
      for (const [where, steps] of Object.entries(positions)) {
        await deploy(c, doc(`Hostile.Pos_${where}`, steps));
        const e = await startAndClose(c, `Hostile.Pos_${where}`);
        assert.equal(e.status, "failed", `${where}: ${JSON.stringify(e)}`);
        assert.equal(e.error.code, "EXPRESSION_LIMIT", `${where}: ${JSON.stringify(e.error)}`);
      }
      await check("expression positions");
    });

    await t.step(
      "a compensation input that loops fails that compensation, not the server",
      async () => {
        await deploy(
          c,
          doc("Hostile.Saga", [
            {
              id: "pay",
              task: "hostile.pay",
              contract: "1",
              compensate: { task: "hostile.refund", contract: "1", input: LOOP },
            },
            { id: "w", wait_signal: "go" },
          ], { signals: { go: {} } }),
        );
        const s = await start(c, "Hostile.Saga");
        const id = s.body.execution_id;
        const session = await registerWorker(c, {
          worker_id: "hostile-w",
          runtime: "test",
          tasks: [{ name: "hostile.pay", contract: "1" }],
          concurrency: 1,
        });
        const polled = await c.post("/v1/workers/poll", {
          session_id: session,
          max_tasks: 1,
          wait_s: 10,
        });
        assert.equal(polled.body.tasks.length, 1, JSON.stringify(polled.body));
        const done = await c.post("/v1/tasks/complete", {
          token: polled.body.tasks[0].token,
          output: { paid: true },
        });
        assert.equal(done.status, 200, JSON.stringify(done.body));
        // Cancelling runs the compensation of "pay", whose input loops.
        const cancel = await c.post(`/v1/executions/${id}/cancel`, { reason: "hostile" });
        assert.equal(cancel.status, 200, JSON.stringify(cancel.body));
        const e = await closed(c, id);
        assert.equal(e.status, "cancelled", JSON.stringify(e));
        const h = await c.get(`/v1/executions/${id}/history`);
        const failed = h.body.events.find((x: { type: string; step?: string }) =>
          x.type === "StepFailed" && x.step !== "pay"
        );
        assert.equal(failed?.error?.code, "EXPRESSION_LIMIT", JSON.stringify(h.body.events));
        await c.post("/v1/workers/unregister", { session_id: session });
        await check("saga");
      },
    );

    await t.step("a backtracking pattern in an input_schema answers at once", async () => {
      await deploy(
        c,
        doc("Hostile.Pattern", [{ id: "done", return: "{% $input %}" }], {
          input_schema: { type: "string", pattern: "^(a+)+$" },
        }),
      );
      const t0 = performance.now();
      const r = await start(c, "Hostile.Pattern", "a".repeat(5_000) + "!");
      const took = performance.now() - t0;
      assert.equal(r.status, 422, JSON.stringify(r.body));
      assert.equal(r.body.error.code, "INPUT_INVALID");
      assert.ok(took < 1_000, `the start took ${took.toFixed(0)} ms`);
      await check("pattern");
    });

    await t.step("patterns RE2 cannot run are refused at deploy", async () => {
      for (
        const d of [
          returning("Hostile.Backref", "{% $match($input, /(a)\\1/) %}"),
          doc("Hostile.Lookahead", [{ id: "done", return: 1 }], {
            input_schema: { type: "string", pattern: "(?=a)b" },
          }),
        ]
      ) {
        const r = await c.post("/v1/workflows", d);
        assert.equal(r.status, 422, JSON.stringify(r.body));
        assert.equal(r.body.error.code, "INVALID_WORKFLOW");
        assert.match(JSON.stringify(r.body.error.problems), /linear-time engine/);
      }
      await check("regex deploy");
    });

    await t.step("a query that loops answers 422 EXPRESSION_LIMIT", async () => {
      await deploy(
        c,
        doc("Hostile.Query", [{ id: "w", wait_signal: "go" }], {
          signals: { go: {} },
          queries: { spin: LOOP },
        }),
      );
      const s = await start(c, "Hostile.Query");
      const q = await c.get(`/v1/executions/${s.body.execution_id}/queries/spin`);
      assert.equal(q.status, 422, JSON.stringify(q.body));
      assert.equal(q.body.error.code, "EXPRESSION_LIMIT");
      const e = await c.get(`/v1/executions/${s.body.execution_id}`);
      assert.equal(e.body.status, "running");
      await check("query");
    });

    await t.step("a signal handler that loops fails its execution", async () => {
      await deploy(
        c,
        doc("Hostile.Handler", [{ id: "w", wait_signal: "done" }], {
          signals: { poke: {}, done: {} },
          handlers: { poke: [{ id: "spin", assign: { x: LOOP } }] },
        }),
      );
      const s = await start(c, "Hostile.Handler");
      const id = s.body.execution_id;
      const sig = await c.post(`/v1/executions/${id}/signals/poke`, { payload: 1 });
      assert.equal(sig.status, 200, JSON.stringify(sig.body));
      const e = await closed(c, id);
      assert.equal(e.status, "failed");
      assert.equal(e.error.code, "EXPRESSION_LIMIT");
      await check("handler");
    });

    await t.step("9,999 synchronous steps run; 10,001 are refused at deploy", async () => {
      const many = (n: number) =>
        doc(
          `Hostile.Many${n}`,
          Array.from({ length: n }, (_, i) => ({ id: `s${i}`, assign: { n: i } })),
        );
      await deploy(c, many(9_999));
      const s = await start(c, "Hostile.Many9999");
      assert.equal(s.status, 201, JSON.stringify(s.body));
      const e = await closed(c, s.body.execution_id);
      assert.equal(e.status, "completed");
      const r = await c.post("/v1/workflows", many(10_001));
      assert.equal(r.status, 422);
      assert.match(r.body.error.problems[0].message, /at most 10000 steps/);
      await check("many steps");
    });

    await t.step("a version npm semver cannot read is refused and poisons nothing", async () => {
      const r = await c.post("/v1/workflows", {
        ...returning("Hostile.Instant", "{% $input %}"),
        version: "9007199254740993.0.0",
      });
      assert.equal(r.status, 422, JSON.stringify(r.body));
      assert.equal(r.body.error.problems[0].path, "$.version");
      const s = await start(c, "Hostile.Instant", { n: 2 });
      assert.equal(s.status, 201, JSON.stringify(s.body));
      await check("version");
    });

    await t.step(
      "a computed sleep past a year fails the step; /pending still answers",
      async () => {
        await deploy(c, doc("Hostile.Sleep", [{ id: "nap", sleep_s: "{% 1e300 %}" }]));
        const s = await start(c, "Hostile.Sleep");
        const e = await closed(c, s.body.execution_id);
        assert.equal(e.status, "failed");
        assert.equal(e.error.code, "EXPRESSION_ERROR");
        assert.match(e.error.message, /from 0 to 31536000/);
        const p = await c.get(`/v1/executions/${s.body.execution_id}/pending`);
        assert.equal(p.status, 200, JSON.stringify(p.body));
        await check("sleep");
      },
    );

    await t.step("a schedule firing a looping workflow fails each occurrence", async () => {
      await deploy(c, returning("Hostile.Scheduled", LOOP));
      const r = await c.post("/v1/schedules", {
        schedule_id: "hostile-loop",
        workflow: "Hostile.Scheduled",
        every_s: 1,
        overlap: "allow_all",
      });
      assert.equal(r.status, 201, JSON.stringify(r.body));
      const failed = await waitFor(async () => {
        const l = await c.get("/v1/executions?workflow=Hostile.Scheduled&status=failed");
        return l.body.executions.length >= 2 ? l.body.executions : null;
      }, "two failed occurrences");
      for (const e of failed) assert.equal(e.error.code, "EXPRESSION_LIMIT");
      assert.equal((await c.call("DELETE", "/v1/schedules/hostile-loop")).status, 200);
      await check("schedule");
    });

    await t.step(
      "a schedule firing a workflow that starts itself as a child stops at the depth limit",
      async () => {
        await deploy(
          c,
          doc("Hostile.Bomb", [
            { id: "again", child: { workflow: "Hostile.Bomb", input: "{% $input %}" } },
          ]),
        );
        const r = await c.post("/v1/schedules", {
          schedule_id: "hostile-bomb",
          workflow: "Hostile.Bomb",
          every_s: 1,
          overlap: "allow_all",
        });
        assert.equal(r.status, 201, JSON.stringify(r.body));
        type Row = { execution_id: string; root_id: string; parent_id: string | null };
        const roots = await waitFor(async () => {
          const l = await c.get("/v1/executions?workflow=Hostile.Bomb&status=failed&limit=500");
          const found = l.body.executions.filter((e: Row) => !e.parent_id);
          return found.length >= 2 ? found : null;
        }, "two failed occurrences");
        assert.equal((await c.call("DELETE", "/v1/schedules/hostile-bomb")).status, 200);
        for (const root of roots) assert.equal(root.error.code, "CHILD_FAILED");
        await waitFor(async () => {
          const l = await c.get("/v1/executions?workflow=Hostile.Bomb&status=running");
          return l.body.executions.length === 0;
        }, "every tree to close");
        // Each occurrence is a chain of at most 1 + 5 executions (--max-child-depth 5).
        const all = await c.get("/v1/executions?workflow=Hostile.Bomb&limit=500");
        const rows: Row[] = all.body.executions;
        const rootIds = new Set(rows.filter((e) => !e.parent_id).map((e) => e.execution_id));
        for (const id of rootIds) {
          const tree = rows.filter((e) => e.root_id === id);
          assert.ok(tree.length <= 6, `${id}: ${tree.length} executions`);
        }
        await check("fork bomb schedule");
      },
    );

    await t.step(
      "a looping expression behind a timer fails after a restart instead of hanging again",
      async () => {
        await deploy(
          c,
          doc("Hostile.Later", [{ id: "nap", sleep_s: 1 }, { id: "r", return: LOOP }]),
        );
        const s = await start(c, "Hostile.Later");
        const id = s.body.execution_id;
        await server.kill("SIGKILL");
        server = await startServer({ db, args: ARGS });
        c = api(server.url);
        const e = await closed(c, id);
        assert.equal(e.status, "failed");
        assert.equal(e.error.code, "EXPRESSION_LIMIT");
        await check("restart");
      },
    );
  } finally {
    await server.kill("SIGKILL").catch(() => {});
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
});
