import assert from "node:assert/strict";
import { z } from "zod";
import { defineTask, TaskError, Worker, type WorkerOptions } from "./mod.ts";
import { FakeOrbit, NOT_LEADER, UNKNOWN_SESSION } from "./testing/fake_server.ts";
import { gate, recordingLogger } from "./testing/helpers.ts";

const echo = defineTask({
  name: "test.echo",
  contract: "1",
  handler: (input: unknown) => ({ echoed: input }),
});

function makeWorker(fake: FakeOrbit, options: Partial<WorkerOptions> = {}) {
  const logger = recordingLogger();
  const worker = new Worker({
    server: fake.url,
    workerId: "test-worker",
    tasks: [echo],
    pollWaitS: 5,
    heartbeatMs: 100,
    backoff: { initialMs: 20, maxMs: 200 },
    logger,
    ...options,
  });
  return { worker, logger };
}

Deno.test("worker registers, runs a task and reports its output", async () => {
  await using fake = FakeOrbit.start({ token: "s3cret" });
  let seen: unknown;
  const task = defineTask({
    name: "orders.validate",
    contract: "1",
    language: "typescript",
    handler: (input: { n: number }, ctx) => {
      seen = { ...ctx, signal: ctx.signal.aborted, logger: undefined };
      return { total: input.n * 2 };
    },
  });
  const { worker, logger } = makeWorker(fake, { token: "s3cret", tasks: [task, echo] });
  await worker.start();
  assert.equal(worker.state, "running");
  assert.deepEqual(fake.registers[0], {
    worker_id: "test-worker",
    runtime: "typescript",
    tasks: [
      { name: "orders.validate", contract: "1", language: "typescript" },
      { name: "test.echo", contract: "1" },
    ],
    concurrency: 8,
  });
  assert.ok(
    logger.text().includes("worker registered worker_id=test-worker runtime=typescript tasks=2"),
  );

  const t = fake.enqueue({
    task: "orders.validate",
    input: { n: 21 },
    execution_id: "ex-1",
    step: "validate",
    idempotency_key: "ex-1/validate",
    deadline_ms: Date.now() + 60_000,
  });
  await fake.waitFor(() => fake.results.length === 1, "the result");
  assert.deepEqual(fake.results[0], {
    kind: "complete",
    token: t.token,
    output: { total: 42 },
    accepted: true,
  });
  assert.deepEqual(seen, {
    token: t.token,
    executionId: "ex-1",
    step: "validate",
    attempt: 1,
    idempotencyKey: "ex-1/validate",
    redelivery: false,
    deadlineMs: t.deadline_ms,
    task: "orders.validate",
    contract: "1",
    signal: false,
    logger: undefined,
  });
  // every request carried the bearer token
  assert.ok(fake.requests.every((r) => r.headers.get("authorization") === "Bearer s3cret"));
  // heartbeats flow
  await fake.waitFor(() => fake.heartbeats.length >= 2, "heartbeats");
  await worker.stop();
  assert.equal(worker.state, "stopped");
  assert.deepEqual(fake.unregisters, ["session-1"]);
});

Deno.test("503 NOT_LEADER and dropped connections are retried; the result is delivered once", async () => {
  await using fake = FakeOrbit.start();
  fake.inject("/v1/workers/register", NOT_LEADER, "drop");
  fake.inject("/v1/workers/poll", "drop", NOT_LEADER);
  const { worker, logger } = makeWorker(fake, { backoff: undefined }); // the real 200 ms backoff
  await worker.start();
  // one 503 answered, one connection dropped, then registered
  assert.equal(fake.requests.filter((r) => r.path === "/v1/workers/register").length, 2);
  assert.deepEqual(fake.dropped[0], { method: "POST", path: "/v1/workers/register" });
  assert.equal(fake.registers.length, 1);

  // results: 503, dropped, 500, then accepted
  fake.inject("/v1/tasks/complete", NOT_LEADER, "drop", { status: 500, code: "STORAGE_ERROR" });
  const t = fake.enqueue({ task: "test.echo", input: { a: 1 } });
  await fake.waitFor(() => fake.results.length === 1, "the result");
  assert.equal(fake.pendingFaults("/v1/tasks/complete"), 0);
  assert.deepEqual(fake.results, [{
    kind: "complete",
    token: t.token,
    output: { echoed: { a: 1 } },
    accepted: true,
  }]);

  const text = logger.text();
  assert.match(
    text,
    new RegExp(
      `warn poll failed: cannot reach ORBIT runtime at ${fake.url}: .+; retrying in 0\\.2s`,
    ),
  );
  assert.match(
    text,
    /warn register failed: ORBIT runtime at \S+ answered 503 NOT_LEADER: this server is a standby.*; retrying in 0\.2s/,
  );
  assert.match(text, /warn report result failed: .*; retrying in 0\.[45]s/); // the backoff grows
  assert.match(text, /answered 500 STORAGE_ERROR/);
  await worker.stop();
  assert.equal(fake.results.length, 1);
});

