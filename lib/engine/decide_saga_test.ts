import assert from "node:assert/strict";
import { replay } from "./state.ts";
import { Driver, err, T0, task, undo, workflow } from "./testing.ts";

/** a, b (no compensation), c, d compensate; e fails without retries. */
const SAGA = workflow([
  task("a", { compensate: undo("ua", { input: { own: "{% $steps.a %}", in: "{% $input.k %}" } }) }),
  task("b"),
  task("c", { compensate: undo("uc", { input: "{% $steps.c %}" }) }),
  task("d", {
    compensate: undo("ud", { input: { own: "{% $steps.d %}", before: "{% $steps.c %}" } }),
  }),
  task("e", { retry: { max_attempts: 1 }, compensate: undo("ue") }),
  task("f", { compensate: undo("uf") }),
]);

async function failAtE(d: Driver) {
  await d.start({ k: "K" });
  await d.run("a", "A");
  await d.run("b", "B");
  await d.run("c", { c: 3 });
  await d.run("d", ["D"]);
  return await d.fail(await d.dispatch("e"), err("PAYMENT_DECLINED", { details: { card: "x" } }));
}

Deno.test("decide() compensates the completed steps in reverse order after a failure", async () => {
  const d = new Driver(SAGA);
  const r = await failAtE(d);
  assert.deepEqual(r.events.map((e) => e.type), [
    "StepFailed",
    "CompensationStarted",
    "StepScheduled",
  ]);
  assert.deepEqual(d.of("CompensationStarted")[0], {
    type: "CompensationStarted",
    seq: r.events[1]!.seq,
    time_ms: T0,
    reason: "failed",
    steps: ["d.compensate", "c.compensate", "a.compensate"],
  });
  assert.equal(d.s.phase, "compensating");
  const order: string[] = [];
  while (d.s.phase === "compensating") {
    const next = d.s.compensation_queue[0]!;
    order.push(next);
    const st = d.step(next);
    assert.equal(st.compensation, true);
    assert.equal(st.idempotency_key, `run-1:${next}`);
    await d.run(next, `undone ${next}`);
  }
  assert.deepEqual(order, ["d.compensate", "c.compensate", "a.compensate"]);
  assert.equal(d.s.steps["b.compensate"], undefined, "b has no compensate");
  assert.equal(d.s.steps["e.compensate"], undefined, "e never completed");
  assert.equal(d.s.steps["f.compensate"], undefined, "f never ran");
  assert.equal(d.s.steps.f, undefined);
  assert.deepEqual(
    d.of("StepScheduled").filter((e) => e.compensation).map((e) => [e.step, e.task]),
    [
      ["d.compensate", "t.ud"],
      ["c.compensate", "t.uc"],
      ["a.compensate", "t.ua"],
    ],
  );
  assert.equal(d.s.status, "failed");
  assert.deepEqual(d.s.error, {
    code: "PAYMENT_DECLINED",
    message: "PAYMENT_DECLINED happened",
    retryable: true,
    details: { card: "x", step: "e" },
  });
  assert.deepEqual(
    d.s.outputs,
    { a: "A", b: "B", c: { c: 3 }, d: ["D"] },
    "compensations add no outputs",
  );
});

Deno.test("decide() evaluates compensation inputs with $steps of their own step", async () => {
  const d = new Driver(SAGA);
  await failAtE(d);
  const inputs = Object.fromEntries(
    d.of("StepScheduled").filter((e) => e.compensation).map((e) => [e.step, e.input]),
  );
  assert.deepEqual(inputs, { "d.compensate": { own: ["D"], before: { c: 3 } } });
  await d.run("d.compensate");
  await d.run("c.compensate");
  assert.deepEqual(d.step("c.compensate").input, { c: 3 });
  await d.run("a.compensate");
  assert.deepEqual(d.step("a.compensate").input, { own: "A", in: "K" });
});

