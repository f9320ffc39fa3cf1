import assert from "node:assert/strict";
import { decide, wakeups } from "./decide.ts";
import { replay } from "./state.ts";
import { Driver, err, ids, T0, task, undo, workflow } from "./testing.ts";

const SIX = workflow([
  task("a", { input: "{% $input.order_id %}" }),
  task("b", { input: { id: "{% $input.order_id %}", a: "{% $steps.a %}", lit: "plain" } }),
  task("c", { input: "{% $steps.b.total * 2 %}" }),
  task("d", { input: ["{% $steps.a %}", 1, "{% $steps.c %}"] }),
  task("e", { input: { exec: "{% $execution.id %}", wf: "{% $execution.workflow %}" } }),
  task("f"),
  { id: "done", return: { total: "{% $steps.c %}", b: "{% $steps.b %}", f: "{% $steps.f %}" } },
]);

Deno.test("decide() runs six sequential tasks with templated inputs and a return step", async () => {
  const d = new Driver(SIX);
  const start = await d.start({ order_id: "o-7" });
  assert.equal(start.accepted, true);
  assert.deepEqual(start.events.map((e) => e.type), ["WorkflowCreated", "StepScheduled"]);

  const outputs: Record<string, unknown> = {
    a: "A",
    b: { total: 21 },
    c: 42,
    d: [1],
    e: "E",
    f: null,
  };
  for (const id of ["a", "b", "c", "d", "e", "f"]) {
    assert.equal(d.s.cursor, Object.keys(d.s.outputs).length);
    assert.equal(d.step(id).status, "scheduled");
    await d.run(id, outputs[id]);
  }

  const inputs = Object.fromEntries(d.of("StepScheduled").map((e) => [e.step, e.input]));
  assert.deepEqual(inputs, {
    a: "o-7",
    b: { id: "o-7", a: "A", lit: "plain" },
    c: 42,
    d: ["A", 1, 42],
    e: { exec: "exec-1", wf: "Test" },
    f: null,
  });
  for (const e of d.of("StepScheduled")) {
    assert.equal(e.attempt, 1);
    assert.equal(e.idempotency_key, `run-1:${e.step}`);
    assert.equal(e.task, `t.${e.step}`);
  }
  assert.equal(d.s.status, "completed");
  assert.equal(d.s.phase, "closed");
  assert.equal(d.s.closed_ms, T0);
  assert.deepEqual(d.s.output, { total: 42, b: { total: 21 }, f: null });
  assert.deepEqual(d.last(), {
    type: "WorkflowCompleted",
    seq: 20,
    time_ms: T0,
    output: d.s.output,
  });
  assert.deepEqual(d.s.completed, ["a", "b", "c", "d", "e", "f"]);
  assert.deepEqual(d.history.map((e) => e.seq), Array.from({ length: 20 }, (_, i) => i + 1));
  assert.deepEqual(wakeups(d.s), []);
});

Deno.test("decide() completes with all step outputs when there is no return step", async () => {
  const d = new Driver(workflow([task("x"), task("y")]));
  await d.start();
  await d.run("x", { n: 1 });
  await d.run("y", [2]);
  assert.equal(d.s.status, "completed");
  assert.deepEqual(d.s.output, { x: { n: 1 }, y: [2] });
});

Deno.test("decide() with only a return step completes at start", async () => {
  const d = new Driver(workflow([{ id: "r", return: { echo: "{% $input %}", n: 3 } }]));
  const r = await d.start({ hi: true });
  assert.deepEqual(r.events.map((e) => e.type), ["WorkflowCreated", "WorkflowCompleted"]);
  assert.deepEqual(d.s.output, { echo: { hi: true }, n: 3 });
});

Deno.test("decide() start records ids, root and parent, and defaults root to the execution id", async () => {
  const d = new Driver(workflow([task("a")]));
  await d.start({ k: 1 });
  assert.deepEqual(d.history[0], {
    type: "WorkflowCreated",
    seq: 1,
    time_ms: T0,
    workflow: "Test",
    version: "1.0.0",
    input: { k: 1 },
    execution_id: "exec-1",
    run_id: "run-1",
    root_id: "exec-1",
    parent_id: null,
  });
  const child = new Driver(workflow([task("a")]), { executionId: "child" });
  await child.start(undefined, { root_id: "root", parent_id: "parent", input: undefined });
  assert.equal(child.s.root_id, "root");
  assert.equal(child.s.parent_id, "parent");
  assert.equal(child.s.input, null);
});

Deno.test("decide() refuses a second start of the same run", async () => {
  const d = new Driver(workflow([task("a")]));
  await d.start();
  const again = await d.start({ other: true });
  assert.equal(again.accepted, false);
  assert.deepEqual(again.events, []);
  assert.equal(d.history.length, 2);
});