Deno.test("404 UNKNOWN_SESSION on poll: the worker registers again and in-flight tasks still report", async () => {
  await using fake = FakeOrbit.start();
  const release = gate();
  const slow = defineTask({
    name: "test.slow",
    contract: "1",
    handler: async () => {
      await release.promise;
      return "slow-done";
    },
  });
  const { worker, logger } = makeWorker(fake, { tasks: [slow, echo] });
  await worker.start();
  const first = fake.enqueue({ task: "test.slow" });
  await fake.waitFor(() => fake.dispatched.has(first.token), "the first dispatch");

  // The leader changed: the session is unknown now (the held long poll answers 404).
  fake.expireSession("session-1");
  await fake.waitFor(() => worker.sessionId === "session-2", "a second registration");
  assert.match(logger.text(), /UNKNOWN_SESSION\); registering again/);

  const second = fake.enqueue({ task: "test.echo", input: 2 });
  await fake.waitFor(() => fake.resultsFor(second.token).length === 1, "the second result");
  assert.equal(fake.dispatched.get(second.token)?.session_id, "session-2");

  // heartbeats name the running token under the new session
  await fake.waitFor(
    () =>
      fake.heartbeats.some((h) => h.session_id === "session-2" && h.tokens.includes(first.token)),
    "a heartbeat of the new session naming the old task",
  );
  // the task from the old session keeps its token and still reports
  release.open();
  await fake.waitFor(() => fake.resultsFor(first.token).length === 1, "the first result");
  assert.equal(fake.resultsFor(first.token)[0]!.output, "slow-done");
  await worker.stop();
  assert.deepEqual(fake.unregisters, ["session-2"]);
});

Deno.test("404 UNKNOWN_SESSION on a poll or a heartbeat re-registers and polls on", async () => {
  await using fake = FakeOrbit.start();
  fake.inject("/v1/workers/poll", UNKNOWN_SESSION);
  const { worker } = makeWorker(fake);
  await worker.start();
  await fake.waitFor(() => worker.sessionId === "session-2", "a second registration");
  await fake.waitFor(() => fake.activePolls === 1, "a held poll of session-2");
  fake.inject("/v1/workers/heartbeat", UNKNOWN_SESSION);
  await fake.waitFor(() => worker.sessionId === "session-3", "a third registration");
  // the poll held for session-2 is given up at once, and session-3 polls
  await fake.waitFor(() => fake.polls.some((p) => p.session_id === "session-3"), "polls again");
  const t = fake.enqueue({ task: "test.echo", input: "after" });
  await fake.waitFor(() => fake.resultsFor(t.token).length === 1, "the result");
  await worker.stop();
  assert.deepEqual(fake.unregisters, ["session-3"]);
});

