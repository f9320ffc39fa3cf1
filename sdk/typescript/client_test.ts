import assert from "node:assert/strict";
import http from "node:http";
import { z } from "zod";
import {
  Client,
  expr,
  OrbitApiError,
  OrbitConnectionError,
  OrbitExecutionError,
  OrbitValidationError,
  workflow,
} from "./mod.ts";
import { FakeOrbit, NOT_LEADER } from "./testing/fake_server.ts";

const order = workflow("OrderProcessing", "1.0.0")
  .task("validate", { task: "orders.validate", contract: "1", input: expr("$input") })
  .signal("approved")
  .query("status", expr("$vars.status"))
  .returns(expr("$steps"));

async function setup(options: { token?: string; maxWaitS?: number } = {}) {
  const fake = FakeOrbit.start(options);
  const client = new Client({
    server: `${fake.url}/`,
    token: options.token,
    backoff: { initialMs: 10, maxMs: 50 },
  });
  await client.deploy(order);
  return { fake, client };
}

Deno.test("client: deploy, start (201 then 200 for the same id), get", async () => {
  const { fake, client } = await setup({ token: "tok" });
  await using _ = fake;
  assert.equal(client.server, fake.url);
  assert.deepEqual(JSON.parse(fake.workflows.get("OrderProcessing@1.0.0")!), order.build());
  // deploying the identical document again is fine
  await client.deploy(order.build());

  const ex = await client.start("OrderProcessing", {
    input: { order_id: "A1" },
    executionId: "order-A1",
  });
  assert.equal(ex.execution_id, "order-A1");
  assert.equal(ex.status, "running");
  const startReq = fake.requests.findLast((r) => r.path === "/v1/executions")!;
  assert.deepEqual(startReq.body, {
    workflow: "OrderProcessing",
    input: { order_id: "A1" },
    execution_id: "order-A1",
  });
  assert.equal(startReq.headers.get("authorization"), "Bearer tok");

  // a builder as the workflow: its name and version are sent
  const again = await client.start(order, {
    input: { order_id: "other" },
    executionId: "order-A1",
  });
  assert.equal(again.run_id, ex.run_id);
  assert.deepEqual(fake.requests.findLast((r) => r.path === "/v1/executions")!.body, {
    workflow: "OrderProcessing",
    version: "1.0.0",
    input: { order_id: "other" },
    execution_id: "order-A1",
  });

  const got = await client.get("order-A1");
  assert.deepEqual(got, ex);
});

Deno.test("client: API errors are OrbitApiError with status, code, message and body", async () => {
  const { fake, client } = await setup();
  await using _ = fake;
  await assert.rejects(client.get("nope"), (err: unknown) => {
    assert.ok(err instanceof OrbitApiError);
    assert.equal(err.status, 404);
    assert.equal(err.code, "UNKNOWN_EXECUTION");
    assert.equal(err.message, "no execution nope");
    assert.deepEqual(err.body, {
      error: { code: "UNKNOWN_EXECUTION", message: "no execution nope" },
    });
    assert.equal(err.retryable, false);
    return true;
  });
  await assert.rejects(client.start("Missing"), {
    name: "OrbitApiError",
    code: "UNKNOWN_WORKFLOW",
  });
  const changed = workflow("OrderProcessing", "1.0.0").task("x", { task: "t", contract: "1" });
  await assert.rejects(client.deploy(changed), { status: 409 });

  // a standby's answer: no retry, the error carries the leader
  fake.inject("/v1/executions", NOT_LEADER);
  await assert.rejects(client.start("OrderProcessing"), (err: unknown) => {
    assert.ok(err instanceof OrbitApiError);
    assert.equal(err.status, 503);
    assert.equal(err.code, "NOT_LEADER");
    assert.equal(err.leaderAddr, "http://127.0.0.1:1");
    assert.equal(err.retryable, true);
    return true;
  });
  assert.equal(fake.executions.size, 0);
});