Deno.test("decide() refuses every command but start on a run with no history", async () => {
  const def = workflow([task("a", { compensate: undo("undo") })]);
  const ctx = { now: T0, newId: ids() };
  for (
    const cmd of [
      { type: "cancel", reason: "x" },
      { type: "dispatch", step: "a", token: "t", worker_id: "w", worker_session: "s" },
      { type: "complete", token: "t", output: 1 },
      { type: "fail", token: "t", error: err("E") },
      { type: "timer", timer_id: "retry:a:1" },
      { type: "deadline", step: "a", attempt: 1 },
      { type: "uncertain", token: "t", reason: "x" },
    ] as const
  ) {
    const r = await decide(def, null, cmd, ctx);
    assert.equal(r.accepted, false, cmd.type);
    assert.deepEqual(r.events, [], cmd.type);
  }
});

Deno.test("decide() dispatch hands out a scheduled step once and sets its deadline", async () => {
  const d = new Driver(workflow([task("a", { timeout_s: 30 }), task("b")]));
  await d.start();
  d.now = T0 + 500;
  const tok = await d.dispatch("a");
  assert.deepEqual(d.last(), {
    type: "StepDispatched",
    seq: 3,
    time_ms: T0 + 500,
    step: "a",
    attempt: 1,
    token: tok,
    worker_id: "w-1",
    worker_session: "sess-1",
    deadline_ms: T0 + 500 + 30_000,
  });
  assert.equal(d.step("a").status, "dispatched");
  assert.deepEqual(Object.keys(d.step("a").tokens), [tok]);
  const twice = await d.send({
    type: "dispatch",
    step: "a",
    token: d.token(),
    worker_id: "w",
    worker_session: "s",
  });
  assert.equal(twice.accepted, false);
  const notYet = await d.send({
    type: "dispatch",
    step: "b",
    token: d.token(),
    worker_id: "w",
    worker_session: "s",
  });
  assert.equal(notYet.accepted, false, "b is not scheduled before a finishes");
  const unknown = await d.send({
    type: "dispatch",
    step: "zz",
    token: d.token(),
    worker_id: "w",
    worker_session: "s",
  });
  assert.equal(unknown.accepted, false);
});

Deno.test("decide() dispatch of a step without timeout_s has no deadline", async () => {
  const d = new Driver(workflow([task("a")]));
  await d.start();
  await d.dispatch("a");
  assert.equal(d.of("StepDispatched")[0]!.deadline_ms, null);
  assert.deepEqual(wakeups(d.s), []);
});

Deno.test("decide() answers a second complete with the same token accepted:false", async () => {
  const d = new Driver(workflow([task("a"), task("b")]));
  await d.start();
  const tok = await d.dispatch("a");
  assert.equal((await d.complete(tok, 1)).accepted, true);
  const before = d.history.length;
  const again = await d.complete(tok, 2);
  assert.equal(again.accepted, false);
  assert.deepEqual(again.events, []);
  assert.equal(d.history.length, before);
  assert.deepEqual(d.s.outputs, { a: 1 });
  assert.equal(d.of("StepSucceeded").length, 1);
});

Deno.test("decide() refuses a fail after the complete of the same token", async () => {
  const d = new Driver(workflow([task("a"), task("b")]));
  await d.start();
  const tok = await d.dispatch("a");
  await d.complete(tok, "ok");
  const late = await d.fail(tok, err("BOOM"));
  assert.equal(late.accepted, false);
  assert.equal(d.step("a").status, "succeeded");
  assert.equal(d.of("StepFailed").length, 0);
});

Deno.test("decide() refuses a complete after the fail of the same token", async () => {
  const d = new Driver(workflow([task("a", { retry: { max_attempts: 1 } })]));
  await d.start();
  const tok = await d.dispatch("a");
  await d.fail(tok, err("BOOM"));
  assert.equal(d.s.status, "failed");
  assert.equal((await d.complete(tok, 1)).accepted, false);
  assert.equal(d.of("StepSucceeded").length, 0);
});

Deno.test("decide() refuses results for an unknown token", async () => {
  const d = new Driver(workflow([task("a")]));
  await d.start();
  await d.dispatch("a");
  assert.equal((await d.complete("exec-1/nope", 1)).accepted, false);
  assert.equal((await d.fail("exec-1/nope", err("X"))).accepted, false);
  assert.equal(
    (await d.send({ type: "uncertain", token: "exec-1/nope", reason: "r" })).accepted,
    false,
  );
  assert.equal(d.step("a").status, "dispatched");
});

