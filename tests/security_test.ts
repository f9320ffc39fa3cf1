/**
 * `--workers-file` against a real server process: worker protocol routes take a worker's own
 * token (the client token is refused there), client routes refuse worker tokens, a worker may
 * register only as itself and only for the tasks the file lets it serve, and it cannot use
 * another worker's session or task token. Refused calls change nothing. Bad files stop the
 * server with `error: …` and exit code 2.
 */
import assert from "node:assert/strict";
import { api, startServer, tempDir } from "./support/server.ts";
import { serverRefusal } from "./support/refusal.ts";
import { testEachStore } from "./support/stores.ts";
import { defineTask, OrbitApiError, silentLogger, Worker } from "../sdk/typescript/mod.ts";
import { createApp } from "../routes/app.ts";
import { Runtime } from "../lib/runtime.ts";
import { openSqliteStore } from "../lib/store/sqlite.ts";

const CLIENT = "client-token-0123456789abcdef";
const ORDERS = {
  worker_id: "orders-ts",
  token: "orders-token-0123456789abcdef",
  tasks: [{ name: "orders.*" }],
};
const PAYMENTS = {
  worker_id: "payments",
  token: "payments-token-0123456789abcdef",
  tasks: [{ name: "payments.charge", contract: "1" }],
};
const WORKERS = { workers: [ORDERS, PAYMENTS] };

const FLOW = {
  ir: "orbit-ir/1",
  name: "Secure.Order",
  version: "1.0.0",
  steps: [
    { id: "validate", task: "orders.validate", contract: "1", input: "{% $input %}" },
    { id: "charge", task: "payments.charge", contract: "1", input: "{% $steps.validate %}" },
  ],
};

const WORKER_ROUTES = [
  "/v1/workers/register",
  "/v1/workers/poll",
  "/v1/workers/heartbeat",
  "/v1/workers/unregister",
  "/v1/tasks/complete",
  "/v1/tasks/fail",
];

async function writeJson(doc: unknown, name = "workers.json"): Promise<string> {
  const path = `${await tempDir()}/${name}`;
  await Deno.writeTextFile(path, typeof doc === "string" ? doc : JSON.stringify(doc));
  return path;
}

const registration = (worker_id: string, tasks: Array<{ name: string; contract: string }>) => ({
  worker_id,
  runtime: "typescript",
  tasks,
  concurrency: 1,
});