Deno.test("a cancel from the heartbeat aborts the handler's signal; the result is reported once", async () => {
  await using fake = FakeOrbit.start();
  let abortedReason: unknown;
  const waitsForCancel = defineTask({
    name: "test.cancellable",
    contract: "1",
    handler: (_input, ctx) =>
      new Promise((_resolve, reject) => {
        ctx.signal.addEventListener("abort", () => {
          abortedReason = ctx.signal.reason;
          reject(ctx.signal.reason);
        });
      }),
  });
  const { worker } = makeWorker(fake, { tasks: [waitsForCancel] });
  await worker.start();
  const t = fake.enqueue({ task: "test.cancellable" });
  await fake.waitFor(
    () => fake.heartbeats.some((h) => h.tokens.includes(t.token)),
    "a heartbeat naming the task",
  );
  fake.cancel(t.token);
  await fake.waitFor(() => fake.results.length === 1, "the result");
  assert.ok(abortedReason instanceof Error);
  assert.equal((abortedReason as Error).name, "AbortError");
  const [r] = fake.results;
  assert.equal(r!.kind, "fail");
  assert.equal(r!.error!.code, "CANCELLED");
  assert.equal(r!.error!.retryable, true);
  // the token leaves the heartbeats and no second result is sent
  const n = fake.heartbeats.length;
  await fake.waitFor(() => fake.heartbeats.length >= n + 2, "two more heartbeats");
  assert.ok(!fake.heartbeats.at(-1)!.tokens.includes(t.token));
  await worker.stop();
  assert.equal(fake.resultsFor(t.token).length, 1);
});

Deno.test("a handler that finishes despite a cancel reports its output once", async () => {
  await using fake = FakeOrbit.start();
  const aborted = gate();
  const stubborn = defineTask({
    name: "test.stubborn",
    contract: "1",
    handler: async (_input, ctx) => {
      ctx.signal.addEventListener("abort", () => aborted.open());
      await aborted.promise;
      return "finished anyway";
    },
  });
  const { worker } = makeWorker(fake, { tasks: [stubborn] });
  await worker.start();
  const t = fake.enqueue({ task: "test.stubborn" });
  await fake.waitFor(() => fake.heartbeats.some((h) => h.tokens.includes(t.token)), "heartbeat");
  fake.cancel(t.token);
  await fake.waitFor(() => fake.results.length === 1, "the result");
  assert.equal(fake.results[0]!.kind, "complete");
  assert.equal(fake.results[0]!.output, "finished anyway");
  await worker.stop();
  assert.equal(fake.results.length, 1);
});

Deno.test("graceful stop: polling stops, running tasks finish and report, then unregister", async () => {
  await using fake = FakeOrbit.start();
  const release = gate();
  const started: string[] = [];
  const slow = defineTask({
    name: "test.slow",
    contract: "1",
    handler: async (_input, ctx) => {
      started.push(ctx.token);
      await release.promise;
      return { ok: ctx.signal.aborted === false };
    },
  });
  const { worker } = makeWorker(fake, { tasks: [slow], concurrency: 4 });
  const running = worker.run();
  // every slot holds a long poll of its own
  await fake.waitFor(() => fake.activePolls === 4, "four long polls");
  const a = fake.enqueue({ task: "test.slow" });
  const b = fake.enqueue({ task: "test.slow" });
  await fake.waitFor(() => started.length === 2, "both tasks to start");
  await fake.waitFor(() => fake.activePolls === 2, "the two free slots' long polls");

  let stopped = false;
  const stopping = worker.stop().then(() => (stopped = true));
  // the long polls are abandoned at once...
  await fake.waitFor(() => fake.abortedPolls === 2, "the polls to be abandoned");
  const pollsAtStop = fake.polls.length;
  // ...while the tasks keep running, heartbeats go on and nothing is unregistered yet
  const hb = fake.heartbeats.length;
  await fake.waitFor(() => fake.heartbeats.length >= hb + 2, "heartbeats while stopping");
  assert.equal(stopped, false);
  assert.equal(worker.state, "stopping");
  assert.deepEqual(fake.unregisters, []);
  assert.equal(fake.results.length, 0);
  // a task queued now is not picked up
  const c = fake.enqueue({ task: "test.slow" });

  release.open();
  await stopping;
  await running;
  assert.equal(worker.state, "stopped");
  assert.equal(fake.polls.length, pollsAtStop);
  assert.deepEqual(
    fake.results.map((r) => [r.token, r.kind, r.output]).sort(),
    [[a.token, "complete", { ok: true }], [b.token, "complete", { ok: true }]].sort(),
  );
  assert.deepEqual(fake.unregisters, ["session-1"]);
  // results were all delivered before the unregister request
  const unregisterAt = fake.requests.findIndex((r) => r.path === "/v1/workers/unregister");
  const lastResultAt = fake.requests.findLastIndex((r) => r.path === "/v1/tasks/complete");
  assert.ok(lastResultAt < unregisterAt);
  assert.deepEqual(fake.queue, [c]);
  // stop() is idempotent
  await worker.stop();
});