Deno.test("decide() retries a failing compensation, records it, and still runs the others", async () => {
  const def = workflow([
    task("a", { compensate: undo("ua") }),
    task("b", { compensate: undo("ub", { retry: { max_attempts: 2, initial_ms: 50 } }) }),
    task("c", { retry: { max_attempts: 1 } }),
  ]);
  const d = new Driver(def);
  await d.start();
  await d.run("a");
  await d.run("b");
  await d.fail(await d.dispatch("c"), err("ORIGINAL"));
  await d.fail(await d.dispatch("b.compensate"), err("REFUND_DOWN"));
  assert.equal(d.step("b.compensate").status, "backoff");
  assert.equal(
    d.of("TimerStarted").at(-1)!.fire_at_ms - d.now,
    50,
    "the compensation's own retry policy",
  );
  await d.fireNextTimer();
  assert.equal(d.step("b.compensate").attempt, 2);
  assert.equal(d.of("StepScheduled").at(-1)!.compensation, true);
  const r = await d.fail(await d.dispatch("b.compensate"), err("REFUND_DOWN"));
  assert.deepEqual(r.events.map((e) => e.type), ["StepFailed", "StepScheduled"]);
  assert.equal(d.step("b.compensate").status, "failed");
  assert.deepEqual(d.s.compensation_failures.map((f) => f.step), ["b.compensate"]);
  assert.equal(
    d.s.failure?.code,
    "ORIGINAL",
    "a failing compensation does not replace the failure",
  );
  await d.run("a.compensate");
  assert.equal(d.s.status, "failed");
  assert.deepEqual(d.s.error, {
    code: "ORIGINAL",
    message: "ORIGINAL happened",
    retryable: true,
    details: { step: "c", compensation_failures: [{ step: "b.compensate", code: "REFUND_DOWN" }] },
  });
  assert.deepEqual(d.last(), {
    type: "WorkflowFailed",
    seq: d.s.last_seq,
    time_ms: d.now,
    error: d.s.error,
  });
});

Deno.test("decide() fails at once when nothing completed has a compensation", async () => {
  const d = new Driver(workflow([task("a"), task("b", { retry: { max_attempts: 1 } })]));
  await d.start();
  await d.run("a");
  const r = await d.fail(await d.dispatch("b"), err("X"));
  assert.deepEqual(r.events.map((e) => e.type), ["StepFailed", "WorkflowFailed"]);
  assert.equal(d.s.compensation_reason, null);
});

Deno.test("decide() cancel stops the in-flight step, compensates, then records WorkflowCancelled", async () => {
  const d = new Driver(SAGA);
  await d.start({ k: 1 });
  await d.run("a", "A");
  await d.run("b", "B");
  await d.run("c", "C");
  const inFlight = await d.dispatch("d");
  const r = await d.send({ type: "cancel", reason: "customer asked" });
  assert.equal(r.accepted, true);
  assert.deepEqual(r.events.map((e) => e.type), [
    "WorkflowCancelRequested",
    "StepCancelled",
    "CompensationStarted",
    "StepScheduled",
  ]);
  assert.deepEqual(d.of("StepCancelled")[0], {
    type: "StepCancelled",
    seq: r.events[1]!.seq,
    time_ms: T0,
    step: "d",
    attempt: 1,
    reason: "execution cancelled",
  });
  assert.deepEqual(d.of("CompensationStarted")[0]!.steps, ["c.compensate", "a.compensate"]);
  assert.equal(d.of("CompensationStarted")[0]!.reason, "cancelled");
  assert.equal(d.step("d").status, "cancelled");
  assert.equal((await d.complete(inFlight, "too late")).accepted, false);
  assert.equal(d.s.status, "running");
  await d.run("c.compensate");
  const end = await d.run("a.compensate");
  assert.deepEqual(end.events.map((e) => e.type), ["StepSucceeded", "WorkflowCancelled"]);
  assert.deepEqual(d.last(), {
    type: "WorkflowCancelled",
    seq: d.s.last_seq,
    time_ms: T0,
    reason: "customer asked",
  });
  assert.equal(d.s.status, "cancelled");
  assert.equal(d.s.error, null);
  assert.equal(d.s.steps["d.compensate"], undefined, "the cancelled step never completed");
});

Deno.test("decide() cancel during a retry backoff cancels the step and its timer", async () => {
  const d = new Driver(workflow([task("a", { compensate: undo("ua") }), task("b")]));
  await d.start();
  await d.run("a");
  await d.fail(await d.dispatch("b"), err("X"));
  assert.equal(d.step("b").status, "backoff");
  await d.send({ type: "cancel", reason: "stop" });
  assert.deepEqual(d.s.timers, {});
  assert.equal(d.step("b").status, "cancelled");
  d.now += 1e6;
  assert.equal((await d.timer("retry:b:1")).accepted, false);
  await d.run("a.compensate");
  assert.equal(d.s.status, "cancelled");
});

