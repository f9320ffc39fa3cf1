import assert from "node:assert/strict";
import { replay } from "./state.ts";
import { Driver, err, T0, task, workflow } from "./testing.ts";

Deno.test("decide() retries with exponential backoff capped at max_ms", async () => {
  const d = new Driver(workflow([
    task("a", { retry: { max_attempts: 6, initial_ms: 500, backoff: 3, max_ms: 10_000 } }),
  ]));
  await d.start();
  const delays: number[] = [];
  for (let attempt = 1; attempt <= 5; attempt++) {
    assert.equal(d.step("a").attempt, attempt);
    const failedAt = d.now;
    await d.fail(await d.dispatch("a"), err("FLAKY"));
    const timer = d.of("TimerStarted").at(-1)!;
    assert.deepEqual(timer, {
      type: "TimerStarted",
      seq: timer.seq,
      time_ms: failedAt,
      timer_id: `retry:a:${attempt}`,
      fire_at_ms: timer.fire_at_ms,
      purpose: "retry",
      step: "a",
      attempt,
    });
    delays.push(timer.fire_at_ms - failedAt);
    assert.equal(d.step("a").status, "backoff");
    d.now += 7; // a little later than the failure, before the timer
    await d.fireNextTimer();
  }
  assert.deepEqual(delays, [500, 1500, 4500, 10_000, 10_000]);
  const rescheduled = d.of("StepScheduled").map((e) => [e.attempt, e.idempotency_key]);
  assert.deepEqual(rescheduled, [1, 2, 3, 4, 5, 6].map((n) => [n, "run-1:a"]));
});

Deno.test("decide() uses the default retry policy when a step names none", async () => {
  const d = new Driver(workflow([task("a")]));
  await d.start();
  await d.fail(await d.dispatch("a"), err("X"));
  assert.equal(d.of("TimerStarted")[0]!.fire_at_ms, T0 + 1000);
  await d.fireNextTimer();
  await d.fail(await d.dispatch("a"), err("X"));
  assert.equal(d.of("TimerStarted")[1]!.fire_at_ms, T0 + 1000 + 2000);
  await d.fireNextTimer();
  await d.fail(await d.dispatch("a"), err("X"));
  assert.equal(d.of("StepFailed")[2]!.will_retry, false, "3 attempts by default");
  assert.equal(d.s.status, "failed");
});

Deno.test("decide() backoff 1 keeps the delay constant and initial_ms 0 retries at once", async () => {
  const d = new Driver(workflow([
    task("a", { retry: { max_attempts: 3, initial_ms: 250, backoff: 1 } }),
    task("b", { retry: { max_attempts: 2, initial_ms: 0 } }),
  ]));
  await d.start();
  for (let i = 0; i < 2; i++) {
    await d.fail(await d.dispatch("a"), err("X"));
    assert.equal(d.of("TimerStarted").at(-1)!.fire_at_ms - d.now, 250);
    await d.fireNextTimer();
  }
  await d.run("a", 1);
  await d.fail(await d.dispatch("b"), err("X"));
  const t = d.of("TimerStarted").at(-1)!;
  assert.equal(t.fire_at_ms, d.now);
  assert.equal((await d.timer(t.timer_id)).accepted, true);
  assert.equal(d.step("b").attempt, 2);
});

Deno.test("decide() reschedules a retry with the same input, task and timeout", async () => {
  const d = new Driver(workflow([
    task("a", { input: { n: "{% $input.n %}" }, language: "python", timeout_s: 5 }),
  ]));
  await d.start({ n: 9 });
  await d.fail(await d.dispatch("a"), err("X"));
  await d.fireNextTimer();
  const [first, second] = d.of("StepScheduled");
  const { seq: _s1, time_ms: _t1, attempt: a1, ...rest1 } = first!;
  const { seq: _s2, time_ms: _t2, attempt: a2, ...rest2 } = second!;
  assert.deepEqual([a1, a2], [1, 2]);
  assert.deepEqual(rest2, rest1);
  assert.deepEqual(rest1.input, { n: 9 });
  assert.equal(rest1.language, "python");
  assert.equal(rest1.timeout_ms, 5000);
  assert.deepEqual(d.step("a").tokens, {}, "the tokens of attempt 1 are dead");
});

