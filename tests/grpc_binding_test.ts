/**
 * The gRPC binding (`--grpc-addr`, lib/grpc/server.ts) against the HTTP API of the same server
 * process: every route's twin answers the same for the same request (one table), credentials
 * and the workers file refuse the same way, deadlines end long calls, reflection and
 * grpc.health.v1 answer, and a worker on gRPC and one on HTTP serve one execution.
 *
 * Why one file over 800 lines: the table of requests is the test; its rows share one server
 * (started once for both transports) and run in order, as a client would send them.
 */
import assert from "node:assert/strict";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { api, tempDir, waitFor } from "./support/server.ts";
import { TASKS, WORKFLOW } from "./support/three_steps.ts";
import { asHttp, grpcClient, sameAnswer, startGrpcServer } from "./grpc_support.ts";

const T = { sanitizeOps: false, sanitizeResources: false };
const TOKEN = "client-token-0123456789abcdef";

Deno.test({
  ...T,
  name: "grpc: every route's gRPC twin answers what HTTP answers for the same request",
  fn: async () => {
    const dir = await tempDir();
    const s = await startGrpcServer({
      db: `${dir}/orbit.db`,
      args: ["--token", TOKEN, "--max-body-bytes", "4096"],
    });
    const g = grpcClient(s.grpcAddr, { token: TOKEN });
    try {
      const http = api(s.url, TOKEN);
      const doc = JSON.stringify(WORKFLOW);
      // Made over HTTP: the state both bindings then read.
      assert.equal((await http.post("/v1/workflows", WORKFLOW)).status, 201);
      const input = { n: 0.1, big: 12345678901234567890, tiny: 5e-324, s: "é\u2028" };
      assert.equal(
        (await http.post("/v1/executions", { workflow: "Three", execution_id: "e-1", input }))
          .status,
        201,
      );
      const cancelled = await http.post("/v1/executions", { workflow: "Three", input: 1 });
      const cancelledId = cancelled.body.execution_id;
      assert.equal((await http.post(`/v1/executions/${cancelledId}/cancel`, {})).status, 200);
      // Settled: its first step scheduled and waiting for a worker, so reads do not change.
      await waitFor(async () => {
        const h = (await http.get("/v1/executions/e-1/history")).body;
        return h.events.some((e: { type: string }) => e.type === "StepScheduled");
      }, "e-1 waiting for its first step");
      await waitFor(
        async () => (await http.get(`/v1/executions/${cancelledId}`)).body.status === "cancelled",
        "the cancelled execution closed",
      );

      type Case = [
        string,
        { method: string; path: string; body?: unknown; raw?: string },
        { service: string; rpc: string; request: Record<string, unknown> },
        number,
        string,
      ];
      const cases: Case[] = [
        [
          "health",
          { method: "GET", path: "/v1/health" },
          {
            service: "System",
            rpc: "Health",
            request: {},
          },
          200,
          "OK",
        ],
        [
          "ready",
          { method: "GET", path: "/v1/ready" },
          {
            service: "System",
            rpc: "Ready",
            request: {},
          },
          200,
          "OK",
        ],
        [
          "deploy, identical again",
          { method: "POST", path: "/v1/workflows", raw: doc },
          {
            service: "Workflows",
            rpc: "Deploy",
            request: { document_json: doc },
          },
          200,
          "OK",
        ],
        [
          "deploy, not JSON",
          { method: "POST", path: "/v1/workflows", raw: "{" },
          {
            service: "Workflows",
            rpc: "Deploy",
            request: { document_json: "{" },
          },
          400,
          "INVALID_ARGUMENT",
        ],
        [
          "deploy, breaks the contract",
          {
            method: "POST",
            path: "/v1/workflows",
            body: { name: "X" },
          },
          {
            service: "Workflows",
            rpc: "Deploy",
            request: { document_json: '{"name":"X"}' },
          },
          422,
          "INVALID_ARGUMENT",
        ],
        [
          "deploy, body over --max-body-bytes",
          {
            method: "POST",
            path: "/v1/workflows",
            raw: JSON.stringify({ ...WORKFLOW, pad: "x".repeat(5000) }),
          },
          {
            service: "Workflows",
            rpc: "Deploy",
            request: { document_json: JSON.stringify({ ...WORKFLOW, pad: "x".repeat(5000) }) },
          },
          413,
          "RESOURCE_EXHAUSTED",
        ],
        [
          "deploy, another document under the same version",
          {
            method: "POST",
            path: "/v1/workflows",
            body: { ...WORKFLOW, steps: WORKFLOW.steps.slice(0, 1) },
          },
          {
            service: "Workflows",
            rpc: "Deploy",
            request: {
              document_json: JSON.stringify({ ...WORKFLOW, steps: WORKFLOW.steps.slice(0, 1) }),
            },
          },
          409,
          "ALREADY_EXISTS",
        ],
        [
          "workflows list",
          { method: "GET", path: "/v1/workflows" },
          {
            service: "Workflows",
            rpc: "List",
            request: {},
          },
          200,
          "OK",
        ],
        [
          "workflow",
          { method: "GET", path: "/v1/workflows/Three" },
          {
            service: "Workflows",
            rpc: "Get",
            request: { name: "Three" },
          },
          200,
          "OK",
        ],
        [
          "workflow version",
          { method: "GET", path: "/v1/workflows/Three/1.0.0" },
          {
            service: "Workflows",
            rpc: "Get",
            request: { name: "Three", version: "1.0.0" },
          },
          200,
          "OK",
        ],
        [
          "workflow, bad version",
          { method: "GET", path: "/v1/workflows/Three/one" },
          {
            service: "Workflows",
            rpc: "Get",
            request: { name: "Three", version: "one" },
          },
          422,
          "INVALID_ARGUMENT",
        ],
        [
          "workflow, unknown",
          { method: "GET", path: "/v1/workflows/Nope" },
          {
            service: "Workflows",
            rpc: "Get",
            request: { name: "Nope" },
          },
          404,
          "NOT_FOUND",
        ],
        [
          "start, existing id",
          {
            method: "POST",
            path: "/v1/executions",
            body: { workflow: "Three", execution_id: "e-1", input },
          },
          {
            service: "Executions",
            rpc: "Start",
            request: { workflow: "Three", execution_id: "e-1", input_json: JSON.stringify(input) },
          },
          200,
          "OK",
        ],
        [
          "start, unknown workflow",
          {
            method: "POST",
            path: "/v1/executions",
            body: { workflow: "Nope" },
          },
          {
            service: "Executions",
            rpc: "Start",
            request: { workflow: "Nope" },
          },
          404,
          "NOT_FOUND",
        ],
        [
          "start, bad version",
          {
            method: "POST",
            path: "/v1/executions",
            body: { workflow: "Three", version: "x" },
          },
          {
            service: "Executions",
            rpc: "Start",
            request: { workflow: "Three", version: "x" },
          },
          422,
          "INVALID_ARGUMENT",
        ],
        [
          "execution",
          { method: "GET", path: "/v1/executions/e-1" },
          {
            service: "Executions",
            rpc: "Get",
            request: { execution_id: "e-1" },
          },
          200,
          "OK",
        ],
        [
          "execution, unknown",
          { method: "GET", path: "/v1/executions/nope" },
          {
            service: "Executions",
            rpc: "Get",
            request: { execution_id: "nope" },
          },
          404,
          "NOT_FOUND",
        ],
        [
          "executions list, filtered, one a page",
          {
            method: "GET",
            path: "/v1/executions?workflow=Three&status=running&limit=1",
          },
          {
            service: "Executions",
            rpc: "List",
            request: { workflow: "Three", status: "running", limit: 1 },
          },
          200,
          "OK",
        ],
        [
          "executions list, bad status",
          {
            method: "GET",
            path: "/v1/executions?status=sleepy",
          },
          {
            service: "Executions",
            rpc: "List",
            request: { status: "sleepy" },
          },
          400,
          "INVALID_ARGUMENT",
        ],
        [
          "wait, finished",
          { method: "GET", path: `/v1/executions/${cancelledId}/wait` },
          {
            service: "Executions",
            rpc: "Wait",
            request: { execution_id: cancelledId },
          },
          200,
          "OK",
        ],
        [
          "wait, over 300 s",
          {
            method: "GET",
            path: "/v1/executions/e-1/wait?timeout_s=301",
          },
          {
            service: "Executions",
            rpc: "Wait",
            request: { execution_id: "e-1", timeout_s: 301 },
          },
          400,
          "INVALID_ARGUMENT",
        ],
        [
          "cancel, finished",
          {
            method: "POST",
            path: `/v1/executions/${cancelledId}/cancel`,
            body: { reason: "again" },
          },
          {
            service: "Executions",
            rpc: "Cancel",
            request: { execution_id: cancelledId, reason: "again" },
          },
          409,
          "FAILED_PRECONDITION",
        ],
        [
          "signal, finished",
          {
            method: "POST",
            path: `/v1/executions/${cancelledId}/signals/go`,
            body: { payload: { a: 1 } },
          },
          {
            service: "Executions",
            rpc: "Signal",
            request: { execution_id: cancelledId, name: "go", payload_json: '{"a":1}' },
          },
          409,
          "FAILED_PRECONDITION",
        ],
        [
          "signal, undeclared",
          {
            method: "POST",
            path: "/v1/executions/e-1/signals/go",
            body: {},
          },
          {
            service: "Executions",
            rpc: "Signal",
            request: { execution_id: "e-1", name: "go" },
          },
          404,
          "NOT_FOUND",
        ],
        [
          "query, undeclared",
          { method: "GET", path: "/v1/executions/e-1/queries/q" },
          {
            service: "Executions",
            rpc: "Query",
            request: { execution_id: "e-1", name: "q" },
          },
          404,
          "NOT_FOUND",
        ],
        [
          "pending",
          { method: "GET", path: "/v1/executions/e-1/pending" },
          {
            service: "Executions",
            rpc: "Pending",
            request: { execution_id: "e-1" },
          },
          200,
          "OK",
        ],
        [
          "schedule, invalid",
          {
            method: "POST",
            path: "/v1/schedules",
            body: { schedule_id: "s", workflow: "Three" },
          },
          {
            service: "Schedules",
            rpc: "Create",
            request: { schedule_json: '{"schedule_id":"s","workflow":"Three"}' },
          },
          422,
          "INVALID_ARGUMENT",
        ],
        [
          "schedules list",
          { method: "GET", path: "/v1/schedules?workflow=Three" },
          {
            service: "Schedules",
            rpc: "List",
            request: { workflow: "Three" },
          },
          200,
          "OK",
        ],
        [
          "schedule, unknown",
          { method: "GET", path: "/v1/schedules/nope" },
          {
            service: "Schedules",
            rpc: "Get",
            request: { schedule_id: "nope" },
          },
          404,
          "NOT_FOUND",
        ],
        [
          "schedule patch, unknown",
          {
            method: "PATCH",
            path: "/v1/schedules/nope",
            body: { paused: true },
          },
          {
            service: "Schedules",
            rpc: "Update",
            request: { schedule_id: "nope", patch_json: '{"paused":true}' },
          },
          404,
          "NOT_FOUND",
        ],
        [
          "schedule delete, unknown",
          { method: "DELETE", path: "/v1/schedules/nope" },
          {
            service: "Schedules",
            rpc: "Delete",
            request: { schedule_id: "nope" },
          },
          404,
          "NOT_FOUND",
        ],
        [
          "schedule trigger, unknown",
          {
            method: "POST",
            path: "/v1/schedules/nope/trigger",
            body: {},
          },
          {
            service: "Schedules",
            rpc: "Trigger",
            request: { schedule_id: "nope" },
          },
          404,
          "NOT_FOUND",
        ],
        [
          "workers list",
          { method: "GET", path: "/v1/workers" },
          {
            service: "Workers",
            rpc: "List",
            request: {},
          },
          200,
          "OK",
        ],
        [
          "register, no tasks",
          {
            method: "POST",
            path: "/v1/workers/register",
            body: { worker_id: "w", tasks: [] },
          },
          {
            service: "Workers",
            rpc: "Register",
            request: { worker_id: "w", tasks: [] },
          },
          422,
          "INVALID_ARGUMENT",
        ],
        [
          "poll, unknown session",
          {
            method: "POST",
            path: "/v1/workers/poll",
            body: { session_id: "nope", wait_s: 0 },
          },
          {
            service: "Workers",
            rpc: "Poll",
            request: { session_id: "nope", wait_s: 0 },
          },
          404,
          "NOT_FOUND",
        ],
        [
          "heartbeat, unknown session",
          {
            method: "POST",
            path: "/v1/workers/heartbeat",
            body: { session_id: "nope", tokens: [] },
          },
          {
            service: "Workers",
            rpc: "Heartbeat",
            request: { session_id: "nope", tokens: [] },
          },
          404,
          "NOT_FOUND",
        ],
        [
          "complete, bad token",
          {
            method: "POST",
            path: "/v1/tasks/complete",
            body: { token: "x", output: 1 },
          },
          {
            service: "Workers",
            rpc: "Complete",
            request: { token: "x", output_json: "1" },
          },
          422,
          "INVALID_ARGUMENT",
        ],
        [
          "fail, bad token",
          {
            method: "POST",
            path: "/v1/tasks/fail",
            body: { token: "x", error: { code: "E", message: "m" } },
          },
          {
            service: "Workers",
            rpc: "Fail",
            request: { token: "x", error: { code: "E", message: "m" } },
          },
          422,
          "INVALID_ARGUMENT",
        ],
        [
          "unregister, unknown session",
          {
            method: "POST",
            path: "/v1/workers/unregister",
            body: { session_id: "nope" },
          },
          {
            service: "Workers",
            rpc: "Unregister",
            request: { session_id: "nope" },
          },
          404,
          "NOT_FOUND",
        ],
      ];
      for (const [name, h, r, status, grpcStatus] of cases) {
        const { grpc: got } = await sameAnswer(s.url, g, TOKEN, h, r);
        assert.equal(got.status, status, name);
        assert.equal(got.grpc, grpcStatus, name);
      }

      // The input round-trips exactly: JSON text in, the same JSON out, numbers and all.
      const started = asHttp(await g.call("Executions", "Get", { execution_id: "e-1" }));
      assert.deepEqual((started.body as { input: unknown }).input, input);

      // History: a server stream of the HTTP history's events, from after_seq on, every page.
      const all = (await http.get("/v1/executions/e-1/history")).body.events;
      const streamed = await g.stream("Executions", "History", { execution_id: "e-1" });
      assert.equal(streamed.error, null);
      assert.deepEqual(streamed.messages.map((m) => JSON.parse(m.json)), all);
      assert.deepEqual(
        streamed.messages.map((m) => [m.seq, m.type]),
        all.map((e: { seq: number; type: string }) => [e.seq, e.type]),
      );
      const paged = await g.stream("Executions", "History", {
        execution_id: "e-1",
        after_seq: 1,
        limit: 1,
      });
      assert.deepEqual(paged.messages.map((m) => JSON.parse(m.json)), all.slice(1));
      const unknown = await g.stream("Executions", "History", { execution_id: "nope" });
      assert.equal(unknown.error?.status, "NOT_FOUND");
      assert.equal(unknown.error?.orbitCode, "UNKNOWN_EXECUTION");

      // A schedule made over gRPC reads the same over HTTP.
      const sched = { schedule_id: "every-hour", workflow: "Three", cron: "0 * * * *", input: 1 };
      const made = asHttp(
        await g.call("Schedules", "Create", { schedule_json: JSON.stringify(sched) }),
      );
      assert.equal(made.status, 201, JSON.stringify(made));
      assert.deepEqual(made.body, (await http.get("/v1/schedules/every-hour")).body);
      const paused = asHttp(await g.call("Schedules", "Pause", { schedule_id: "every-hour" }));
      assert.equal((paused.body as { paused: boolean }).paused, true);
      const gone = asHttp(await g.call("Schedules", "Delete", { schedule_id: "every-hour" }));
      assert.deepEqual(gone.body, { schedule_id: "every-hour", deleted: true });
    } finally {
      g.close();
      assert.equal((await s.kill()).code, 0, s.logs.join("\n"));
    }
  },
});

