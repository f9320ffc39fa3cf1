// The SDK on Node 20: runs the bundle (ORBIT_SDK_BUNDLE, default dist/orbit-sdk.mjs) against a
// fake ORBIT runtime written with node:http.
//
//   bash sdk/typescript/build_node.sh && node --test sdk/typescript/node_test.mjs
//
// `deno test` collects this file too; there it runs the same tests on ./mod.ts (Deno's node:http
// and node:test), unless ORBIT_SDK_BUNDLE names a bundle.

import assert from "node:assert/strict";
import http from "node:http";
import process from "node:process";
import { test } from "node:test";

const inDeno = typeof globalThis.Deno !== "undefined";
const target = process.env.ORBIT_SDK_BUNDLE
  ? new URL(process.env.ORBIT_SDK_BUNDLE, `file://${process.cwd()}/`).href
  : new URL(inDeno ? "./mod.ts" : "./dist/orbit-sdk.mjs", import.meta.url).href;
const sdk = await import(target);
const { Client, defineTask, expr, TaskError, Worker, workflow, z } = sdk;

/** Resolves once `check()` is truthy (re-checked every 10 ms); rejects after `ms`. */
async function waitFor(check, what, ms = 10_000) {
  const until = Date.now() + ms;
  for (;;) {
    const value = check();
    if (value) return value;
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** A fake ORBIT runtime: the worker protocol, a few client routes, and injected faults. */
async function fakeOrbit() {
  const state = {
    faults: new Map(), // path -> ["drop" | {status, code, message}]
    sessions: new Map(),
    registers: [],
    unregisters: [],
    polls: [],
    heartbeats: [],
    results: [],
    queue: [],
    cancel: new Set(),
    dropped: 0,
    executions: new Map(),
    changed: [],
  };
  let seq = 0;
  const notify = () => state.changed.splice(0).forEach((f) => f());
  const nextChange = (ms, res) =>
    new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        res.off("close", done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      state.changed.push(done);
      res.once("close", done);
    });
  const send = (res, status, body) => {
    if (res.writableEnded || res.destroyed) return;
    res.writeHead(status, { "content-type": "application/json", connection: "close" });
    res.end(JSON.stringify(body));
  };
  const error = (res, status, code, message) => send(res, status, { error: { code, message } });

  const server = http.createServer(async (req, res) => {
    let raw = "";
    for await (const chunk of req) raw += chunk;
    const body = raw ? JSON.parse(raw) : {};
    const url = new URL(req.url, "http://x");
    const path = url.pathname;
    const fault = state.faults.get(path)?.shift();
    if (fault === "drop") {
      state.dropped++;
      req.socket.destroy();
      return;
    }
    if (fault) return error(res, fault.status, fault.code, fault.message ?? "injected");
    if (req.headers.authorization !== "Bearer node-token") {
      return error(res, 401, "UNAUTHENTICATED", "bad token");
    }
    try {
      await route(req, res, path, url, body);
    } finally {
      notify();
    }
  });

  async function route(req, res, path, url, body) {
    if (path === "/v1/workers/register") {
      state.registers.push(body);
      const id = `node-session-${state.registers.length}`;
      state.sessions.set(id, body);
      return send(res, 200, { session_id: id });
    }
    if (path === "/v1/workers/poll") {
      state.polls.push(body);
      const until = Date.now() + Math.min(body.wait_s, 60) * 1000;
      for (;;) {
        if (!state.sessions.has(body.session_id)) {
          return error(res, 404, "UNKNOWN_SESSION", "unknown session");
        }
        if (state.queue.length > 0) {
          return send(res, 200, { tasks: state.queue.splice(0, body.max_tasks) });
        }
        if (Date.now() >= until || res.destroyed) return send(res, 200, { tasks: [] });
        await nextChange(until - Date.now(), res);
      }
    }
    if (path === "/v1/workers/heartbeat") {
      state.heartbeats.push(body);
      if (!state.sessions.has(body.session_id)) {
        return error(res, 404, "UNKNOWN_SESSION", "unknown session");
      }
      const cancel = body.tokens.filter((t) => state.cancel.delete(t));
      return send(res, 200, { cancel });
    }
    if (path === "/v1/workers/unregister") {
      state.unregisters.push(body.session_id);
      state.sessions.delete(body.session_id);
      return send(res, 200, {});
    }
    if (path === "/v1/tasks/complete" || path === "/v1/tasks/fail") {
      const accepted = !state.results.some((r) => r.token === body.token);
      state.results.push({ kind: path.endsWith("complete") ? "complete" : "fail", ...body });
      return send(res, 200, { accepted });
    }
    if (path === "/v1/health") return send(res, 200, { status: "ok", api_version: "orbit-api/1" });
    if (path === "/v1/workflows" && req.method === "POST") {
      return send(res, 201, { name: body.name, version: body.version });
    }
    if (path === "/v1/executions" && req.method === "POST") {
      const ex = {
        execution_id: body.execution_id ?? `ex-${state.executions.size + 1}`,
        run_id: "r1",
        root_id: body.execution_id,
        workflow: body.workflow,
        version: "1.0.0",
        status: "running",
        input: body.input ?? null,
        created_ms: Date.now(),
      };
      state.executions.set(ex.execution_id, ex);
      return send(res, 201, ex);
    }
    const wait = /^\/v1\/executions\/([^/]+)\/wait$/.exec(path);
    if (wait) {
      const ex = state.executions.get(decodeURIComponent(wait[1]));
      if (!ex) return error(res, 404, "UNKNOWN_EXECUTION", "no such execution");
      const until = Date.now() + Number(url.searchParams.get("timeout_s")) * 1000;
      while (ex.status === "running" && Date.now() < until && !res.destroyed) {
        await nextChange(until - Date.now(), res);
      }
      return send(res, 200, ex);
    }
    return error(res, 404, "NOT_FOUND", `no route ${path}`);
  }

  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${server.address().port}`;
  return {
    url,
    state,
    inject(path, ...faults) {
      state.faults.set(path, [...(state.faults.get(path) ?? []), ...faults]);
    },
    enqueue(task, input, extra = {}) {
      const execution_id = `ex-${++seq}`;
      const t = {
        token: `${execution_id}/${crypto.randomUUID()}`,
        execution_id,
        step: "s",
        attempt: 1,
        task,
        contract: "1",
        input,
        idempotency_key: `${execution_id}/s`,
        redelivery: false,
        deadline_ms: Date.now() + 60_000,
        ...extra,
      };
      state.queue.push(t);
      notify();
      return t;
    },
    resultsFor: (token) => state.results.filter((r) => r.token === token),
    notify,
    close: () =>
      new Promise((resolve) => {
        notify();
        server.closeAllConnections?.();
        server.close(() => resolve());
      }),
  };
}

function recordingLogger() {
  const lines = [];
  const add = (level) => (message, fields) => lines.push({ level, message, fields });
  return {
    lines,
    text: () => lines.map((l) => `${l.level} ${l.message}`).join("\n"),
    debug: add("debug"),
    info: add("info"),
    warn: add("warn"),
    error: add("error"),
  };
}

test("a worker on the bundle survives 503s and drops, validates with zod, honours cancels", async () => {
  const fake = await fakeOrbit();
  const logger = recordingLogger();
  let releaseSlow;
  const slowGate = new Promise((resolve) => (releaseSlow = resolve));
  const charge = defineTask({
    name: "payments.charge",
    contract: "1",
    input: z.object({ amount: z.number().positive() }),
    output: z.object({ charge_id: z.string() }),
    handler: async ({ amount }, ctx) => {
      if (amount === 13) throw new TaskError("UNLUCKY", "not today", { retryable: false });
      if (amount === 99) {
        await new Promise((_resolve, reject) =>
          ctx.signal.addEventListener("abort", () => reject(ctx.signal.reason))
        );
      }
      if (amount === 7) await slowGate;
      return { charge_id: `ch-${amount}-${ctx.idempotencyKey}` };
    },
  });
  const worker = new Worker({
    server: fake.url,
    token: "node-token",
    workerId: "node-worker",
    tasks: [charge],
    concurrency: 2,
    pollWaitS: 5,
    heartbeatMs: 50,
    logger,
  });
  fake.inject("/v1/workers/register", { status: 503, code: "NOT_LEADER", message: "standby" });
  fake.inject("/v1/tasks/complete", "drop", { status: 503, code: "NOT_LEADER" });
  try {
    await worker.start();
    assert.equal(fake.state.registers.length, 1);
    assert.deepEqual(fake.state.registers[0], {
      worker_id: "node-worker",
      runtime: "typescript",
      tasks: [{ name: "payments.charge", contract: "1" }],
      concurrency: 2,
    });

    const ok = fake.enqueue("payments.charge", { amount: 5 });
    await waitFor(() => fake.resultsFor(ok.token).length === 1, "the first result");
    assert.equal(fake.state.dropped, 1);
    assert.deepEqual(fake.resultsFor(ok.token)[0].output, {
      charge_id: `ch-5-${ok.execution_id}/s`,
    });

    const bad = fake.enqueue("payments.charge", { amount: "five" });
    const unlucky = fake.enqueue("payments.charge", { amount: 13 });
    await waitFor(
      () => fake.resultsFor(bad.token).length && fake.resultsFor(unlucky.token).length,
      "failures",
    );
    assert.equal(fake.resultsFor(bad.token)[0].error.code, "INVALID_INPUT");
    assert.equal(fake.resultsFor(bad.token)[0].error.retryable, false);
    assert.deepEqual(fake.resultsFor(unlucky.token)[0].error, {
      code: "UNLUCKY",
      message: "not today",
      retryable: false,
      details: {},
    });

    const cancelled = fake.enqueue("payments.charge", { amount: 99 });
    await waitFor(
      () => fake.state.heartbeats.some((h) => h.tokens.includes(cancelled.token)),
      "a heartbeat",
    );
    fake.state.cancel.add(cancelled.token);
    await waitFor(() => fake.resultsFor(cancelled.token).length === 1, "the cancelled result");
    assert.equal(fake.resultsFor(cancelled.token)[0].error.code, "CANCELLED");

    // graceful stop waits for the running task and reports it before unregistering
    const slow = fake.enqueue("payments.charge", { amount: 7 });
    await waitFor(() => worker.runningTokens.includes(slow.token), "the slow task to run");
    let stopped = false;
    const stopping = worker.stop().then(() => (stopped = true));
    await waitFor(() => worker.state === "stopping", "stopping");
    assert.equal(stopped, false);
    assert.deepEqual(fake.state.unregisters, []);
    releaseSlow();
    await stopping;
    assert.equal(fake.resultsFor(slow.token).length, 1);
    assert.deepEqual(fake.state.unregisters, ["node-session-1"]);
    assert.ok(
      fake.state.results.every((r, i, all) => all.findIndex((o) => o.token === r.token) === i),
    );

    const text = logger.text();
    assert.match(
      text,
      /warn register failed: ORBIT runtime at \S+ answered 503 NOT_LEADER: standby; retrying in 0\.2s/,
    );
    assert.match(
      text,
      new RegExp(
        `warn report result failed: cannot reach ORBIT runtime at ${fake.url}: .+; retrying in 0\\.2s`,
      ),
    );
  } finally {
    await worker.stop();
    await fake.close();
  }
});

test("the client and the builder work on the bundle", async () => {
  const fake = await fakeOrbit();
  try {
    const client = new Client({ server: fake.url, token: "node-token" });
    assert.equal((await client.health()).status, "ok");
    const doc = workflow("Greeting", "1.0.0")
      .task("greet", { task: "greet", contract: "1", input: expr("$input") })
      .sleep("pause", 1)
      .returns(expr("$steps.greet"));
    assert.equal(doc.build().ir, "orbit-ir/2");
    await client.deploy(doc);
    const ex = await client.start(doc, { input: { name: "node" }, executionId: "g1" });
    assert.equal(ex.status, "running");
    const waiting = client.wait("g1", { timeoutS: 10 });
    await waitFor(() => fake.state.changed.length > 0, "a held wait");
    fake.state.executions.get("g1").status = "completed";
    fake.notify();
    assert.equal((await waiting).status, "completed");
    await assert.rejects(client.get("missing"), (err) => {
      assert.equal(err.name, "OrbitApiError");
      assert.equal(err.status, 404);
      return true;
    });
  } finally {
    await fake.close();
  }
});

test("the console logger's gathered lines are written when the process exits", async () => {
  // A child process logs one info line and exits before the gathering time is over.
  const { spawnSync } = await import("node:child_process");
  const script = `const { consoleLogger } = await import(${JSON.stringify(target)});
consoleLogger().info("gathered", { n: 1 });
${inDeno ? "Deno.exit(0);" : "process.exit(0);"}`;
  const args = inDeno ? ["eval", "--ext=js", script] : ["--input-type=module", "-e", script];
  const r = spawnSync(process.execPath, args, {
    encoding: "utf8",
    env: { ...process.env, NO_COLOR: "1" },
  });
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, /^\S+Z INFO orbit gathered \{"n":1\}\n$/);
});