Deno.test("decide() fails the workflow when max_attempts is exhausted", async () => {
  const d = new Driver(
    workflow([task("a", { retry: { max_attempts: 2, initial_ms: 10 } }), task("b")]),
  );
  await d.start();
  await d.fail(await d.dispatch("a"), err("X", { details: { try: 1 } }));
  await d.fireNextTimer();
  const r = await d.fail(await d.dispatch("a"), err("Y", { details: { try: 2 } }));
  assert.deepEqual(r.events.map((e) => e.type), ["StepFailed", "WorkflowFailed"]);
  assert.deepEqual(d.of("StepFailed").map((e) => e.will_retry), [true, false]);
  assert.equal(d.s.status, "failed");
  assert.deepEqual(d.s.error, {
    code: "Y",
    message: "Y happened",
    retryable: true,
    details: { try: 2, step: "a" },
  });
  assert.equal(d.s.steps.b, undefined);
});

Deno.test("decide() does not retry an error code listed in non_retryable", async () => {
  const d = new Driver(workflow([
    task("a", { retry: { max_attempts: 5, non_retryable: ["INVALID_ORDER"] } }),
  ]));
  await d.start();
  await d.fail(await d.dispatch("a"), err("INVALID_ORDER", { retryable: true }));
  const f = d.of("StepFailed")[0]!;
  assert.equal(f.will_retry, false);
  assert.equal(f.error.retryable, false);
  assert.equal(d.of("TimerStarted").length, 0);
  assert.equal(d.s.status, "failed");
  assert.equal(d.s.error?.code, "INVALID_ORDER");
});

Deno.test("decide() still retries codes that are not in non_retryable", async () => {
  const d = new Driver(workflow([task("a", { retry: { non_retryable: ["INVALID_ORDER"] } })]));
  await d.start();
  await d.fail(await d.dispatch("a"), err("TIMEOUT"));
  assert.equal(d.of("StepFailed")[0]!.will_retry, true);
  assert.equal(d.of("StepFailed")[0]!.error.retryable, true);
});

Deno.test("decide() does not retry an error the worker marks retryable:false", async () => {
  const d = new Driver(workflow([task("a", { retry: { max_attempts: 5 } })]));
  await d.start();
  const tok = await d.dispatch("a");
  await d.fail(tok, {
    code: "BAD",
    message: "bad input",
    retryable: false,
    details: { field: "x" },
  });
  assert.deepEqual(d.of("StepFailed")[0], {
    type: "StepFailed",
    seq: 4,
    time_ms: T0,
    step: "a",
    attempt: 1,
    token: tok,
    error: { code: "BAD", message: "bad input", retryable: false, details: { field: "x" } },
    will_retry: false,
  });
  assert.equal(d.s.status, "failed");
});

Deno.test("decide() refuses a retry timer fired before its fire_at_ms", async () => {
  const d = new Driver(workflow([task("a", { retry: { initial_ms: 1000 } })]));
  await d.start();
  await d.fail(await d.dispatch("a"), err("X"));
  d.now = T0 + 999;
  const early = await d.timer("retry:a:1");
  assert.equal(early.accepted, false);
  assert.deepEqual(early.events, []);
  assert.equal(d.step("a").status, "backoff");
  assert.ok(d.s.timers["retry:a:1"]);
  d.now = T0 + 1000;
  const onTime = await d.timer("retry:a:1");
  assert.equal(onTime.accepted, true);
  assert.deepEqual(onTime.events.map((e) => e.type), ["TimerFired", "StepScheduled"]);
  assert.deepEqual(onTime.events[0], {
    type: "TimerFired",
    seq: 6,
    time_ms: T0 + 1000,
    timer_id: "retry:a:1",
    step: "a",
  });
});

Deno.test("decide() fires a timer only once", async () => {
  const d = new Driver(workflow([task("a", { retry: { initial_ms: 10 } })]));
  await d.start();
  await d.fail(await d.dispatch("a"), err("X"));
  d.now += 10;
  assert.equal((await d.timer("retry:a:1")).accepted, true);
  d.now += 10_000;
  const again = await d.timer("retry:a:1");
  assert.equal(again.accepted, false);
  assert.equal(d.of("TimerFired").length, 1);
  assert.equal(d.of("StepScheduled").length, 2);
  assert.equal((await d.timer("retry:zz:1")).accepted, false, "unknown timer");
});

Deno.test("decide() refuses a deadline command before the deadline", async () => {
  const d = new Driver(workflow([task("a", { timeout_s: 30 })]));
  await d.start();
  await d.dispatch("a");
  d.now = T0 + 29_999;
  const r = await d.send({ type: "deadline", step: "a", attempt: 1 });
  assert.equal(r.accepted, false);
  assert.equal(d.step("a").status, "dispatched");
});

