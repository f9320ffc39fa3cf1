/**
 * The chaos checker (chaos/checker.ts) on made-up histories: a clean one passes, and each
 * invariant it proves is broken once to see it named.
 */
import assert from "node:assert/strict";
import {
  type Attempt,
  check,
  type CheckInput,
  parseAppendLine,
  type StartRecord,
} from "../chaos/checker.ts";
import type { Event, Snapshot } from "../chaos/history_db.ts";

const ID = "x-o1";
const RUN = "run-1";
const KEY = (step: string) => `${ID}:${step}`;

function ev(type: string, fields: Record<string, unknown> = {}): Omit<Event, "seq"> {
  return { type, run_id: RUN, time_ms: 1_000, ...fields } as Omit<Event, "seq">;
}

/** reserve and charge succeed, the run completes. */
function clean(): Omit<Event, "seq">[] {
  const steps = ["reserve", "charge"];
  return [
    ev("WorkflowCreated"),
    ...steps.flatMap((s) => [
      ev("StepScheduled", { step: s, attempt: 1, idempotency_key: KEY(s), task: "t" }),
      ev("StepDispatched", { step: s, attempt: 1, token: `${ID}/${s}-1` }),
      ev("StepSucceeded", { step: s, attempt: 1, token: `${ID}/${s}-1` }),
    ]),
    ev("WorkflowCompleted"),
  ];
}

function attemptsOf(events: Omit<Event, "seq">[]): Attempt[] {
  const keys = new Map<string, string>();
  const out: Attempt[] = [];
  for (const e of events) {
    if (e.type === "StepScheduled") keys.set(e.step, e.idempotency_key);
    if (e.type === "StepDispatched") {
      out.push({
        execution_id: ID,
        step: e.step,
        attempt: e.attempt,
        idempotency_key: keys.get(e.step)!,
        redelivery: e.redelivery === true,
        token: e.token,
        task: "t",
        pid: 1,
        at_ms: 1_000,
        worker: "worker-1",
      });
    }
  }
  return out;
}

function input(
  events: Omit<Event, "seq">[],
  o: { status?: string; attempts?: Attempt[]; starts?: StartRecord[]; seqs?: number[] } = {},
): CheckInput {
  const withSeq = events.map((e, i) => ({ ...e, seq: o.seqs?.[i] ?? i + 1 }) as Event);
  const snapshot: Snapshot = {
    executions: [{ execution_id: ID, run_id: RUN, workflow: "W", status: o.status ?? "completed" }],
    events: new Map([[ID, withSeq]]),
    schedules: [],
    cluster: null,
  };
  return {
    mode: "single-sqlite",
    snapshot,
    attempts: o.attempts ?? attemptsOf(events),
    starts: o.starts ?? [{ id: ID, kind: "order", answered: true, declaredWait: false }],
    faults: [],
    serverLogs: [],
    schedule: null,
  };
}

const rules = (i: CheckInput) => check(i).violations.map((v) => v.rule);

Deno.test("chaos checker: a clean history passes", () => {
  assert.deepEqual(rules(input(clean())), []);
});

Deno.test("chaos checker: a gap in seq, an event after the end, a second success are named", () => {
  assert.ok(rules(input(clean(), { seqs: [1, 2, 3, 5, 6, 7, 8, 9] })).includes("seq-contiguous"));
  assert.ok(
    rules(input([...clean(), ev("TimerFired", { timer_id: "t" })])).includes("after-terminal"),
  );
  const twice = clean();
  twice.splice(
    4,
    0,
    ev("StepSucceeded", { step: "reserve", attempt: 1, token: `${ID}/reserve-1` }),
  );
  const r = rules(input(twice));
  assert.ok(r.includes("one-success") && r.includes("event-order"), r.join());
});