Deno.test("stop with a timeout abandons tasks that do not finish", async () => {
  await using fake = FakeOrbit.start();
  const stuck = defineTask({
    name: "test.stuck",
    contract: "1",
    handler: (_input, ctx) =>
      new Promise((_resolve, reject) =>
        ctx.signal.addEventListener("abort", () => reject(ctx.signal.reason))
      ),
  });
  const deaf = defineTask({
    name: "test.deaf",
    contract: "1",
    handler: () => new Promise(() => {}), // ignores its signal and never ends
  });
  const { worker, logger } = makeWorker(fake, { tasks: [stuck, deaf] });
  await worker.start();
  const t = fake.enqueue({ task: "test.stuck" });
  const d = fake.enqueue({ task: "test.deaf" });
  await fake.waitFor(
    () => worker.runningTokens.includes(t.token) && worker.runningTokens.includes(d.token),
    "the tasks to run",
  );
  fake.inject("/v1/tasks/fail", NOT_LEADER, NOT_LEADER, NOT_LEADER, NOT_LEADER, NOT_LEADER);
  await worker.stop({ timeoutMs: 50 });
  assert.equal(worker.state, "stopped");
  assert.match(logger.text(), /abandoning them/);
  assert.deepEqual(fake.unregisters, ["session-1"]);
});

Deno.test("zod validation: INVALID_INPUT and INVALID_OUTPUT are not retryable", async () => {
  await using fake = FakeOrbit.start();
  let calls = 0;
  const typed = defineTask({
    name: "payments.charge",
    contract: "1",
    input: z.object({ amount: z.number().positive() }),
    output: z.object({ charge_id: z.string() }),
    handler: ({ amount }) => {
      calls++;
      // deno-lint-ignore no-explicit-any
      return (amount > 100 ? { charge_id: 42 } : { charge_id: `ch-${amount}` }) as any;
    },
  });
  const { worker } = makeWorker(fake, { tasks: [typed] });
  await worker.start();
  const bad = fake.enqueue({ task: "payments.charge", input: { amount: -1 } });
  const badOut = fake.enqueue({ task: "payments.charge", input: { amount: 500 } });
  const good = fake.enqueue({ task: "payments.charge", input: { amount: 5 } });
  await fake.waitFor(() => fake.results.length === 3, "three results");

  const [rBad] = fake.resultsFor(bad.token);
  assert.equal(rBad!.kind, "fail");
  assert.equal(rBad!.error!.code, "INVALID_INPUT");
  assert.equal(rBad!.error!.retryable, false);
  assert.match(rBad!.error!.message, /amount/);
  assert.deepEqual(
    (rBad!.error!.details as { issues: { path: string }[] }).issues[0]!.path,
    "amount",
  );

  const [rOut] = fake.resultsFor(badOut.token);
  assert.equal(rOut!.error!.code, "INVALID_OUTPUT");
  assert.equal(rOut!.error!.retryable, false);
  assert.match(rOut!.error!.message, /charge_id/);

  assert.deepEqual(fake.resultsFor(good.token)[0]!.output, { charge_id: "ch-5" });
  assert.equal(calls, 2); // the handler never saw the invalid input
  await worker.stop();
});