Deno.test("decide() refuses a result for a scheduled step that was never dispatched", async () => {
  const d = new Driver(workflow([task("a")]));
  await d.start();
  assert.equal((await d.complete(d.token(), 1)).accepted, false);
  assert.equal(d.step("a").status, "scheduled");
});

Deno.test("decide() refuses every command after the execution closed", async () => {
  const d = new Driver(workflow([task("a", { timeout_s: 1 })]));
  await d.start();
  const tok = await d.dispatch("a");
  await d.complete(tok, 1);
  assert.equal(d.s.status, "completed");
  const n = d.history.length;
  d.now += 10_000;
  for (
    const cmd of [
      { type: "complete", token: tok, output: 2 },
      { type: "fail", token: tok, error: err("X") },
      { type: "cancel", reason: "late" },
      { type: "deadline", step: "a", attempt: 1 },
      { type: "dispatch", step: "a", token: "t", worker_id: "w", worker_session: "s" },
      { type: "uncertain", token: tok, reason: "r" },
      { type: "timer", timer_id: "retry:a:1" },
    ] as const
  ) {
    assert.equal((await d.send(cmd)).accepted, false, cmd.type);
  }
  assert.equal(d.history.length, n);
});

Deno.test("decide() output null is recorded when a worker completes without output", async () => {
  const d = new Driver(workflow([task("a")]));
  await d.start();
  const tok = await d.dispatch("a");
  await d.send({ type: "complete", token: tok, output: undefined });
  assert.deepEqual(d.s.output, { a: null });
});

Deno.test("decide() never mutates the state it is given", async () => {
  const d = new Driver(
    workflow([task("a", { compensate: undo("ua") }), task("b", { timeout_s: 1 })]),
  );
  await d.start();
  await d.run("a", { x: 1 });
  const tok = await d.dispatch("b");
  const before = structuredClone(d.s);
  const frozen = d.s;
  d.now += 5000;
  const r = await decide(d.def, frozen, { type: "deadline", step: "b", attempt: 1 }, {
    now: d.now,
    newId: ids(),
  });
  assert.equal(r.accepted, true);
  assert.notEqual(r.state, frozen);
  assert.deepEqual(frozen, before);
  await decide(d.def, frozen, { type: "cancel", reason: "stop" }, { now: d.now, newId: ids() });
  await decide(d.def, frozen, { type: "complete", token: tok, output: 1 }, {
    now: d.now,
    newId: ids(),
  });
  assert.deepEqual(frozen, before);
});

Deno.test("decide() fails with EXPRESSION_ERROR when a step input cannot be evaluated", async () => {
  const d = new Driver(workflow([
    task("a", { compensate: undo("ua", { input: "{% $steps.a %}" }) }),
    task("b", { input: "{% $error('no total') %}", retry: { max_attempts: 5 } }),
    task("c"),
  ]));
  await d.start();
  const r = await d.run("a", "A");
  assert.deepEqual(r.events.map((e) => e.type), [
    "StepSucceeded",
    "StepScheduled",
    "StepFailed",
    "CompensationStarted",
    "StepScheduled",
  ]);
  const failed = d.of("StepFailed")[0]!;
  assert.equal(failed.step, "b");
  assert.equal(failed.will_retry, false, "an expression error is never retried");
  assert.equal(failed.error.code, "EXPRESSION_ERROR");
  assert.equal(failed.error.retryable, false);
  assert.match(failed.error.message, /step "b" input: .*no total/);
  assert.equal(d.step("b").status, "failed");
  assert.deepEqual(d.of("StepScheduled").at(-1)!.input, "A");
  await d.run("a.compensate");
  assert.equal(d.s.status, "failed");
  assert.equal(d.s.error?.code, "EXPRESSION_ERROR");
  assert.deepEqual(d.s.error?.details, { step: "b" });
  assert.equal(d.s.steps.c, undefined);
});

Deno.test("decide() fails at start with EXPRESSION_ERROR when the first input cannot be evaluated", async () => {
  const d = new Driver(workflow([task("a", { input: "{% $nope() %}" })]));
  const r = await d.start();
  assert.deepEqual(r.events.map((e) => e.type), [
    "WorkflowCreated",
    "StepScheduled",
    "StepFailed",
    "WorkflowFailed",
  ]);
  assert.equal(d.s.status, "failed");
  assert.equal(d.s.error?.code, "EXPRESSION_ERROR");
});