Deno.test("chaos checker: a running execution is a violation unless it waits on purpose", () => {
  const waiting = [
    ev("WorkflowCreated"),
    ev("StepStarted", { step: "w", attempt: 1, kind: "wait_signal" }),
  ];
  assert.deepEqual(rules(input(waiting, { status: "running" })), ["terminal"]);
  assert.deepEqual(
    rules(input(waiting, {
      status: "running",
      starts: [{ id: ID, kind: "flow", answered: true, declaredWait: true }],
    })),
    [],
  );
});

Deno.test("chaos checker: a result no worker logged, a wrong key and a wrong redelivery flag are named", () => {
  const events = clean();
  const attempts = attemptsOf(events);
  assert.ok(
    rules(input(events, { attempts: attempts.slice(1) })).includes("result-matches-attempt"),
  );
  const wrongKey = attempts.map((a, i) => i === 0 ? { ...a, idempotency_key: "other" } : a);
  assert.ok(rules(input(events, { attempts: wrongKey })).includes("idempotency-key"));
  const flagged = attempts.map((a, i) => i === 0 ? { ...a, redelivery: true } : a);
  assert.ok(rules(input(events, { attempts: flagged })).includes("redelivery-flag"));
  // A redelivery after an uncertain attempt is legal and must say so.
  const redelivered = [
    ev("WorkflowCreated"),
    ev("StepScheduled", { step: "a", attempt: 1, idempotency_key: KEY("a"), task: "t" }),
    ev("StepDispatched", { step: "a", attempt: 1, token: `${ID}/a-1` }),
    ev("StepAttemptUncertain", { step: "a", attempt: 1, token: `${ID}/a-1` }),
    ev("StepDispatched", { step: "a", attempt: 1, token: `${ID}/a-2`, redelivery: true }),
    ev("StepSucceeded", { step: "a", attempt: 1, token: `${ID}/a-2` }),
    ev("WorkflowCompleted"),
  ];
  assert.deepEqual(rules(input(redelivered)), []);
  const unflagged = redelivered.map((e, i) => i === 4 ? { ...e, redelivery: undefined } : e);
  assert.ok(rules(input(unflagged, { attempts: attemptsOf(redelivered) })).includes("event-order"));
});

Deno.test("chaos checker: compensations only for completed steps, in reverse order", () => {
  const saga = (order: string[], listed = ["reserve.compensate", "charge.compensate"]) => [
    ...clean().slice(0, -1),
    ev("CompensationStarted", { reason: "cancelled", steps: listed }),
    ...order.flatMap((s) => [
      ev("StepScheduled", {
        step: `${s}.compensate`,
        attempt: 1,
        idempotency_key: KEY(`${s}.compensate`),
        task: "t",
        compensation: true,
      }),
      ev("StepDispatched", { step: `${s}.compensate`, attempt: 1, token: `${ID}/${s}-c` }),
      ev("StepSucceeded", { step: `${s}.compensate`, attempt: 1, token: `${ID}/${s}-c` }),
    ]),
    ev("WorkflowCancelled"),
  ];
  assert.deepEqual(rules(input(saga(["charge", "reserve"]), { status: "cancelled" })), []);
  assert.ok(
    rules(input(saga(["reserve", "charge"]), { status: "cancelled" })).includes("compensation"),
  );
  assert.ok(
    rules(input(saga(["ship"], ["ship.compensate"]), { status: "cancelled" })).includes(
      "compensation",
    ),
  );
});

Deno.test("chaos checker: a missing schedule occurrence and two leaders in one term are named", () => {
  const i = input(clean());
  const every = 2_000;
  const t0 = 1_700_000_000_000;
  i.snapshot.executions.push(
    ...[t0 + 2 * every, t0 + 3 * every, t0 + 5 * every].map((t) => ({
      execution_id: `s@${new Date(t).toISOString()}`,
      run_id: `r${t}`,
      workflow: "Tick",
      status: "completed",
    })),
  );
  i.schedule = { schedule_id: "s", every_s: 2, created_ms: t0, next_fire_ms: t0 + 6 * every };
  const v = check(i).violations;
  assert.ok(
    v.some((x) => x.rule === "schedule" && /1 occurrences never started/.test(x.message)),
    JSON.stringify(v),
  );
  const s = input(clean());
  s.mode = "standby";
  s.serverLogs = [
    { node: "node-1", line: "cluster: leader is serving node_id=node-1 term=3" },
    { node: "node-2", line: "cluster: leader is serving node_id=node-2 term=3" },
  ];
  assert.ok(rules(s).includes("leader-term"));
});