Deno.test({
  ...T,
  name: "grpc: credentials and the workers file refuse as on HTTP; deadlines end long calls",
  fn: async () => {
    const dir = await tempDir();
    const worker = {
      worker_id: "w-grpc",
      token: "worker-token-0123456789abcdef",
      tasks: [{ name: "t.one" }],
    };
    const file = `${dir}/workers.json`;
    await Deno.writeTextFile(file, JSON.stringify({ workers: [worker] }));
    const s = await startGrpcServer({
      db: `${dir}/orbit.db`,
      args: ["--token", TOKEN, "--workers-file", file],
    });
    const none = grpcClient(s.grpcAddr);
    const wrong = grpcClient(s.grpcAddr, { token: "wrong-token-0123456789abcdef" });
    const client = grpcClient(s.grpcAddr, { token: TOKEN });
    const w = grpcClient(s.grpcAddr, { token: worker.token });
    try {
      for (
        const [g, token] of [[none, undefined], [wrong, "wrong-token-0123456789abcdef"]] as const
      ) {
        await sameAnswer(s.url, g, token, { method: "GET", path: "/v1/workflows" }, {
          service: "Workflows",
          rpc: "List",
          request: {},
        });
        const r = await g.call("Workflows", "List", {});
        assert.equal(r.ok, false);
        if (!r.ok) {
          assert.equal(r.error.status, "UNAUTHENTICATED");
          assert.equal(r.error.orbitCode, "UNAUTHORIZED");
        }
        // Health and ready never need credentials.
        assert.equal((await g.call("System", "Ready", {})).ok, true);
      }
      const reg = { worker_id: "w-grpc", tasks: [{ name: "t.one", contract: "1" }] };
      const refusals: Array<[typeof client, string, string, Record<string, unknown>, string]> = [
        // The client token on a worker route, a worker token on a client route.
        [client, "Workers", "Register", reg, "WORKER_TOKEN_REQUIRED"],
        [w, "Workflows", "List", {}, "CLIENT_TOKEN_REQUIRED"],
        // A worker registering as another, or for a task the file does not give it.
        [w, "Workers", "Register", { ...reg, worker_id: "other" }, "FORBIDDEN_WORKER"],
        [w, "Workers", "Register", {
          ...reg,
          tasks: [{ name: "t.two", contract: "1" }],
        }, "TASK_NOT_ALLOWED"],
      ];
      for (const [g, service, rpc, request, code] of refusals) {
        const r = await g.call(service, rpc, request);
        assert.equal(r.ok, false, `${service}.${rpc}`);
        if (!r.ok) {
          assert.equal(r.error.status, "PERMISSION_DENIED", `${service}.${rpc}`);
          assert.equal(r.error.orbitCode, code);
          assert.equal((r.error.body as { error: { code: string } }).error.code, code);
        }
      }
      const session = await w.call("Workers", "Register", reg);
      assert.equal(session.ok, true, JSON.stringify(session));
      const sessionId = session.ok ? session.value.session_id : "";

      // Deadlines: a long poll and a long wait end at the call's deadline, not their own.
      let t = Date.now();
      const poll = await w.call("Workers", "Poll", { session_id: sessionId, wait_s: 60 }, {
        deadlineMs: 500,
      });
      assert.equal(poll.ok ? "OK" : poll.error.status, "DEADLINE_EXCEEDED");
      assert.ok(Date.now() - t < 5_000, `poll ended after ${Date.now() - t} ms`);
      // The session goes on: a poll with wait_s 0 answers at once, with no task.
      t = Date.now();
      const now = await w.call("Workers", "Poll", { session_id: sessionId, wait_s: 0 });
      assert.deepEqual(now.ok ? now.value.tasks ?? [] : now.error, []);
      assert.ok(Date.now() - t < 5_000);
      await client.call("Workflows", "Deploy", { document_json: JSON.stringify(WORKFLOW) });
      await client.call("Executions", "Start", { workflow: "Three", execution_id: "e-wait" });
      t = Date.now();
      const wait = await client.call("Executions", "Wait", {
        execution_id: "e-wait",
        timeout_s: 120,
      }, { deadlineMs: 500 });
      assert.equal(wait.ok ? "OK" : wait.error.status, "DEADLINE_EXCEEDED");
      assert.ok(Date.now() - t < 5_000);
    } finally {
      for (const g of [none, wrong, client, w]) g.close();
      assert.equal((await s.kill()).code, 0, s.logs.join("\n"));
    }
  },
});