testEachStore(
  "with --workers-file each worker serves only its own tasks, as itself",
  async (store) => {
    const file = await writeJson(WORKERS);
    const server = await startServer({
      db: await store.newDb(),
      args: ["--token", CLIENT, "--workers-file", file],
    });
    try {
      assert.ok(server.logs.some((l) => l.includes(`workers file loaded path=${file} workers=2`)));
      const client = api(server.url, CLIENT);
      const orders = api(server.url, ORDERS.token);
      const pay = api(server.url, PAYMENTS.token);

      // The worker protocol takes worker tokens only; client routes the client token only.
      for (const path of WORKER_ROUTES) {
        for (const caller of [api(server.url), api(server.url, "not-a-known-token-0123")]) {
          const r = await caller.post(path, {});
          assert.equal(r.status, 401, path);
          assert.equal(r.body.error.code, "UNAUTHORIZED");
          assert.equal(r.headers.get("www-authenticate"), 'Bearer realm="orbit"');
        }
        const r = await client.post(path, {});
        assert.equal(r.status, 403, path);
        assert.equal(r.body.error.code, "WORKER_TOKEN_REQUIRED");
      }
      for (
        const [method, path] of [
          ["POST", "/v1/workflows"],
          ["GET", "/v1/workflows"],
          ["POST", "/v1/executions"],
          ["GET", "/v1/executions"],
          ["GET", "/v1/executions/sec-1"],
          ["POST", "/v1/executions/sec-1/cancel"],
          ["GET", "/v1/workers"],
          ["GET", "/v1/metrics"],
          ["POST", "/v1/workers/register/"],
          ["GET", "/v1/no-such-route"],
        ] as const
      ) {
        const r = await orders.call(method, path, method === "POST" ? {} : undefined);
        assert.equal(r.status, 403, `${method} ${path}`);
        assert.equal(r.body.error.code, "CLIENT_TOKEN_REQUIRED");
      }
      assert.equal((await api(server.url).get("/v1/health")).status, 200);
      assert.equal((await api(server.url).get("/v1/ready")).status, 200);

      // Registration: as itself, for tasks the file allows.
      const validate = { name: "orders.validate", contract: "1" };
      const charge = { name: "payments.charge", contract: "1" };
      let r = await orders.post("/v1/workers/register", registration("payments", [charge]));
      assert.equal(r.status, 403);
      assert.equal(r.body.error.code, "FORBIDDEN_WORKER");
      r = await orders.post("/v1/workers/register", registration("orders-ts", [validate, charge]));
      assert.equal(r.status, 403);
      assert.equal(r.body.error.code, "TASK_NOT_ALLOWED");
      assert.deepEqual(r.body.error.tasks, [charge]);
      assert.match(r.body.error.message, /orders-ts may not serve payments\.charge@1/);
      r = await pay.post(
        "/v1/workers/register",
        registration("payments", [{ name: "payments.charge", contract: "2" }]),
      );
      assert.equal(r.status, 403);
      assert.equal(r.body.error.code, "TASK_NOT_ALLOWED");
      r = await orders.post("/v1/workers/register", { worker_id: "orders-ts", tasks: "orders.*" });
      assert.equal(r.status, 422, "a malformed body is the route's to refuse");
      assert.equal(r.body.error.code, "INVALID_REQUEST");
      // No other spelling of a worker route lets the client token through.
      for (
        const path of [
          "/v1/workers/%72egister",
          "/v1/workers/register?x=1",
          "/v1/workers/./register",
          "/v1/x/../workers/register",
          "/v1/workers/register/",
          "/v1//workers/register",
          "/v1/Workers/register",
        ]
      ) {
        r = await client.post(path, registration("orders-ts", [validate]));
        assert.ok([403, 404].includes(r.status), `${path}: ${r.status}`);
      }
      assert.deepEqual((await client.get("/v1/workers")).body.workers, [], "nothing registered");

      r = await orders.post("/v1/workers/register", registration("orders-ts", [validate]));
      assert.equal(r.status, 200);
      const ordersSession = r.body.session_id;
      r = await pay.post("/v1/workers/register", registration("payments", [charge]));
      assert.equal(r.status, 200);
      const paySession = r.body.session_id;

      assert.equal((await client.post("/v1/workflows", FLOW)).status, 201);
      r = await client.post("/v1/executions", {
        workflow: FLOW.name,
        execution_id: "sec-1",
        input: { order_id: "o-1" },
      });
      assert.equal(r.status, 201);

      // Another worker's session.
      for (
        const [path, body] of [
          ["/v1/workers/poll", { session_id: ordersSession, wait_s: 0 }],
          ["/v1/workers/heartbeat", { session_id: ordersSession, tokens: [] }],
          ["/v1/workers/unregister", { session_id: ordersSession }],
        ] as const
      ) {
        r = await pay.post(path, body);
        assert.equal(r.status, 403, path);
        assert.equal(r.body.error.code, "FORBIDDEN_WORKER");
      }

      // Another worker's task token.
      r = await orders.post("/v1/workers/poll", { session_id: ordersSession, wait_s: 10 });
      assert.equal(r.status, 200);
      assert.equal(r.body.tasks.length, 1);
      assert.equal(r.body.tasks[0].step, "validate");
      const token: string = r.body.tasks[0].token;
      for (
        const [path, body] of [
          ["/v1/tasks/complete", { token, output: { total: 1 } }],
          ["/v1/tasks/fail", { token, error: { code: "X", message: "x", retryable: false } }],
          ["/v1/workers/heartbeat", { session_id: paySession, tokens: [token] }],
        ] as const
      ) {
        r = await pay.post(path, body);
        assert.equal(r.status, 403, path);
        assert.equal(r.body.error.code, "FORBIDDEN_WORKER");
      }
      r = await orders.post("/v1/tasks/complete", {
        token,
        output: { total: 1 },
        session_id: paySession,
        max_tasks: 1,
      });
      assert.equal(r.status, 403, "its own token with another worker's session");
      assert.equal(r.body.error.code, "FORBIDDEN_WORKER");
      const before = (await client.get("/v1/executions/sec-1/history")).body.events;
      assert.deepEqual(
        before.filter((e: { step?: string }) => e.step === "validate").map((e: { type: string }) =>
          e.type
        ),
        ["StepScheduled", "StepDispatched"],
        "the refused results changed nothing",
      );
      assert.equal((await client.get("/v1/workers")).body.workers.length, 2);

      // Each worker does its own part.
      r = await orders.post("/v1/workers/heartbeat", {
        session_id: ordersSession,
        tokens: [token],
      });
      assert.deepEqual(r.body, { cancel: [] });
      r = await orders.post("/v1/tasks/complete", { token, output: { total: 42 } });
      assert.equal(r.body.accepted, true);
      r = await pay.post("/v1/workers/poll", { session_id: paySession, wait_s: 10 });
      assert.equal(r.body.tasks[0].step, "charge");
      assert.deepEqual(r.body.tasks[0].input, { total: 42 });
      r = await pay.post("/v1/tasks/complete", { token: r.body.tasks[0].token, output: "paid" });
      assert.equal(r.body.accepted, true);
      r = await client.get("/v1/executions/sec-1/wait?timeout_s=10");
      assert.equal(r.body.status, "completed");
      const events = (await client.get("/v1/executions/sec-1/history")).body.events;
      assert.deepEqual(
        events.filter((e: { type: string }) => e.type === "StepDispatched").map((
          e: { step: string; worker_id: string },
        ) => [e.step, e.worker_id]),
        [["validate", "orders-ts"], ["charge", "payments"]],
      );
      r = await orders.post("/v1/workers/unregister", { session_id: ordersSession });
      assert.equal(r.status, 200);
    } finally {
      await server.kill("SIGKILL");
    }
  },
);