/** `shared: appended` lines as lib/store/postgres.ts writes them, for the 8 events of clean(). */
function appendLines(parts: Array<[node: string, epoch: number, from: number, to: number]>) {
  return parts.map(([node, epoch, from, to], i) => ({
    node,
    line: `2026-12-03T06:13:4${i}.545000Z DEBUG orbit_runtime::shared: shared: appended ` +
      `node_id=${node} execution_id=${ID} run_id=${RUN} epoch=${epoch} from_seq=${from} to_seq=${to}`,
  }));
}

function sharedInput(parts: Array<[string, number, number, number]>): CheckInput {
  const i = input(clean());
  i.mode = "shared";
  i.appends = appendLines(parts).map(({ node, line }) => parseAppendLine(node, line)!);
  return i;
}

Deno.test("chaos checker: shared appends by one node per epoch, epochs growing along the seqs, pass", () => {
  const i = sharedInput([["node-1", 1, 1, 3], ["node-1", 1, 4, 5], ["node-2", 2, 6, 8]]);
  assert.equal(i.appends!.length, 3);
  assert.deepEqual(i.appends![2], {
    node: "node-2",
    node_id: "node-2",
    execution_id: ID,
    run_id: RUN,
    epoch: 2,
    from_seq: 6,
    to_seq: 8,
    at_ms: Date.parse("2026-12-03T06:13:42.545Z"),
  });
  const r = check(i);
  assert.deepEqual(r.violations, []);
  assert.equal(r.appends, 3);
  // Any other line of a server is not an append.
  assert.equal(
    parseAppendLine("node-1", "x INFO orbit_runtime::shared: shared: node is serving"),
    null,
  );
});

Deno.test("chaos checker: two nodes appending at one epoch, or a lower epoch after a higher one, are named", () => {
  const two = check(sharedInput([["node-1", 1, 1, 3], ["node-2", 1, 4, 5], ["node-1", 1, 6, 8]]));
  assert.deepEqual(two.violations.map((v) => v.rule), ["append-epoch"]);
  assert.match(two.violations[0]!.message, /two nodes appended at epoch 1: node-1 .* and node-2/);
  assert.equal(two.violations[0]!.execution, ID);

  const back = check(sharedInput([["node-1", 2, 1, 3], ["node-2", 1, 4, 8]]));
  assert.deepEqual(back.violations.map((v) => v.rule), ["append-epoch"]);
  assert.match(back.violations[0]!.message, /a lower epoch after a higher one/);

  // Seqs logged twice, past the history's end, a line under another node's id, and no line at
  // all (the capture broke) are named too.
  const rules2 = (p: Array<[string, number, number, number]>) => rules(sharedInput(p));
  assert.deepEqual(rules2([["node-1", 1, 1, 5], ["node-1", 1, 5, 8]]), ["append-epoch"]);
  assert.deepEqual(rules2([["node-1", 1, 1, 9]]), ["append-epoch"]);
  const foreign = sharedInput([["node-1", 1, 1, 8]]);
  foreign.appends![0]!.node = "node-3";
  assert.deepEqual(rules(foreign), ["append-epoch"]);
  assert.deepEqual(rules2([]), ["append-epoch"]);
  // Outside shared mode (or with nothing captured) the rule does not apply.
  const single = sharedInput([]);
  single.mode = "standby";
  assert.deepEqual(rules(single), []);
});

