/**
 * orbit-ir/2 in the pure core, part 1: signals (buffer, wait_signal, handlers), sleep timers,
 * step timeouts, assign and `$vars`, if/else.
 */
import assert from "node:assert/strict";
import { wakeups } from "./decide.ts";
import { evaluate } from "./expr.ts";
import { scope } from "./builder.ts";
import { replay } from "./state.ts";
import { Driver, err, T0, task, undo, workflow2 } from "./testing.ts";

const SIGNALS = { go: {}, note: { schema: { type: "object" } } };

Deno.test("decide() wait_signal completes with the payload of a signal that arrives while it waits", async () => {
  const d = new Driver(workflow2([
    { id: "w", wait_signal: "go" },
    task("after", { input: "{% $steps.w.n %}" }),
  ], { signals: SIGNALS }));
  const r = await d.start();
  assert.deepEqual(r.events.map((e) => e.type), ["WorkflowCreated", "StepStarted"]);
  assert.deepEqual(d.history[1], {
    type: "StepStarted",
    seq: 2,
    time_ms: T0,
    step: "w",
    attempt: 1,
    kind: "wait_signal",
    signal: "go",
  });
  assert.equal(d.step("w").status, "waiting");
  const sig = await d.signal("go", { n: 7 });
  assert.deepEqual(sig.events.map((e) => e.type), [
    "SignalReceived",
    "StepSucceeded",
    "StepScheduled",
  ]);
  assert.deepEqual(sig.events[1], {
    type: "StepSucceeded",
    seq: 4,
    time_ms: T0,
    step: "w",
    attempt: 1,
    output: { n: 7 },
    signal_seq: 3,
  });
  assert.equal(d.step("after").input, 7);
  assert.deepEqual(d.s.signals, [], "the wait consumed the signal");
  assert.deepEqual(replay(d.history), d.s);
});

Deno.test("decide() buffers signals that arrive before the wait; each wait consumes the oldest", async () => {
  const d = new Driver(workflow2([
    task("first"),
    { id: "w1", wait_signal: "go" },
    { id: "w2", wait_signal: "go" },
  ], { signals: SIGNALS }));
  await d.start();
  await d.signal("go", 1);
  await d.signal("go", 2);
  await d.signal("note", {});
  assert.deepEqual(d.s.signals.map((x) => x.payload), [1, 2], "only waited-for signals are kept");
  const r = await d.run("first");
  assert.deepEqual(r.events.map((e) => e.type), [
    "StepSucceeded",
    "StepStarted",
    "StepSucceeded",
    "StepStarted",
    "StepSucceeded",
    "WorkflowCompleted",
  ]);
  assert.deepEqual(d.s.output, { first: null, w1: 1, w2: 2 });
  assert.equal(d.of("SignalReceived").filter((e) => e.buffered).length, 2);
});

Deno.test("decide() a wait_signal timeout fails the step with SIGNAL_TIMEOUT and runs the saga", async () => {
  const d = new Driver(workflow2([
    task("charge", { compensate: undo("refund") }),
    { id: "approval", wait_signal: "go", timeout_s: 60 },
  ], { signals: SIGNALS }));
  await d.start();
  await d.run("charge", "C");
  assert.deepEqual(wakeups(d.s), [{
    at: T0 + 60_000,
    cmd: { type: "timer", timer_id: "timeout:approval" },
  }]);
  d.now = T0 + 59_999;
  assert.equal((await d.timer("timeout:approval")).accepted, false, "not due yet");
  const r = await d.fireNextTimer();
  assert.deepEqual(r.events.map((e) => e.type), [
    "TimerFired",
    "StepFailed",
    "CompensationStarted",
    "StepScheduled",
  ]);
  assert.equal(d.of("StepFailed")[0]!.error.code, "SIGNAL_TIMEOUT");
  assert.equal(d.of("StepFailed")[0]!.will_retry, false);
  await d.run("charge.compensate");
  assert.equal(d.s.status, "failed");
  assert.equal(d.s.error?.code, "SIGNAL_TIMEOUT");
  // A signal that arrives after the timeout does not resurrect the step.
  assert.equal((await d.signal("go", 1)).accepted, false);
});

Deno.test("decide() a signal in time drops the wait's timeout timer", async () => {
  const d = new Driver(workflow2([{ id: "w", wait_signal: "go", timeout_s: 5 }, task("t")], {
    signals: SIGNALS,
  }));
  await d.start();
  assert.deepEqual(Object.keys(d.s.timers), ["timeout:w"]);
  await d.signal("go", "ok");
  assert.deepEqual(d.s.timers, {});
  assert.equal((await d.timer("timeout:w")).accepted, false);
});

