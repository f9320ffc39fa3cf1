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