Deno.test("chaos checker: a signal recorded twice after answers that said nothing was applied, or answered and never recorded, is named", () => {
  const note = (i: number) => ev("SignalReceived", { signal: "note", payload: { i } });
  const events = [...clean()];
  events.splice(1, 0, note(0), note(0), note(1), note(1));
  const start = (signals: { signal: string; key: number; statuses: number[] }[]) => ({
    starts: [{ id: ID, kind: "flow" as const, answered: true, declaredWait: false, signals }],
  });
  // Twice after a 503 (nothing applied) and a 200: named. Twice after no answer, or a 500:
  // the first may have landed, so not named.
  assert.deepEqual(
    rules(input(events, start([{ signal: "note", key: 0, statuses: [503, 200] }]))),
    [
      "signal-once",
    ],
  );
  assert.deepEqual(
    rules(input(
      events,
      start([
        { signal: "note", key: 0, statuses: [0, 200] },
        { signal: "note", key: 1, statuses: [500, 200] },
      ]),
    )),
    [],
  );
  // Answered 200 but not in the history.
  assert.deepEqual(rules(input(events, start([{ signal: "note", key: 2, statuses: [200] }]))), [
    "signal-once",
  ]);
  // Refused (the execution had finished): nothing to find.
  assert.deepEqual(rules(input(events, start([{ signal: "note", key: 2, statuses: [409] }]))), []);
});

Deno.test("chaos checker: a timer fired before its fire_at_ms, twice, unstarted or after its step's cancel is named", () => {
  /** A sleep step `nap` whose timer is due at 5 000 ms, fired at `firedAt`. */
  const slept = (firedAt: number, extra: Omit<Event, "seq">[] = []) => [
    ev("WorkflowCreated"),
    ev("StepStarted", { step: "nap", attempt: 1, kind: "sleep" }),
    ev("TimerStarted", {
      timer_id: "sleep:nap",
      fire_at_ms: 5_000,
      purpose: "sleep",
      step: "nap",
      attempt: 1,
    }),
    ev("TimerFired", { timer_id: "sleep:nap", step: "nap", time_ms: firedAt }),
    ...extra,
    ev("StepSucceeded", { step: "nap", attempt: 1, time_ms: firedAt }),
    ev("WorkflowCompleted", { time_ms: firedAt }),
  ];
  // Due at 5 000: firing at 5 000 or later passes, and is counted.
  const ok = check(input(slept(5_000)));
  assert.deepEqual(ok.violations, []);
  assert.equal(ok.timersFired, 1);
  assert.deepEqual(rules(input(slept(7_500))), []);
  // One millisecond early is named, with how early.
  const early = check(input(slept(4_999))).violations;
  assert.deepEqual(early.map((x) => x.rule), ["timer-fire"]);
  assert.match(early[0]!.message, /TimerFired sleep:nap .* 1 ms before the fire_at_ms/);
  // Fired twice.
  const twice = check(
    input(slept(6_000, [ev("TimerFired", { timer_id: "sleep:nap", time_ms: 6_000 })])),
  );
  assert.deepEqual(twice.violations.map((x) => x.rule), ["timer-fire"]);
  assert.match(twice.violations[0]!.message, /already fired at seq 4/);
  // Fired with no TimerStarted of its id.
  assert.deepEqual(
    rules(input([
      ev("WorkflowCreated"),
      ev("TimerFired", { timer_id: "retry:a:1", step: "a", time_ms: 9_000 }),
      ev("WorkflowCompleted", { time_ms: 9_000 }),
    ])),
    ["timer-fire"],
  );
  // A wait_signal's timeout timer dropped by its step's cancel must not fire afterwards.
  const dropped = [
    ev("WorkflowCreated"),
    ev("StepStarted", { step: "w", attempt: 1, kind: "wait_signal", timeout_ms: 1_000 }),
    ev("TimerStarted", {
      timer_id: "timeout:w",
      fire_at_ms: 2_000,
      purpose: "timeout",
      step: "w",
      attempt: 1,
    }),
    ev("WorkflowCancelRequested", { reason: "x" }),
    ev("StepCancelled", { step: "w", attempt: 1, reason: "x" }),
    ev("TimerFired", { timer_id: "timeout:w", step: "w", time_ms: 3_000 }),
    ev("WorkflowCancelled", { reason: "x", time_ms: 3_000 }),
  ];
  const d = check(input(dropped, { status: "cancelled" })).violations;
  assert.deepEqual(d.map((x) => x.rule), ["timer-fire"]);
  assert.match(d[0]!.message, /already dropped at seq 5 \(StepCancelled\)/);
  // Without the stray TimerFired the same history passes.
  assert.deepEqual(rules(input(dropped.filter((_, i) => i !== 5), { status: "cancelled" })), []);
});