Deno.test("decide() sleep_s is a durable timer; a signal during the sleep runs its handler and is buffered", async () => {
  const d = new Driver(workflow2([
    { id: "nap", sleep_s: 30 },
    { id: "w", wait_signal: "go" },
    { id: "done", return: { got: "{% $steps.w %}", count: "{% $vars.count %}" } },
  ], {
    signals: SIGNALS,
    handlers: {
      go: [{ id: "bump", assign: { count: "{% ($vars.count ? $vars.count : 0) + 1 %}" } }],
    },
  }));
  await d.start();
  assert.deepEqual(d.history.at(-1), {
    type: "TimerStarted",
    seq: 3,
    time_ms: T0,
    timer_id: "sleep:nap",
    fire_at_ms: T0 + 30_000,
    purpose: "sleep",
    step: "nap",
    attempt: 1,
  });
  d.now = T0 + 1000;
  const sig = await d.signal("go", "early");
  assert.deepEqual(sig.events.map((e) => e.type), [
    "SignalReceived",
    "VarsAssigned",
    "HandlerCompleted",
  ]);
  assert.equal(sig.events[0]!.seq, 4);
  assert.deepEqual(sig.events.slice(1), [{
    type: "VarsAssigned",
    seq: 5,
    time_ms: T0 + 1000,
    step: "bump@4",
    attempt: 1,
    vars: { count: 1 },
    frame: "@4",
  }, { type: "HandlerCompleted", seq: 6, time_ms: T0 + 1000, signal: "go", signal_seq: 4 }]);
  assert.equal(d.step("nap").status, "waiting", "the sleep goes on");
  assert.deepEqual(d.s.handlers, {}, "the handler run is over");
  assert.equal(d.s.outputs["bump@4"], undefined, "handler steps have no $steps outside their run");
  const fired = await d.fireNextTimer();
  assert.deepEqual(fired.events.map((e) => e.type), [
    "TimerFired",
    "StepSucceeded",
    "StepStarted",
    "StepSucceeded",
    "WorkflowCompleted",
  ]);
  assert.equal(d.now, T0 + 30_000);
  assert.deepEqual(d.s.output, { got: "early", count: 1 });
  assert.deepEqual(replay(d.history), d.s);
});

Deno.test("decide() sleep_s may be an expression; a bad value fails the step", async () => {
  const d = new Driver(workflow2([{ id: "nap", sleep_s: "{% $input.s %}" }]));
  await d.start({ s: 1.5 });
  assert.equal(d.s.timers["sleep:nap"]?.fire_at_ms, T0 + 1500);
  const bad = new Driver(workflow2([{ id: "nap", sleep_s: "{% $input.s %}" }]));
  await bad.start({ s: "soon" });
  assert.equal(bad.s.status, "failed");
  assert.equal(bad.s.error?.code, "EXPRESSION_ERROR");
  assert.match(bad.s.error!.message, /sleep_s must be a number/);
});

Deno.test("decide() a computed sleep_s keeps the one-year cap a literal one has at deploy", async () => {
  for (const s of [1e300, 31_536_000.5]) {
    const d = new Driver(workflow2([{ id: "nap", sleep_s: "{% $input.s %}" }]));
    await d.start({ s });
    assert.equal(d.s.status, "failed", `sleep_s ${s}`);
    assert.equal(d.s.error?.code, "EXPRESSION_ERROR");
    assert.match(d.s.error!.message, /sleep_s must be a number of seconds from 0 to 31536000/);
    assert.deepEqual(d.s.timers, {});
  }
  const year = new Driver(workflow2([{ id: "nap", sleep_s: "{% $input.s %}" }]));
  await year.start({ s: 31_536_000 });
  assert.equal(year.s.timers["sleep:nap"]?.fire_at_ms, T0 + 31_536_000_000);
});

Deno.test("decide() a definition of 9,999 synchronous steps runs to its end in one decision", async () => {
  const steps = Array.from({ length: 9_999 }, (_, i) => ({ id: `s${i}`, assign: { n: i } }));
  const d = new Driver(workflow2(steps));
  await d.start({});
  assert.equal(d.s.status, "completed");
  assert.deepEqual(d.s.vars, { n: 9_998 });
});