Deno.test("decide() cancel with nothing to compensate closes the run at once", async () => {
  const d = new Driver(workflow([task("a"), task("b", { compensate: undo("ub") })]));
  await d.start();
  await d.run("a");
  const tok = await d.dispatch("b");
  const r = await d.send({ type: "cancel", reason: "no longer needed" });
  assert.deepEqual(r.events.map((e) => e.type), [
    "WorkflowCancelRequested",
    "StepCancelled",
    "WorkflowCancelled",
  ]);
  assert.equal(d.s.status, "cancelled");
  assert.equal(d.s.closed_ms, T0);
  assert.equal(d.s.cancel_reason, "no longer needed");
  assert.equal((await d.complete(tok, 1)).accepted, false);
});

Deno.test("decide() cancel of a run that has just started cancels its first step", async () => {
  const d = new Driver(workflow([task("a")]));
  await d.start();
  const r = await d.send({ type: "cancel", reason: "oops" });
  assert.deepEqual(r.events.map((e) => e.type), [
    "WorkflowCancelRequested",
    "StepCancelled",
    "WorkflowCancelled",
  ]);
});

Deno.test("decide() refuses a second cancel while the first one compensates", async () => {
  const d = new Driver(workflow([task("a", { compensate: undo("ua") }), task("b")]));
  await d.start();
  await d.run("a");
  assert.equal((await d.send({ type: "cancel", reason: "first" })).accepted, true);
  const n = d.history.length;
  const second = await d.send({ type: "cancel", reason: "second" });
  assert.equal(second.accepted, false);
  assert.equal(d.history.length, n);
  assert.equal(d.s.cancel_reason, "first");
  await d.run("a.compensate");
  assert.equal(d.s.status, "cancelled");
  assert.equal(d.of("WorkflowCancelled")[0]!.reason, "first");
});

Deno.test("decide() refuses a cancel of a closed run", async () => {
  for (const outcome of ["completed", "failed", "cancelled"] as const) {
    const d = new Driver(workflow([task("a", { retry: { max_attempts: 1 } })]));
    await d.start();
    if (outcome === "completed") await d.run("a");
    if (outcome === "failed") await d.fail(await d.dispatch("a"), err("X"));
    if (outcome === "cancelled") await d.send({ type: "cancel", reason: "first" });
    assert.equal(d.s.status, outcome);
    const r = await d.send({ type: "cancel", reason: "again" });
    assert.equal(r.accepted, false, outcome);
    assert.deepEqual(r.events, []);
  }
});

Deno.test("decide() refuses a cancel while a failed run compensates", async () => {
  const d = new Driver(
    workflow([task("a", { compensate: undo("ua") }), task("b", { retry: { max_attempts: 1 } })]),
  );
  await d.start();
  await d.run("a");
  await d.fail(await d.dispatch("b"), err("X"));
  assert.equal(d.s.phase, "compensating");
  assert.equal((await d.send({ type: "cancel", reason: "r" })).accepted, false);
  await d.run("a.compensate");
  assert.equal(d.s.status, "failed");
});

Deno.test("decide() cancelled run reports failed compensations as COMPENSATION_FAILED", async () => {
  const d = new Driver(workflow([
    task("a", { compensate: undo("ua", { retry: { max_attempts: 1 } }) }),
    task("b", { compensate: undo("ub") }),
    task("c"),
  ]));
  await d.start();
  await d.run("a");
  await d.run("b");
  await d.send({ type: "cancel", reason: "stop" });
  await d.run("b.compensate");
  await d.fail(await d.dispatch("a.compensate"), err("CANNOT_UNDO"));
  assert.equal(d.s.status, "cancelled");
  assert.deepEqual(d.s.error, {
    code: "COMPENSATION_FAILED",
    message: "1 compensation(s) failed",
    details: { compensation_failures: [{ step: "a.compensate", code: "CANNOT_UNDO" }] },
  });
  assert.deepEqual(replay(d.history), d.s);
});

Deno.test("decide() a compensation times out and retries like any step", async () => {
  const d = new Driver(workflow([
    task("a", { compensate: undo("ua", { timeout_s: 2, retry: { initial_ms: 10 } }) }),
    task("b", { retry: { max_attempts: 1 } }),
  ]));
  await d.start();
  await d.run("a");
  await d.fail(await d.dispatch("b"), err("X"));
  const tok = await d.dispatch("a.compensate");
  assert.equal(d.of("StepDispatched").at(-1)!.deadline_ms, d.now + 2000);
  d.now += 2000;
  await d.send({ type: "deadline", step: "a.compensate", attempt: 1 });
  assert.equal(d.step("a.compensate").status, "backoff");
  assert.equal((await d.complete(tok, 1)).accepted, false);
  await d.fireNextTimer();
  await d.run("a.compensate");
  assert.equal(d.s.status, "failed");
  assert.equal(d.s.error?.code, "X");
});