Deno.test({
  name:
    "with a workers file and no --token the client API stays open, the worker protocol does not",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const file = await writeJson(WORKERS);
    const server = await startServer({
      db: `${await tempDir()}/orbit.db`,
      env: { ORBIT_WORKERS_FILE: file },
    });
    const ok = new Worker({
      server: server.url,
      token: ORDERS.token,
      workerId: ORDERS.worker_id,
      logger: silentLogger,
      tasks: [
        defineTask({ name: "orders.validate", contract: "1", handler: () => ({ total: 7 }) }),
      ],
    });
    try {
      const anyone = api(server.url);
      assert.equal((await anyone.get("/v1/executions")).status, 200);
      let r = await anyone.post("/v1/workers/register", registration("orders-ts", []));
      assert.equal(r.status, 401);
      r = await api(server.url, ORDERS.token).get("/v1/executions");
      assert.equal(r.status, 403, "a worker token is refused on client routes, open or not");
      assert.equal(r.body.error.code, "CLIENT_TOKEN_REQUIRED");

      // The SDK: a worker refused at registration fails to start with the server's code.
      const greedy = new Worker({
        server: server.url,
        token: ORDERS.token,
        workerId: ORDERS.worker_id,
        logger: silentLogger,
        tasks: [defineTask({ name: "payments.charge", contract: "1", handler: () => "paid" })],
      });
      await assert.rejects(
        greedy.start(),
        (e) => e instanceof OrbitApiError && e.status === 403 && e.code === "TASK_NOT_ALLOWED",
      );

      // With its own token it registers and runs its task.
      await ok.start();
      assert.equal(
        (await anyone.post("/v1/workflows", {
          ...FLOW,
          name: "Secure.Validate",
          steps: [FLOW.steps[0]],
        })).status,
        201,
      );
      await anyone.post("/v1/executions", { workflow: "Secure.Validate", execution_id: "v-1" });
      const done = await anyone.get("/v1/executions/v-1/wait?timeout_s=20");
      assert.equal(done.body.status, "completed");
      assert.deepEqual(done.body.output, { validate: { total: 7 } });
    } finally {
      await ok.stop({ timeoutMs: 2000 });
      await server.kill("SIGKILL");
    }
  },
});

Deno.test("a missing, unparsable or invalid workers file stops the server with exit code 2", async () => {
  const dir = await tempDir();
  const db = ["--db", `${dir}/orbit.db`];
  const missing = `${dir}/nope.json`;
  let r = await serverRefusal([...db, "--workers-file", missing]);
  assert.equal(r.code, 2);
  assert.match(r.stderr, new RegExp(`^error: cannot read --workers-file ${missing}: `, "m"));

  const bad = await writeJson('{"workers": [', "bad.json");
  r = await serverRefusal(db, { ORBIT_WORKERS_FILE: bad });
  assert.equal(r.code, 2);
  assert.match(r.stderr, new RegExp(`^error: workers file ${bad}: not valid JSON: `, "m"));

  const invalid = await writeJson({
    workers: [ORDERS, { ...PAYMENTS, token: "short", tasks: [{ name: "*.x" }] }],
  }, "invalid.json");
  r = await serverRefusal([...db, "--workers-file", invalid]);
  assert.equal(r.code, 2);
  assert.match(r.stderr, new RegExp(`^error: workers file ${invalid}: `, "m"));
  assert.match(r.stderr, /\$\.workers\[1\]\.token: must be at least 16 characters/);
  assert.match(r.stderr, /\$\.workers\[1\]\.tasks\[0\]\.name: `\*` may only end a pattern/);

  const dup = await writeJson({ workers: [ORDERS, { ...PAYMENTS, worker_id: ORDERS.worker_id }] });
  r = await serverRefusal([...db, "--workers-file", dup]);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /\$\.workers\[1\]\.worker_id: duplicate worker id "orders-ts"/);

  const clash = await writeJson(WORKERS, "clash.json");
  r = await serverRefusal([...db, "--workers-file", clash, "--token", ORDERS.token]);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /\$\.workers\[0\]\.token: same as --token/);
  assert.ok(!r.stderr.includes(ORDERS.token.slice(0, 12)), "the token is not printed");
  assert.ok(!r.stderr.includes("    at "), "no stack trace");
  await assert.rejects(Deno.stat(`${dir}/orbit.db`), Deno.errors.NotFound, "no database created");
});