Deno.test("decide() handlers assign $vars that a query evaluates on the current state", async () => {
  const def = workflow2([
    { id: "init", assign: { status: "new", items: [] } },
    { id: "w", wait_signal: "go" },
  ], {
    signals: { ...SIGNALS, add: {} },
    queries: { status: "{% $vars.status %}", summary: { n: "{% $count($vars.items) %}" } },
    handlers: {
      add: [
        { id: "push", assign: { items: "{% $append($vars.items, $signal) %}" } },
        {
          id: "check",
          if: "{% $count($vars.items) >= 2 %}",
          then: [{ id: "full", assign: { status: "full" } }],
          else: [{ id: "partial", assign: { status: "partial" } }],
        },
      ],
    },
  });
  const d = new Driver(def);
  await d.start();
  assert.deepEqual(d.s.vars, { status: "new", items: [] });
  assert.deepEqual(d.s.outputs.init, { status: "new", items: [] }, "assign's output is its vars");
  const query = (name: string) => evaluate(def.queries![name], scope(d.s));
  assert.equal(await query("status"), "new");
  await d.signal("add", "x");
  assert.equal(await query("status"), "partial");
  await d.signal("add", "y");
  assert.deepEqual(d.s.vars, { status: "full", items: ["x", "y"] });
  assert.deepEqual(await query("summary"), { n: 2 });
  assert.deepEqual(
    d.of("VarsAssigned").map((e) => e.step),
    ["init", "push@4", "partial@4", "push@10", "full@10"],
  );
  assert.deepEqual(replay(d.history).vars, d.s.vars);
});

Deno.test("decide() a failing handler fails the run after its compensations", async () => {
  const d = new Driver(workflow2([task("a", { compensate: undo("ua") }), task("b")], {
    signals: { poke: {} },
    handlers: { poke: [{ id: "bad", assign: { x: "{% $error('nope') %}" } }] },
  }));
  await d.start();
  await d.run("a");
  await d.dispatch("b");
  const r = await d.signal("poke", 1);
  assert.deepEqual(r.events.map((e) => [e.type, (e as { step?: string }).step]), [
    ["SignalReceived", undefined],
    ["StepStarted", "bad@7"],
    ["StepFailed", "bad@7"],
    ["StepCancelled", "b"],
    ["CompensationStarted", undefined],
    ["StepScheduled", "a.compensate"],
  ]);
  await d.run("a.compensate");
  assert.equal(d.s.status, "failed");
  assert.equal(d.s.error?.code, "EXPRESSION_ERROR");
  assert.deepEqual(d.s.error?.details, { step: "bad@7" });
});

Deno.test("decide() a handler runs worker tasks per signal, side by side; the run waits for them and compensates them", async () => {
  const d = new Driver(workflow2([
    task("main", { compensate: undo("umain") }),
    task("last", { retry: { max_attempts: 1 } }),
  ], {
    signals: { order: {} },
    handlers: {
      order: [
        task("reserve", {
          input: "{% $signal.sku %}",
          compensate: undo("release", { input: "{% $steps.reserve %}" }),
        }),
        { id: "note", assign: { last: "{% $steps.reserve %}" } },
      ],
    },
  }));
  await d.start();
  const first = await d.signal("order", { sku: "A" });
  assert.deepEqual(first.events.map((e) => [e.type, (e as { step?: string }).step]), [
    ["SignalReceived", undefined],
    ["StepScheduled", "reserve@3"],
  ]);
  assert.equal(d.of("StepScheduled")[1]!.frame, "@3");
  assert.equal(d.step("reserve@3").input, "A");
  assert.equal(d.step("reserve@3").idempotency_key, "run-1:reserve@3");
  await d.signal("order", { sku: "B" });
  assert.deepEqual(Object.keys(d.s.handlers), ["3", "5"], "two runs of one handler");
  const main = await d.dispatch("main");
  await d.run("reserve@5", "R-B");
  assert.deepEqual(d.s.vars, { last: "R-B" }, "a handler reads its own run's steps");
  assert.deepEqual(Object.keys(d.s.handlers), ["3"]);
  await d.complete(main, "M");
  await d.run("reserve@3", "R-A");
  assert.deepEqual(d.s.handlers, {});
  assert.deepEqual(d.s.outputs, { main: "M" }, "handler steps stay out of $steps");
  // The last step fails: the saga undoes the handler's reservations too, newest first.
  await d.fail(await d.dispatch("last"), err("NOPE"));
  assert.deepEqual(d.of("CompensationStarted")[0]!.steps, [
    "reserve@3.compensate",
    "main.compensate",
    "reserve@5.compensate",
  ]);
  assert.equal(d.step("reserve@3.compensate").input, "R-A");
  for (const id of ["reserve@3.compensate", "main.compensate", "reserve@5.compensate"]) {
    await d.run(id);
  }
  assert.equal(d.s.status, "failed");
  assert.deepEqual(replay(d.history), d.s);
});

