import assert from "node:assert/strict";
import type { EventBody, HistoryEvent } from "./events.ts";
import {
  apply,
  emptyState,
  HistoryError,
  inFlightCount,
  liveTokens,
  queuedSteps,
  replay,
  stepOfToken,
} from "./state.ts";
import { T0 } from "./testing.ts";

/** Numbers the bodies 1, 2, 3…, one millisecond apart. */
function history(...bodies: EventBody[]): HistoryEvent[] {
  return bodies.map((b, i) => ({ ...b, seq: i + 1, time_ms: T0 + i }) as HistoryEvent);
}

const CREATED: EventBody = {
  type: "WorkflowCreated",
  workflow: "W",
  version: "1.0.0",
  input: { n: 1 },
  execution_id: "e1",
  run_id: "r1",
  root_id: "root",
};

function scheduled(step: string, attempt = 1, extra: Partial<EventBody> = {}): EventBody {
  return {
    type: "StepScheduled",
    step,
    attempt,
    task: `t.${step}`,
    contract: "1",
    input: { step },
    idempotency_key: `r1:${step}`,
    ...extra,
  } as EventBody;
}

function dispatched(
  step: string,
  token: string,
  attempt = 1,
  deadline_ms: number | null = null,
): EventBody {
  return {
    type: "StepDispatched",
    step,
    attempt,
    token,
    worker_id: "w",
    worker_session: "s",
    deadline_ms,
  };
}

Deno.test("replay() of no events is the empty state", () => {
  assert.deepEqual(replay([]), emptyState());
});

Deno.test("apply() of WorkflowCreated records the run's identity and input", () => {
  const s = replay(history(CREATED));
  assert.equal(s.execution_id, "e1");
  assert.equal(s.run_id, "r1");
  assert.equal(s.root_id, "root");
  assert.equal(s.parent_id, null);
  assert.equal(s.workflow, "W");
  assert.equal(s.version, "1.0.0");
  assert.deepEqual(s.input, { n: 1 });
  assert.equal(s.created_ms, T0);
  assert.equal(s.status, "running");
  assert.equal(s.phase, "running");
  assert.equal(s.last_seq, 1);
});

Deno.test("apply() changes the state in place and returns it", () => {
  const s = emptyState();
  const [e] = history(CREATED);
  assert.equal(apply(s, e!), s);
  assert.equal(s.last_seq, 1);
});

Deno.test("apply() throws HistoryError on a seq gap", () => {
  const s = replay(history(CREATED));
  const gap = { ...scheduled("a"), seq: 3, time_ms: T0 } as HistoryEvent;
  assert.throws(() => apply(s, gap), (e: unknown) => {
    assert.ok(e instanceof HistoryError);
    assert.equal(e.name, "HistoryError");
    assert.match(e.message, /expected seq 2, got 3/);
    return true;
  });
  assert.equal(s.last_seq, 1, "a refused event changes nothing");
});

Deno.test("apply() throws HistoryError on a repeated seq and on a history not starting at 1", () => {
  const [created, sched] = history(CREATED, scheduled("a"));
  assert.throws(() => replay([created!, created!]), HistoryError);
  assert.throws(() => replay([sched!]), HistoryError);
  assert.throws(() => replay([created!, sched!, sched!]), /expected seq 3, got 2/);
});

Deno.test("apply() throws HistoryError for an event naming an unknown step", () => {
  assert.throws(
    () => replay(history(CREATED, dispatched("ghost", "t1"))),
    (e: unknown) => e instanceof HistoryError && /unknown step "ghost"/.test(e.message),
  );
});

Deno.test("apply() throws HistoryError for an unknown event type", () => {
  const bogus = { type: "Bogus", seq: 2, time_ms: T0 } as unknown as HistoryEvent;
  assert.throws(() => apply(replay(history(CREATED)), bogus), /unknown event type Bogus/);
});