Deno.test({
  ...T,
  name: "grpc: server reflection lists the services; grpc.health.v1 answers SERVING",
  fn: async () => {
    const dir = await tempDir();
    const s = await startGrpcServer({ db: `${dir}/orbit.db` });
    const def = protoLoader.loadSync("grpc_reflection.proto", {
      includeDirs: [new URL(".", import.meta.url).pathname],
      keepCase: true,
    });
    const pkg = grpc.loadPackageDefinition(def) as unknown as {
      grpc: { reflection: { v1: { ServerReflection: grpc.ServiceClientConstructor } } };
    };
    const r = new pkg.grpc.reflection.v1.ServerReflection(
      s.grpcAddr,
      grpc.credentials.createInsecure(),
    );
    const g = grpcClient(s.grpcAddr);
    try {
      const ask = (req: Record<string, unknown>) =>
        new Promise<Record<string, unknown>>((resolve, reject) => {
          const call = (r as unknown as {
            ServerReflectionInfo(): grpc.ClientDuplexStream<unknown, Record<string, unknown>>;
          }).ServerReflectionInfo();
          call.on("data", (d) => {
            resolve(d);
            call.end();
          });
          call.on("error", reject);
          call.write(req);
        });
      const list = await ask({ list_services: "*" });
      const names = (list.list_services_response as { service: Array<{ name: string }> }).service
        .map((x) => x.name).sort();
      for (
        const want of [
          "grpc.health.v1.Health",
          "orbit.v1.Executions",
          "orbit.v1.Schedules",
          "orbit.v1.System",
          "orbit.v1.Workers",
          "orbit.v1.Workflows",
        ]
      ) assert.ok(names.includes(want), `${want} in ${names}`);
      const file = await ask({ file_containing_symbol: "orbit.v1.Workers" });
      const protos = (file.file_descriptor_response as { file_descriptor_proto: Uint8Array[] })
        .file_descriptor_proto;
      assert.ok(protos.length >= 1);
      assert.ok(
        protos.some((p) => new TextDecoder().decode(p).includes("PollRequest")),
      );

      const health = await g.call("grpc.health.v1.Health", "Check", { service: "" });
      assert.deepEqual(health.ok && health.value, { status: "SERVING" });
      const workers = await g.call("grpc.health.v1.Health", "Check", {
        service: "orbit.v1.Workers",
      });
      assert.deepEqual(workers.ok && workers.value, { status: "SERVING" });
      const unknown = await g.call("grpc.health.v1.Health", "Check", { service: "x.Y" });
      assert.equal(unknown.ok ? "OK" : unknown.error.status, "NOT_FOUND");
    } finally {
      r.close();
      g.close();
      assert.equal((await s.kill()).code, 0, s.logs.join("\n"));
    }
  },
});