Deno.test("decide() the run completes only once its handler runs finished", async () => {
  const d = new Driver(workflow2([{ id: "w", wait_signal: "go" }], {
    signals: { go: {}, poke: {} },
    handlers: { poke: [{ id: "slow", sleep_s: 10 }] },
  }));
  await d.start();
  await d.signal("poke");
  await d.signal("go", 1);
  assert.equal(d.s.status, "running", "the poke handler still sleeps");
  const r = await d.fireNextTimer();
  assert.deepEqual(r.events.map((e) => e.type), [
    "TimerFired",
    "StepSucceeded",
    "HandlerCompleted",
    "WorkflowCompleted",
  ]);
  assert.deepEqual(d.s.output, { w: 1 });
});

Deno.test("decide() a signal during compensation is recorded but runs no handler", async () => {
  const d = new Driver(workflow2([
    task("a", { compensate: undo("ua") }),
    task("b", {
      retry: { max_attempts: 1 },
    }),
  ], { signals: { poke: {} }, handlers: { poke: [{ id: "set", assign: { x: 1 } }] } }));
  await d.start();
  await d.run("a");
  await d.fail(await d.dispatch("b"), { code: "X", message: "x" });
  assert.equal(d.s.phase, "compensating");
  const r = await d.signal("poke", 1);
  assert.deepEqual(r.events.map((e) => e.type), ["SignalReceived"]);
  assert.deepEqual(d.s.vars, {});
});

Deno.test("decide() if/else takes the then branch when the condition holds, else the else branch", async () => {
  const def = workflow2([
    {
      id: "big",
      if: "{% $input.total > 1000 %}",
      then: [task("review"), { id: "mark", assign: { big: true } }],
      else: [{ id: "unmark", assign: { big: false } }],
    },
    task("after", { input: { big: "{% $vars.big %}", branch: "{% $steps.big %}" } }),
  ]);
  const yes = new Driver(def);
  await yes.start({ total: 5000 });
  assert.deepEqual(yes.history[1], {
    type: "StepStarted",
    seq: 2,
    time_ms: T0,
    step: "big",
    attempt: 1,
    kind: "if",
    branch: "then",
  });
  assert.equal(yes.step("review").frame, "big.then");
  assert.equal(yes.of("StepScheduled")[0]!.frame, "big.then");
  await yes.run("review", "ok");
  assert.deepEqual(yes.step("after").input, { big: true, branch: { big: true } });
  assert.equal(yes.s.steps.unmark, undefined);

  const no = new Driver(def);
  await no.start({ total: 10 });
  assert.equal(no.of("StepStarted")[0]!.branch, "else");
  assert.deepEqual(no.step("after").input, { big: false, branch: { big: false } });
  assert.equal(no.s.steps.review, undefined);
  assert.deepEqual(replay(no.history), no.s);
});

Deno.test("decide() an if without the taken branch, or with an empty one, outputs null", async () => {
  const d = new Driver(workflow2([
    { id: "maybe", if: "{% $input.x %}", then: [task("t")] },
    { id: "empty", if: true, then: [] },
  ]));
  const r = await d.start({ x: false });
  assert.deepEqual(r.events.map((e) => e.type), [
    "WorkflowCreated",
    "StepStarted",
    "StepSucceeded",
    "StepStarted",
    "StepSucceeded",
    "WorkflowCompleted",
  ]);
  assert.deepEqual(d.s.output, { maybe: null, empty: null });
});

Deno.test("decide() an if condition that cannot be evaluated fails the step", async () => {
  const d = new Driver(workflow2([{ id: "c", if: "{% $error('bad') %}", then: [task("t")] }]));
  const r = await d.start();
  assert.deepEqual(r.events.map((e) => e.type), [
    "WorkflowCreated",
    "StepStarted",
    "StepFailed",
    "WorkflowFailed",
  ]);
  assert.equal(d.s.error?.code, "EXPRESSION_ERROR");
  assert.deepEqual(d.s.error?.details, { step: "c" });
});

Deno.test("decide() a return inside a branch ends the run at once", async () => {
  const d = new Driver(workflow2([
    { id: "early", if: "{% $input.stop %}", then: [{ id: "out", return: "stopped" }] },
    task("never"),
  ]));
  await d.start({ stop: true });
  assert.equal(d.s.status, "completed");
  assert.equal(d.s.output, "stopped");
  assert.equal(d.s.steps.never, undefined);
});