Deno.test("apply() moves a step scheduled → dispatched → succeeded and records its output", () => {
  const h = history(
    CREATED,
    scheduled("a", 1, { timeout_ms: 500, language: "python" }),
    dispatched("a", "t1", 1, 9),
  );
  let s = replay(h);
  const st = s.steps.a!;
  assert.equal(st.status, "dispatched");
  assert.equal(st.language, "python");
  assert.equal(st.timeout_ms, 500);
  assert.equal(st.deadline_ms, 9);
  assert.deepEqual(st.tokens, {
    t1: { worker_id: "w", worker_session: "s", dispatched_ms: T0 + 2 },
  });
  assert.equal(stepOfToken(s, "t1")?.id, "a");
  assert.equal(inFlightCount(s), 1);
  assert.deepEqual(queuedSteps(s), []);
  s = replay(history(CREATED, scheduled("a"), dispatched("a", "t1"), {
    type: "StepSucceeded",
    step: "a",
    attempt: 1,
    token: "t1",
    output: { ok: 1 },
  }));
  assert.equal(s.steps.a!.status, "succeeded");
  assert.deepEqual(s.steps.a!.tokens, {});
  assert.deepEqual(s.outputs, { a: { ok: 1 } });
  assert.deepEqual(s.completed, ["a"]);
  assert.equal(s.cursor, 1);
  assert.equal(stepOfToken(s, "t1"), undefined);
  assert.equal(inFlightCount(s), 0);
});

Deno.test("apply() defaults optional StepScheduled fields", () => {
  const st = replay(history(CREATED, scheduled("a"))).steps.a!;
  assert.equal(st.language, null);
  assert.equal(st.timeout_ms, null);
  assert.equal(st.compensation, false);
  assert.equal(st.redelivery, false);
  assert.deepEqual(st.tokens, {});
  assert.equal(st.deadline_ms, null);
});

Deno.test("apply() StepAttemptUncertain keeps the token live, marks it, and requeues the step", () => {
  const s = replay(history(
    CREATED,
    scheduled("a"),
    dispatched("a", "t1", 1, 99),
    { type: "StepAttemptUncertain", step: "a", attempt: 1, token: "t1", reason: "lost" },
  ));
  const st = s.steps.a!;
  assert.equal(st.status, "scheduled");
  assert.equal(st.redelivery, true);
  assert.equal(st.deadline_ms, null);
  assert.equal(st.tokens.t1?.uncertain, true);
  assert.deepEqual(queuedSteps(s).map((x) => x.id), ["a"]);
  assert.deepEqual(liveTokens(s).map((t) => t.token), ["t1"]);
});

Deno.test("apply() StepFailed with will_retry is a backoff; without it the failure names the step", () => {
  const fail = (will_retry: boolean, details?: unknown): EventBody => ({
    type: "StepFailed",
    step: "a",
    attempt: 1,
    token: "t1",
    error: { code: "E", message: "m", ...(details !== undefined ? { details } : {}) },
    will_retry,
  });
  const retrying = replay(history(CREATED, scheduled("a"), dispatched("a", "t1"), fail(true)));
  assert.equal(retrying.steps.a!.status, "backoff");
  assert.equal(retrying.failure, null);
  assert.deepEqual(retrying.steps.a!.tokens, {});
  const failed = replay(
    history(CREATED, scheduled("a"), dispatched("a", "t1"), fail(false, { x: 1 })),
  );
  assert.equal(failed.steps.a!.status, "failed");
  assert.deepEqual(failed.failure, { code: "E", message: "m", details: { x: 1, step: "a" } });
  const scalar = replay(
    history(CREATED, scheduled("a"), dispatched("a", "t1"), fail(false, "text")),
  );
  assert.deepEqual(scalar.failure?.details, { step: "a" }, "non-object details are replaced");
});

Deno.test("apply() a retry StepScheduled starts a new attempt with no tokens", () => {
  const s = replay(history(
    CREATED,
    scheduled("a"),
    dispatched("a", "t1"),
    {
      type: "StepFailed",
      step: "a",
      attempt: 1,
      token: "t1",
      error: { code: "E", message: "m" },
      will_retry: true,
    },
    {
      type: "TimerStarted",
      timer_id: "retry:a:1",
      fire_at_ms: 5,
      purpose: "retry",
      step: "a",
      attempt: 1,
    },
    { type: "TimerFired", timer_id: "retry:a:1", step: "a" },
    scheduled("a", 2),
  ));
  assert.equal(s.steps.a!.attempt, 2);
  assert.equal(s.steps.a!.status, "scheduled");
  assert.deepEqual(s.steps.a!.tokens, {});
  assert.deepEqual(s.timers, {});
});

Deno.test("apply() TimerStarted records only the fields it was given", () => {
  const s = replay(
    history(CREATED, { type: "TimerStarted", timer_id: "t", fire_at_ms: 7, purpose: "sleep" }),
  );
  assert.deepEqual(s.timers, { t: { fire_at_ms: 7, purpose: "sleep" } });
});