Deno.test("TaskError codes and other exceptions are reported as failures", async () => {
  await using fake = FakeOrbit.start();
  const failing = defineTask({
    name: "test.failing",
    contract: "1",
    handler: (input: { mode: string }) => {
      if (input.mode === "task-error") {
        throw new TaskError("INVALID_ORDER", "no items", {
          retryable: false,
          details: { items: 0 },
        });
      }
      if (input.mode === "string") throw "plain string";
      throw new RangeError("out of range");
    },
  });
  const { worker } = makeWorker(fake, { tasks: [failing] });
  await worker.start();
  const a = fake.enqueue({ task: "test.failing", input: { mode: "task-error" } });
  const b = fake.enqueue({ task: "test.failing", input: { mode: "other" } });
  const c = fake.enqueue({ task: "test.failing", input: { mode: "string" } });
  const d = fake.enqueue({ task: "test.failing", contract: "9" }); // a contract not served
  // the fake only dispatches tasks a session serves: d stays queued
  await fake.waitFor(() => fake.results.length === 3, "three results");
  assert.deepEqual(fake.resultsFor(a.token)[0]!.error, {
    code: "INVALID_ORDER",
    message: "no items",
    retryable: false,
    details: { items: 0 },
  });
  const eb = fake.resultsFor(b.token)[0]!.error!;
  assert.equal(eb.code, "TASK_ERROR");
  assert.equal(eb.message, "out of range");
  assert.equal(eb.retryable, true);
  assert.equal((eb.details as { type: string }).type, "RangeError");
  assert.equal(fake.resultsFor(c.token)[0]!.error!.message, "plain string");
  assert.deepEqual(fake.queue, [d]);
  await worker.stop();
});

Deno.test("an {accepted:false} answer is logged at debug level only", async () => {
  await using fake = FakeOrbit.start();
  const { worker, logger } = makeWorker(fake);
  await worker.start();
  const t = fake.enqueue({ task: "test.echo" });
  // Another attempt's result already resolved the step.
  fake.results.push({ kind: "complete", token: t.token, output: "earlier", accepted: true });
  const line = await fake.waitFor(
    () => logger.lines.find((l) => l.message.startsWith("result not accepted")),
    "the debug line",
  );
  assert.equal(fake.results[1]!.accepted, false);
  assert.equal(line.level, "debug");
  assert.ok(!logger.lines.some((l) => l.level === "warn" || l.level === "error"));
  await worker.stop();
});

Deno.test("concurrency: never more than N handlers at once, each slot polling for one task", async () => {
  await using fake = FakeOrbit.start();
  const N = 3;
  let running = 0;
  let maxRunning = 0;
  const gates: ReturnType<typeof gate>[] = [];
  const busy = defineTask({
    name: "test.busy",
    contract: "1",
    handler: async (input: { i: number }) => {
      running++;
      maxRunning = Math.max(maxRunning, running);
      const g = gate();
      gates.push(g);
      await g.promise;
      running--;
      return input.i;
    },
  });
  const { worker } = makeWorker(fake, { tasks: [busy], concurrency: N });
  await worker.start();
  const tasks = Array.from(
    { length: 10 },
    (_, i) => fake.enqueue({ task: "test.busy", input: { i } }),
  );
  await fake.waitFor(() => running === N, "N tasks to run");
  assert.equal(fake.queue.length, 10 - N);
  // release them one at a time; each time at most N run
  for (let done = 0; done < 10; done++) {
    await fake.waitFor(() => gates.find((g) => !g.opened), "a running task");
    assert.ok(running <= N);
    gates.find((g) => !g.opened)!.open();
    await fake.waitFor(() => fake.results.length === done + 1, `result ${done + 1}`);
  }
  assert.equal(maxRunning, N);
  assert.ok(fake.polls.every((p) => p.max_tasks === 1));
  assert.ok(fake.polls.every((p) => p.wait_s === 5));
  assert.deepEqual(
    fake.results.map((r) => r.output).sort((x, y) => Number(x) - Number(y)),
    tasks.map((_, i) => i),
  );
  await worker.stop();
});

Deno.test("the deadline aborts the handler's signal", async () => {
  await using fake = FakeOrbit.start();
  const late = defineTask({
    name: "test.late",
    contract: "1",
    handler: (_input, ctx) =>
      new Promise((_resolve, reject) =>
        ctx.signal.addEventListener("abort", () => reject(ctx.signal.reason))
      ),
  });
  const { worker } = makeWorker(fake, { tasks: [late] });
  await worker.start();
  fake.enqueue({ task: "test.late", deadline_ms: Date.now() + 100 });
  await fake.waitFor(() => fake.results.length === 1, "the result");
  assert.equal(fake.results[0]!.error!.code, "DEADLINE_EXCEEDED");
  await worker.stop();
});