Deno.test("chaos checker: a wait answered with a terminal status the history's run does not end with is named", () => {
  const output = { order_id: ID, charge_id: "ch-1", tracking: "trk", points: 9 };
  const events = clean().map((e) => e.type === "WorkflowCompleted" ? { ...e, output } : e);
  const waited = (w: Record<string, unknown>, status = "completed", evs = events) =>
    input(evs, {
      status,
      starts: [{
        id: ID,
        kind: "order",
        answered: true,
        declaredWait: false,
        waited: { at_ms: 1_000, run_id: RUN, ...w } as StartRecord["waited"],
      }],
    });
  // The same status and output (keys in another order, as jsonb reads them) pass, and count.
  const ok = check(waited({
    status: "completed",
    output: { points: 9, tracking: "trk", charge_id: "ch-1", order_id: ID },
  }));
  assert.deepEqual(ok.violations, []);
  assert.equal(ok.waitsChecked, 1);
  // No output recorded: only the status is compared. A running answer is not judged.
  assert.deepEqual(rules(waited({ status: "completed" })), []);
  assert.deepEqual(rules(waited({ status: "running" })), []);
  // Another output, another status, or a run without its terminal event are named.
  const other = check(waited({ status: "completed", output: { ...output, points: 10 } }));
  assert.deepEqual(other.violations.map((x) => x.rule), ["wait-answer"]);
  assert.match(other.violations[0]!.message, /with output .* recorded/);
  const status = check(waited({ status: "cancelled" })).violations;
  assert.deepEqual(status.map((x) => x.rule), ["wait-answer"]);
  assert.match(status[0]!.message, /ended with WorkflowCompleted seq 8/);
  const open = check(waited({ status: "completed" }, "running", events.slice(0, -1))).violations;
  // The execution is also not terminal (rule 1); the wait's answer is named on its own.
  assert.deepEqual(open.map((x) => x.rule).sort(), ["terminal", "wait-answer"]);
  assert.match(open[1]!.message, /has no terminal event/);
  // A failed run's error code must be the one the answer gave.
  const failed = [
    ...clean().slice(0, -1),
    ev("WorkflowFailed", { error: { code: "CARD_DECLINED", message: "x" } }),
  ];
  assert.deepEqual(
    rules(waited({ status: "failed", error_code: "CARD_DECLINED" }, "failed", failed)),
    [],
  );
  assert.deepEqual(rules(waited({ status: "failed", error_code: "TIMEOUT" }, "failed", failed)), [
    "wait-answer",
  ]);
});

Deno.test("chaos checker: a row that a replay of its history does not give is named (history)", () => {
  // The checker can fail: a gap of one append (StepSucceeded and the next StepScheduled) in a
  // history whose row says completed.
  const gap = clean();
  gap.splice(3, 2);
  assert.ok(rules(input(gap)).includes("history"), "a lost append");
  // The row closed, the history still running (its closing append lost).
  assert.ok(rules(input(clean().slice(0, -1))).includes("history"), "a lost closing append");
  // Output and last_seq of the row against the replay.
  const bad = input(clean());
  bad.snapshot.executions[0]!.output = { other: true };
  bad.snapshot.executions[0]!.last_seq = 8;
  assert.deepEqual(rules(bad), ["history"]);
  const ahead = input(clean());
  ahead.snapshot.executions[0]!.last_seq = 9;
  assert.deepEqual(check(ahead).violations.map((v) => v.message), [
    "row last_seq 9 is past the history's end (seq 8)",
  ]);
});