Deno.test("apply() StepCancelled closes the step and drops its timers only", () => {
  const s = replay(history(
    CREATED,
    scheduled("a"),
    {
      type: "TimerStarted",
      timer_id: "mine",
      fire_at_ms: 1,
      purpose: "retry",
      step: "a",
      attempt: 1,
    },
    { type: "TimerStarted", timer_id: "other", fire_at_ms: 1, purpose: "sleep" },
    { type: "StepCancelled", step: "a", attempt: 1, reason: "x" },
  ));
  assert.equal(s.steps.a!.status, "cancelled");
  assert.deepEqual(Object.keys(s.timers), ["other"]);
});

Deno.test("apply() compensation results leave outputs and the cursor alone", () => {
  const comp = (id: string) => scheduled(id, 1, { compensation: true });
  const s = replay(history(
    CREATED,
    { type: "CompensationStarted", reason: "failed", steps: ["b.compensate", "a.compensate"] },
    comp("b.compensate"),
    { type: "StepSucceeded", step: "b.compensate", attempt: 1, output: 1 },
    comp("a.compensate"),
    {
      type: "StepFailed",
      step: "a.compensate",
      attempt: 1,
      error: { code: "C", message: "m" },
      will_retry: false,
    },
  ));
  assert.equal(s.phase, "compensating");
  assert.equal(s.compensation_reason, "failed");
  assert.deepEqual(s.compensation_queue, []);
  assert.deepEqual(s.compensation_failures, [{
    step: "a.compensate",
    error: { code: "C", message: "m" },
  }]);
  assert.deepEqual(s.outputs, {});
  assert.deepEqual(s.completed, []);
  assert.equal(s.cursor, 0);
  assert.equal(s.failure, null, "a failing compensation is not the run's failure");
});

Deno.test("apply() CompensationStarted copies its step list and may carry the failure", () => {
  const steps = ["a.compensate"];
  const error = { code: "EXPRESSION_ERROR", message: "m" };
  const s = replay(
    history(CREATED, { type: "CompensationStarted", reason: "failed", steps, error }),
  );
  s.compensation_queue.shift();
  assert.deepEqual(steps, ["a.compensate"], "the event is not aliased");
  assert.deepEqual(s.failure, error);
});

Deno.test("apply() a terminal event closes the run and cancels every open step", () => {
  const s = replay(history(
    CREATED,
    scheduled("a"),
    dispatched("a", "t1"),
    { type: "TimerStarted", timer_id: "x", fire_at_ms: 1, purpose: "sleep" },
    { type: "WorkflowFailed", error: { code: "E", message: "m" } },
  ));
  assert.equal(s.status, "failed");
  assert.equal(s.phase, "closed");
  assert.equal(s.closed_ms, T0 + 4);
  assert.deepEqual(s.error, { code: "E", message: "m" });
  assert.equal(s.steps.a!.status, "cancelled");
  assert.deepEqual(s.timers, {});
  assert.deepEqual(liveTokens(s), []);
});

Deno.test("apply() WorkflowCompleted and WorkflowCancelled set output, status and error", () => {
  const done = replay(history(CREATED, { type: "WorkflowCompleted", output: [1] }));
  assert.equal(done.status, "completed");
  assert.deepEqual(done.output, [1]);
  const cancelled = replay(history(
    CREATED,
    { type: "WorkflowCancelRequested", reason: "r" },
    { type: "WorkflowCancelled", reason: "r" },
  ));
  assert.equal(cancelled.status, "cancelled");
  assert.equal(cancelled.cancel_reason, "r");
  assert.equal(cancelled.error, null);
  const withError = replay(history(CREATED, {
    type: "WorkflowCancelled",
    reason: "r",
    error: { code: "COMPENSATION_FAILED", message: "m" },
  }));
  assert.equal(withError.error?.code, "COMPENSATION_FAILED");
});

Deno.test("queuedSteps() is empty once the run is closed", () => {
  const s = replay(history(CREATED, scheduled("a")));
  assert.equal(queuedSteps(s).length, 1);
  s.phase = "closed";
  assert.deepEqual(queuedSteps(s), []);
});

Deno.test("replay() does not change the events it reads", () => {
  const h = history(CREATED, scheduled("a"), dispatched("a", "t1"), {
    type: "StepSucceeded",
    step: "a",
    attempt: 1,
    token: "t1",
    output: { deep: [1] },
  }, { type: "WorkflowCompleted", output: { a: { deep: [1] } } });
  const copy = structuredClone(h);
  replay(h);
  assert.deepEqual(h, copy);
});