Deno.test("start() rejects when the runtime refuses the registration", async () => {
  await using fake = FakeOrbit.start({ token: "right" });
  const { worker } = makeWorker(fake, { token: "wrong" });
  await assert.rejects(worker.start(), (err: Error & { status?: number; code?: string }) => {
    assert.equal(err.name, "OrbitApiError");
    assert.equal(err.status, 401);
    assert.equal(err.code, "UNAUTHENTICATED");
    return true;
  });
  assert.equal(worker.state, "stopped");
});

Deno.test("stop() during a registration that keeps failing ends the worker", async () => {
  await using fake = FakeOrbit.start();
  fake.inject("/v1/workers/register", ...Array(50).fill(NOT_LEADER));
  const { worker } = makeWorker(fake);
  const starting = worker.start();
  await fake.waitFor(
    () => fake.requests.filter((r) => r.path === "/v1/workers/register").length >= 2,
    "two registration attempts",
  );
  await worker.stop();
  await starting;
  assert.equal(worker.state, "stopped");
  assert.deepEqual(fake.unregisters, []);
});

Deno.test("a result the runtime refuses, or that is not JSON, is reported once as a small failure", async () => {
  // Dropped before: the attempt stayed live and was redelivered every session timeout.
  await using fake = FakeOrbit.start();
  const odd = defineTask({
    name: "test.odd",
    contract: "1",
    handler: (input: { mode: string }) => {
      if (input.mode === "bigint") return { n: 1n };
      if (input.mode === "fail") throw new TaskError("BAD", "refused by the runtime");
      return { ok: true };
    },
  });
  const { worker } = makeWorker(fake, { tasks: [odd] });
  await worker.start();
  const run = async (mode: string) => {
    const t = fake.enqueue({ task: "test.odd", input: { mode } });
    await fake.waitFor(() => fake.resultsFor(t.token).length > 0, `the result of ${mode}`);
    return fake.resultsFor(t.token);
  };
  // An output JSON cannot carry.
  const big = await run("bigint");
  assert.equal(big.length, 1);
  assert.equal(big[0]!.error!.code, "RESULT_NOT_JSON");
  assert.equal(big[0]!.error!.retryable, false);
  // A failure the runtime refuses (422).
  fake.inject("/v1/tasks/fail", { status: 422, code: "INVALID_REQUEST" });
  const failed = await run("fail");
  assert.equal(failed.length, 1);
  assert.equal(failed[0]!.error!.code, "RESULT_REJECTED");
  assert.match(failed[0]!.error!.message, /INVALID_REQUEST/);
  // An output the runtime refuses (400).
  fake.inject("/v1/tasks/complete", { status: 400, code: "BAD_JSON" });
  const refused = await run("ok");
  assert.equal(refused.length, 1);
  assert.equal(refused[0]!.error!.code, "OUTPUT_REJECTED");
  await worker.stop();
});

Deno.test("results sent to a node's own address add nothing to the worker's long-lived signals", async () => {
  // Deno keeps every signal made by AbortSignal.any in each input's list of dependents until
  // that input aborts: one made per result from a signal that lives as long as the worker
  // grew the worker's heap by about 400 bytes per result, for ever.
  const inputs = new Map<AbortSignal, number>();
  const any = AbortSignal.any;
  AbortSignal.any = (signals: Iterable<AbortSignal>) => {
    const list = [...signals];
    for (const s of list) inputs.set(s, (inputs.get(s) ?? 0) + 1);
    return any.call(AbortSignal, list);
  };
  try {
    await using fake = FakeOrbit.start({ sharedNode: true });
    const { worker } = makeWorker(fake, { concurrency: 2 });
    await worker.start();
    // The slots talk to the node at its own address: the direct delivery path.
    assert.deepEqual(worker.nodeAddresses, [fake.url]);
    const n = 60;
    for (let i = 0; i < n; i++) fake.enqueue({ task: "test.echo", input: { i } });
    await fake.waitFor(() => fake.results.length === n, "every result");
    assert.ok(fake.results.every((r) => r.kind === "complete" && r.accepted));
    await worker.stop();
    const most = Math.max(0, ...inputs.values());
    assert.ok(most < n / 2, `one signal was an input of AbortSignal.any ${most} times`);
  } finally {
    AbortSignal.any = any;
  }
});