Deno.test({
  ...T,
  name: "grpc: a worker on gRPC and one on HTTP serve one execution, payloads exact",
  fn: async () => {
    const dir = await tempDir();
    const s = await startGrpcServer({ db: `${dir}/orbit.db` });
    const g = grpcClient(s.grpcAddr);
    const http = api(s.url);
    let stop = false;
    const via = (input: { n: number; via: string[] }, who: string) => ({
      ...input,
      n: input.n + 1,
      via: [...input.via, who],
    });
    try {
      assert.equal(
        asHttp(await g.call("Workflows", "Deploy", { document_json: JSON.stringify(WORKFLOW) }))
          .status,
        201,
      );
      // gRPC: t.one and t.three; HTTP: t.two.
      const gs = await g.call("Workers", "Register", {
        worker_id: "w-grpc",
        runtime: "grpc",
        tasks: TASKS.filter((t) => t.name !== "t.two"),
        concurrency: 2,
      });
      assert.equal(gs.ok, true, JSON.stringify(gs));
      const grpcSession = gs.ok ? gs.value.session_id as string : "";
      const hs = await http.post("/v1/workers/register", {
        worker_id: "w-http",
        runtime: "http",
        tasks: TASKS.filter((t) => t.name === "t.two"),
      });
      assert.equal(hs.status, 200);
      const grpcLoop = (async () => {
        let served = 0;
        while (!stop) {
          const p = await g.call("Workers", "Poll", {
            session_id: grpcSession,
            max_tasks: 2,
            wait_s: 1,
          });
          if (!p.ok) throw new Error(JSON.stringify(p.error));
          for (const t of p.value.tasks ?? []) {
            assert.equal(typeof t.input_json, "string");
            const out = via(JSON.parse(t.input_json), "grpc");
            const done = await g.call("Workers", "Complete", {
              token: t.token,
              output_json: JSON.stringify(out),
            });
            if (!done.ok) throw new Error(JSON.stringify(done.error));
            assert.equal(done.value.accepted, true);
            served++;
          }
        }
        return served;
      })();
      const httpLoop = (async () => {
        let served = 0;
        while (!stop) {
          const p = await http.post("/v1/workers/poll", {
            session_id: hs.body.session_id,
            wait_s: 1,
          });
          if (p.status !== 200) throw new Error(JSON.stringify(p.body));
          for (const t of p.body.tasks) {
            const done = await http.post("/v1/tasks/complete", {
              token: t.token,
              output: via(t.input, "http"),
            });
            assert.equal(done.body.accepted, true);
            served++;
          }
        }
        return served;
      })();
      const input = { n: 0.1, via: [] as string[], big: 1e21, u: "\u{1F680}" };
      const started = asHttp(
        await g.call("Executions", "Start", {
          workflow: "Three",
          execution_id: "mixed-1",
          input_json: JSON.stringify(input),
        }),
      );
      assert.equal(started.status, 201);
      const done = await waitFor(async () => {
        const r = asHttp(
          await g.call("Executions", "Wait", { execution_id: "mixed-1", timeout_s: 5 }),
        );
        const e = r.body as { status: string; output: unknown };
        return e.status === "completed" ? e : null;
      }, "mixed-1 completed");
      stop = true;
      const [a, b] = await Promise.all([grpcLoop, httpLoop]);
      assert.equal(a, 2);
      assert.equal(b, 1);
      assert.deepEqual(done.output, { ...input, n: 3.1, via: ["grpc", "http", "grpc"] });
      const events = (await http.get("/v1/executions/mixed-1/history")).body.events;
      const dispatched = events.filter((e: { type: string }) => e.type === "StepDispatched")
        .map((e: { step: string; worker_id?: string; worker?: string }) => [
          e.step,
          e.worker_id ?? e.worker,
        ]);
      assert.deepEqual(dispatched, [["one", "w-grpc"], ["two", "w-http"], ["three", "w-grpc"]]);
    } finally {
      stop = true;
      g.close();
      assert.equal((await s.kill()).code, 0, s.logs.join("\n"));
    }
  },
});