Deno.test("decide() runs the compensations when the return expression fails", async () => {
  const d = new Driver(workflow([
    task("a", { compensate: undo("ua") }),
    task("b"),
    { id: "done", return: "{% $error('bad return') %}" },
  ]));
  await d.start();
  await d.run("a", 1);
  const r = await d.run("b", 2);
  assert.deepEqual(r.events.map((e) => e.type), [
    "StepSucceeded",
    "CompensationStarted",
    "StepScheduled",
  ]);
  assert.equal(d.s.phase, "compensating");
  await d.run("a.compensate");
  assert.equal(d.s.status, "failed");
  assert.equal(d.s.error?.code, "EXPRESSION_ERROR");
  assert.equal(d.s.error?.retryable, false);
  assert.match(d.s.error!.message, /step "done" return: .*bad return/);
  assert.deepEqual(d.s.error?.details, { step: "done" });
  assert.deepEqual(replay(d.history), d.s);
});

Deno.test("decide() fails at once when the return expression fails and nothing compensates", async () => {
  const d = new Driver(workflow([task("a"), { id: "done", return: "{% $nope() %}" }]));
  await d.start();
  const r = await d.run("a", 1);
  assert.deepEqual(r.events.map((e) => e.type), ["StepSucceeded", "WorkflowFailed"]);
  assert.equal(d.s.error?.code, "EXPRESSION_ERROR");
  assert.deepEqual(d.s.error?.details, { step: "done" });
});

Deno.test("decide() records a failed compensation input as EXPRESSION_ERROR and goes on", async () => {
  const d = new Driver(workflow([
    task("a", { compensate: undo("ua", { input: "{% $steps.a.id %}" }) }),
    task("b", { compensate: undo("ub", { input: "{% $nope() %}" }) }),
    task("c", { retry: { max_attempts: 1 } }),
  ]));
  await d.start();
  await d.run("a", { id: "A1" });
  await d.run("b", 2);
  await d.fail(await d.dispatch("c"), err("DOWN"));
  const failedComp = d.of("StepFailed").find((e) => e.step === "b.compensate")!;
  assert.equal(failedComp.error.code, "EXPRESSION_ERROR");
  assert.equal(failedComp.will_retry, false);
  assert.equal(d.step("a.compensate").status, "scheduled");
  assert.equal(d.step("a.compensate").input, "A1");
  await d.run("a.compensate");
  assert.equal(d.s.status, "failed");
  assert.equal(d.s.error?.code, "DOWN");
  assert.deepEqual(d.s.error?.details, {
    step: "c",
    compensation_failures: [{ step: "b.compensate", code: "EXPRESSION_ERROR" }],
  });
});

Deno.test("wakeups() lists running timers and dispatch deadlines, and nothing once closed", async () => {
  const d = new Driver(workflow([task("a", { timeout_s: 2, retry: { initial_ms: 100 } })]));
  await d.start();
  await d.fail(await d.dispatch("a"), err("X"));
  assert.deepEqual(wakeups(d.s), [{ at: T0 + 100, cmd: { type: "timer", timer_id: "retry:a:1" } }]);
  await d.fireNextTimer();
  await d.dispatch("a");
  assert.deepEqual(wakeups(d.s), [{
    at: T0 + 100 + 2000,
    cmd: { type: "deadline", step: "a", attempt: 2 },
  }]);
  await d.send({ type: "cancel", reason: "stop" });
  assert.deepEqual(wakeups(d.s), []);
});

Deno.test("decide() with follow: the same events and state as a second decide on the first one's state", async () => {
  const d = new Driver(SIX);
  await d.start({ order_id: "o-7" });
  const token = await d.dispatch("a");
  const ctx = { now: d.now, newId: ids("follow") };
  const complete = { type: "complete" as const, token, output: "A" };
  const dispatchB = {
    type: "dispatch" as const,
    step: "b",
    token: "exec-1/next",
    worker_id: "w-1",
    worker_session: "sess-1",
  };
  const before = structuredClone(d.s);

  const one = await decide(SIX, d.s, complete, ctx, (s) => {
    assert.equal(s.steps.b?.status, "scheduled");
    return dispatchB;
  });
  const first = await decide(SIX, d.s, complete, ctx);
  const second = await decide(SIX, first.state, dispatchB, ctx);
  assert.equal(one.accepted, true);
  assert.equal(one.followed, true);
  assert.deepEqual(one.events, [...first.events, ...second.events]);
  assert.deepEqual(one.state, second.state);
  assert.deepEqual(d.s, before, "the state decided on is not changed");

  // A follow that does not apply adds nothing; a refused first command asks for no follow.
  const stale = await decide(SIX, d.s, complete, ctx, () => ({ ...dispatchB, step: "c" }));
  assert.equal(stale.followed, false);
  assert.deepEqual(stale.events, first.events);
  const refused = await decide(SIX, d.s, { ...complete, token: "exec-1/dead" }, ctx, () => {
    throw new Error("follow asked after a refused command");
  });
  assert.deepEqual([refused.accepted, refused.followed, refused.events], [false, false, []]);
});