Deno.test("client: connection errors are retried on GETs only", async () => {
  const { fake, client } = await setup();
  await using _ = fake;
  await client.start("OrderProcessing", { executionId: "e1" });
  fake.inject("/v1/executions/e1", "drop", "drop");
  const ex = await client.get("e1");
  assert.equal(ex.execution_id, "e1");
  assert.equal(fake.dropped.length, 2);

  fake.inject("/v1/executions", "drop");
  await assert.rejects(
    client.start("OrderProcessing", { executionId: "e2" }),
    (err: unknown) => {
      assert.ok(err instanceof OrbitConnectionError);
      assert.match(err.message, new RegExp(`^cannot reach ORBIT runtime at ${fake.url}: `));
      return true;
    },
  );
  // a 5xx on a GET is not retried
  fake.inject("/v1/executions/e1", { status: 500, code: "STORAGE_ERROR" });
  await assert.rejects(client.get("e1"), { status: 500, code: "STORAGE_ERROR" });
});

Deno.test("client: a write whose connection is reset after it went out is sent once", async () => {
  // Deno's fetch sent it again on a reused kept-alive connection (denoland/deno#35610): a
  // signal applied twice behind one error. Each request of the fetch transport now has a
  // connection of its own there. A server that answers reads and resets the connection of a
  // signal once it has read it:
  let signals = 0;
  const server = http.createServer((req, res) => {
    if (req.method === "GET") {
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify({ execution_id: "e1", status: "running" }));
      return;
    }
    signals++;
    req.socket.destroy();
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  try {
    const { port } = server.address() as { port: number };
    const client = new Client({ server: `http://127.0.0.1:${port}` });
    await client.get("e1"); // a connection fetch would keep alive and reuse
    await assert.rejects(client.signal("e1", "approved", { ok: true }), OrbitConnectionError);
    assert.equal(signals, 1);
  } finally {
    await new Promise((r) => server.close(r));
  }
});

Deno.test("client: wait loops over server waits until terminal, or returns at its timeout", async () => {
  const { fake, client } = await setup({ maxWaitS: 0.2 });
  await using _ = fake;
  await client.start("OrderProcessing", { executionId: "w1" });

  const waiting = client.wait("w1", { timeoutS: 30 });
  await fake.waitFor(() => fake.waitCalls >= 3, "three server waits");
  fake.finishExecution("w1", "completed", { total: 3 });
  const done = await waiting;
  assert.equal(done.status, "completed");
  assert.deepEqual(done.output, { total: 3 });
  const waitReq = fake.requests.find((r) => r.path === "/v1/executions/w1/wait")!;
  assert.ok(waitReq);

  // an execution that does not finish: wait returns it when the caller's timeout passes
  await client.start("OrderProcessing", { executionId: "w2" });
  const began = Date.now();
  const still = await client.wait("w2", { timeoutS: 1 });
  assert.equal(still.status, "running");
  assert.ok(Date.now() - began >= 900);

  // result(): the output, validated; or an OrbitExecutionError
  const out = await client.result("w1", { outputSchema: z.object({ total: z.number() }) });
  assert.deepEqual(out, { total: 3 });
  await assert.rejects(
    client.result("w1", { outputSchema: z.object({ total: z.string() }) }),
    OrbitValidationError,
  );
  await assert.rejects(client.result("w2", { timeoutS: 0 }), (err: unknown) => {
    assert.ok(err instanceof OrbitExecutionError);
    assert.equal(err.status, "running");
    return true;
  });
  fake.finishExecution("w2", "failed");
  await assert.rejects(client.result("w2"), /ended failed: STEP_FAILED it failed/);
});

Deno.test("client: history pages and the async iterator over all of them", async () => {
  const { fake, client } = await setup();
  await using _ = fake;
  await client.start("OrderProcessing", { executionId: "h1", input: 1 });
  for (const type of ["StepScheduled", "StepDispatched", "StepSucceeded", "WorkflowCompleted"]) {
    fake.addEvent("h1", type, { step: "validate", attempt: 1 });
  }
  const page = await client.history("h1");
  assert.deepEqual(page.events.map((e) => e.seq), [1, 2]);
  assert.equal(page.next_after_seq, 2);
  const next = await client.history("h1", { afterSeq: 2 });
  assert.deepEqual(next.events.map((e) => e.type), ["StepDispatched", "StepSucceeded"]);

  const all = [];
  for await (const event of client.historyEvents("h1")) all.push(event);
  assert.deepEqual(all.map((e) => e.seq), [1, 2, 3, 4, 5]);
  assert.deepEqual(all.map((e) => e.type), [
    "WorkflowCreated",
    "StepScheduled",
    "StepDispatched",
    "StepSucceeded",
    "WorkflowCompleted",
  ]);
  const tail = [];
  for await (const event of client.historyEvents("h1", { afterSeq: 3 })) tail.push(event.seq);
  assert.deepEqual(tail, [4, 5]);
});

Deno.test("client: list with filters and cursors; listAll follows them", async () => {
  const { fake, client } = await setup();
  await using _ = fake;
  for (let i = 0; i < 5; i++) await client.start("OrderProcessing", { executionId: `l${i}` });
  fake.finishExecution("l1");
  const first = await client.list({ workflow: "OrderProcessing", limit: 2 });
  assert.deepEqual(first.executions.map((e) => e.execution_id), ["l0", "l1"]);
  assert.equal(first.next_cursor, "2");
  const second = await client.list({ workflow: "OrderProcessing", limit: 2, cursor: "2" });
  assert.deepEqual(second.executions.map((e) => e.execution_id), ["l2", "l3"]);
  const running = [];
  for await (const e of client.listAll({ status: "running", limit: 2 })) {
    running.push(e.execution_id);
  }
  assert.deepEqual(running, ["l0", "l2", "l3", "l4"]);
  const listReq = fake.requests.find((r) => r.path === "/v1/executions" && r.method === "GET");
  assert.ok(listReq);
});

Deno.test("client: signal, query, cancel, workers, health", async () => {
  const { fake, client } = await setup();
  await using _ = fake;
  await client.start("OrderProcessing", { executionId: "s1" });
  const sent = await client.signal("s1", "approved", { by: "ann" });
  assert.equal(sent.seq, 2);
  assert.deepEqual(fake.requests.at(-1)!.body, { payload: { by: "ann" } });
  await assert.rejects(client.signal("s1", "nope"), { status: 404, code: "UNKNOWN_SIGNAL" });

  fake.setQueryResult("s1", "status", "charging");
  assert.equal(await client.query("s1", "status"), "charging");

  const cancelled = await client.cancel("s1", "customer asked");
  assert.equal(cancelled.status, "cancelled");
  assert.deepEqual(fake.requests.at(-1)!.body, { reason: "customer asked" });
  await assert.rejects(client.signal("s1", "approved"), {
    status: 409,
    code: "EXECUTION_FINISHED",
  });

  assert.deepEqual(await client.workers(), { workers: [] });
  const health = await client.health();
  assert.equal(health.status, "ok");
  assert.equal(health.api_version, "orbit-api/1");
  assert.equal((await client.ready()).ready, true);
});

Deno.test("client: start validates the input with a schema before sending", async () => {
  const { fake, client } = await setup();
  await using _ = fake;
  const schema = z.object({ order_id: z.string() });
  await assert.rejects(
    client.start("OrderProcessing", { input: { order_id: 5 }, inputSchema: schema }),
    (err: unknown) => {
      assert.ok(err instanceof OrbitValidationError);
      assert.equal(err.issues[0]!.path, "order_id");
      return true;
    },
  );
  assert.equal(fake.executions.size, 0);
  const ex = await client.start("OrderProcessing", {
    input: { order_id: "ok" },
    inputSchema: schema,
  });
  assert.deepEqual(ex.input, { order_id: "ok" });
});

Deno.test("client: ids are escaped in paths", async () => {
  const { fake, client } = await setup();
  await using _ = fake;
  const id = "nightly@2026-11-15T16:00:00Z/x";
  await client.start("OrderProcessing", { executionId: id });
  assert.equal((await client.get(id)).execution_id, id);
  assert.ok(fake.requests.some((r) => r.path === `/v1/executions/${encodeURIComponent(id)}`));
});