Deno.test("decide() fails an attempt with STEP_TIMEOUT at its deadline and retries it", async () => {
  const d = new Driver(workflow([task("a", { timeout_s: 30, retry: { initial_ms: 100 } })]));
  await d.start();
  const tok = await d.dispatch("a");
  d.now = T0 + 30_000;
  const r = await d.send({ type: "deadline", step: "a", attempt: 1 });
  assert.equal(r.accepted, true);
  assert.deepEqual(r.events.map((e) => e.type), ["StepFailed", "TimerStarted"]);
  const f = d.of("StepFailed")[0]!;
  assert.equal(f.error.code, "STEP_TIMEOUT");
  assert.equal(f.error.retryable, true);
  assert.equal(f.will_retry, true);
  assert.equal("token" in f, false, "a timeout is no worker's result");
  assert.match(f.error.message, /attempt 1 of step "a" did not finish within 30 s/);
  assert.equal(d.of("TimerStarted")[0]!.fire_at_ms, T0 + 30_100);
  assert.deepEqual(d.step("a").tokens, {});
  assert.equal((await d.complete(tok, "late")).accepted, false, "the timed-out attempt's result");
  assert.equal((await d.fail(tok, err("LATE"))).accepted, false);
  await d.fireNextTimer();
  await d.run("a", "second");
  assert.equal(d.s.status, "completed");
  assert.deepEqual(d.s.output, { a: "second" });
});

Deno.test("decide() accepts a deadline command well after the deadline", async () => {
  const d = new Driver(workflow([task("a", { timeout_s: 1, retry: { max_attempts: 1 } })]));
  await d.start();
  await d.dispatch("a");
  d.now = T0 + 3_600_000;
  assert.equal((await d.send({ type: "deadline", step: "a", attempt: 1 })).accepted, true);
  assert.equal(d.s.status, "failed");
  assert.equal(d.s.error?.code, "STEP_TIMEOUT");
});

Deno.test("decide() ignores the deadline of an older attempt", async () => {
  const d = new Driver(workflow([task("a", { timeout_s: 10, retry: { initial_ms: 0 } })]));
  await d.start();
  await d.fail(await d.dispatch("a"), err("X"));
  await d.fireNextTimer();
  d.now = T0 + 5000;
  await d.dispatch("a");
  d.now = T0 + 10_000;
  const old = await d.send({ type: "deadline", step: "a", attempt: 1 });
  assert.equal(old.accepted, false);
  assert.equal(d.step("a").status, "dispatched");
  assert.equal(d.step("a").attempt, 2);
  d.now = T0 + 15_000;
  assert.equal((await d.send({ type: "deadline", step: "a", attempt: 2 })).accepted, true);
});

Deno.test("decide() ignores a deadline for a finished, scheduled or unknown step", async () => {
  const d = new Driver(workflow([task("a", { timeout_s: 1 }), task("b", { timeout_s: 1 })]));
  await d.start();
  d.now = T0 + 5000;
  const scheduled = await d.send({ type: "deadline", step: "a", attempt: 1 });
  assert.equal(scheduled.accepted, false, "never dispatched");
  await d.run("a", 1);
  d.now += 5000;
  assert.equal((await d.send({ type: "deadline", step: "a", attempt: 1 })).accepted, false);
  assert.equal((await d.send({ type: "deadline", step: "zz", attempt: 1 })).accepted, false);
});

Deno.test("decide() ignores a deadline for a step without timeout_s", async () => {
  const d = new Driver(workflow([task("a")]));
  await d.start();
  await d.dispatch("a");
  d.now += 1e9;
  assert.equal((await d.send({ type: "deadline", step: "a", attempt: 1 })).accepted, false);
});

Deno.test("decide() does not retry a timeout when STEP_TIMEOUT is non_retryable", async () => {
  const d = new Driver(
    workflow([task("a", { timeout_s: 1, retry: { non_retryable: ["STEP_TIMEOUT"] } })]),
  );
  await d.start();
  await d.dispatch("a");
  d.now += 1000;
  await d.send({ type: "deadline", step: "a", attempt: 1 });
  assert.equal(d.s.status, "failed");
  assert.equal(d.s.error?.code, "STEP_TIMEOUT");
  assert.equal(d.s.error?.retryable, false);
});

Deno.test("decide() answers accepted:false to a result that arrives during the backoff", async () => {
  const d = new Driver(workflow([task("a")]));
  await d.start();
  const tok = await d.dispatch("a");
  await d.fail(tok, err("X"));
  assert.equal((await d.complete(tok, 1)).accepted, false);
  assert.equal(d.step("a").status, "backoff");
  assert.deepEqual(replay(d.history), d.s);
});