/**
 * The router's own route table (routes/app.ts), so a route is covered the day it is added: every
 * `/v1` route but health and ready refuses a request without a token or with an unknown one
 * (401), the worker protocol (`/v1/workers/<action>`, `/v1/tasks/…`) refuses the client token
 * and every other route refuses a worker token (403); refused calls change nothing. Routes
 * outside `/v1` are the web UI's pages and assets: GET only.
 */
async function routeTable(): Promise<Array<{ method: string; path: string }>> {
  const dir = await tempDir();
  const store = await openSqliteStore(`${dir}/orbit.db`);
  await store.migrate();
  try {
    const rt = new Runtime(store, { sessionTimeoutMs: 30_000, maxActiveExecutions: null });
    const app = createApp(rt, { token: CLIENT, maxBodyBytes: 1 << 20, ui: true });
    const seen = new Set<string>();
    return app.routes
      .filter((r) => r.method !== "ALL")
      .map((r) => ({ method: r.method, path: r.path }))
      .filter((r) => !seen.has(`${r.method} ${r.path}`) && seen.add(`${r.method} ${r.path}`));
  } finally {
    await store.close();
  }
}

Deno.test({
  name: "every route of the router's table refuses missing, unknown and wrong-kind tokens",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const routes = await routeTable();
    const v1 = routes.filter((r) => r.path.startsWith("/v1/"));
    // The table is what the test walks; these prove the walk sees what the hand list missed.
    for (
      const must of ["DELETE /v1/schedules/:id", "PATCH /v1/schedules/:id", "POST /v1/schedules"]
    ) {
      assert.ok(v1.some((r) => `${r.method} ${r.path}` === must), `${must} in the route table`);
    }
    for (const r of routes.filter((r) => !r.path.startsWith("/v1/"))) {
      assert.equal(r.method, "GET", `${r.method} ${r.path}: outside /v1 only the UI's GET pages`);
    }
    const file = await writeJson(WORKERS);
    const server = await startServer({
      db: `${await tempDir()}/orbit.db`,
      args: ["--token", CLIENT, "--workers-file", file],
    });
    try {
      const client = api(server.url, CLIENT);
      assert.equal((await client.post("/v1/workflows", FLOW)).status, 201);
      assert.equal(
        (await client.post("/v1/executions", { workflow: FLOW.name, execution_id: "sec-1" }))
          .status,
        201,
      );
      assert.equal(
        (await client.post("/v1/schedules", {
          schedule_id: "sec-s",
          workflow: FLOW.name,
          every_s: 3600,
          paused: true,
        })).status,
        201,
      );
      const state = async () =>
        await Promise.all(
          ["/v1/workflows", "/v1/executions", "/v1/schedules", "/v1/workers"].map(async (p) =>
            (await client.get(p)).body
          ),
        );
      const before = await state();
      const params: Record<string, string> = { id: "sec-1", name: FLOW.name, version: "1.0.0" };
      for (const r of v1) {
        const path = r.path.replace(/:(\w+)/g, (_, k: string) => params[k] ?? "x")
          .replace("/v1/schedules/sec-1", "/v1/schedules/sec-s");
        const what = `${r.method} ${r.path}`;
        const body = r.method === "GET" || r.method === "DELETE" ? undefined : {};
        if (r.path === "/v1/health" || r.path === "/v1/ready") {
          assert.equal((await api(server.url).call(r.method, path)).status, 200, what);
          continue;
        }
        for (const caller of [api(server.url), api(server.url, "not-a-known-token-0123")]) {
          const a = await caller.call(r.method, path, body);
          assert.equal(a.status, 401, `${what} without a valid token: ${a.status}`);
          assert.equal(a.body.error.code, "UNAUTHORIZED", what);
        }
        const workerRoute = /^\/v1\/(workers\/[a-z]+|tasks\/.+)$/.test(r.path);
        const wrong = workerRoute ? client : api(server.url, ORDERS.token);
        const a = await wrong.call(r.method, path, body);
        assert.equal(a.status, 403, `${what} with the wrong kind of token: ${a.status}`);
        assert.equal(
          a.body.error.code,
          workerRoute ? "WORKER_TOKEN_REQUIRED" : "CLIENT_TOKEN_REQUIRED",
          what,
        );
      }
      assert.deepEqual(await state(), before, "refused calls changed nothing");
    } finally {
      await server.kill("SIGKILL");
    }
  },
});
