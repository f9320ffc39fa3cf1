import assert from "node:assert/strict";
import { liveTokens, queuedSteps, replay } from "./state.ts";
import { Driver, err, T0, task, workflow } from "./testing.ts";

const DEF = workflow([task("a", { timeout_s: 60 }), task("b")]);

async function uncertainA(d: Driver): Promise<string> {
  await d.start();
  const first = await d.dispatch("a", "sess-old");
  d.now = T0 + 1000;
  const r = await d.send({ type: "uncertain", token: first, reason: "worker stopped responding" });
  assert.equal(r.accepted, true);
  return first;
}

Deno.test("decide() StepAttemptUncertain puts the step back to scheduled for redelivery", async () => {
  const d = new Driver(DEF);
  const first = await uncertainA(d);
  assert.deepEqual(d.last(), {
    type: "StepAttemptUncertain",
    seq: 4,
    time_ms: T0 + 1000,
    step: "a",
    attempt: 1,
    token: first,
    reason: "worker stopped responding",
  });
  const st = d.step("a");
  assert.equal(st.status, "scheduled");
  assert.equal(st.redelivery, true);
  assert.equal(st.attempt, 1, "a redelivery is the same attempt");
  assert.equal(st.deadline_ms, null);
  assert.ok(first in st.tokens, "the uncertain token stays live");
  assert.deepEqual(queuedSteps(d.s).map((s) => s.id), ["a"]);
  d.now += 1e6;
  assert.equal((await d.send({ type: "deadline", step: "a", attempt: 1 })).accepted, false);
});

Deno.test("decide() redelivers with redelivery:true and the same idempotency key", async () => {
  const d = new Driver(DEF);
  const first = await uncertainA(d);
  const key = d.step("a").idempotency_key;
  d.now = T0 + 2000;
  const second = await d.dispatch("a", "sess-new");
  const [orig, redelivered] = d.of("StepDispatched");
  assert.equal("redelivery" in orig!, false);
  assert.equal(redelivered!.redelivery, true);
  assert.equal(redelivered!.attempt, 1);
  assert.equal(redelivered!.deadline_ms, T0 + 2000 + 60_000);
  assert.equal(d.step("a").idempotency_key, key);
  assert.equal(d.step("a").redelivery, true);
  assert.equal(d.of("StepScheduled").length, 1, "no new StepScheduled for a redelivery");
  assert.deepEqual(liveTokens(d.s).map((t) => [t.token, t.info.worker_session]), [
    [first, "sess-old"],
    [second, "sess-new"],
  ]);
});

Deno.test("decide() accepts a late result of the uncertain token once and refuses the redelivery's", async () => {
  const d = new Driver(DEF);
  const first = await uncertainA(d);
  const second = await d.dispatch("a", "sess-new");
  const late = await d.complete(first, "from the first worker");
  assert.equal(late.accepted, true);
  assert.deepEqual(d.s.outputs, { a: "from the first worker" });
  assert.equal((await d.complete(second, "from the second worker")).accepted, false);
  assert.equal((await d.fail(second, err("X"))).accepted, false);
  assert.equal((await d.complete(first, "again")).accepted, false);
  assert.equal(d.of("StepSucceeded").filter((e) => e.step === "a").length, 1);
  assert.deepEqual(d.step("a").tokens, {});
  assert.equal(d.step("b").status, "scheduled");
});

Deno.test("decide() accepts the redelivered result first and then refuses the uncertain token's", async () => {
  const d = new Driver(DEF);
  const first = await uncertainA(d);
  const second = await d.dispatch("a", "sess-new");
  assert.equal((await d.complete(second, "second")).accepted, true);
  assert.equal((await d.complete(first, "first")).accepted, false);
  assert.deepEqual(d.s.outputs, { a: "second" });
  assert.equal(d.of("StepSucceeded").length, 1);
});

Deno.test("decide() accepts a late result while the redelivery still waits for a worker", async () => {
  const d = new Driver(DEF);
  const first = await uncertainA(d);
  assert.equal((await d.complete(first, "late")).accepted, true);
  assert.equal(d.step("a").status, "succeeded");
  const refused = await d.send({
    type: "dispatch",
    step: "a",
    token: d.token(),
    worker_id: "w",
    worker_session: "s",
  });
  assert.equal(refused.accepted, false, "nothing is left to redeliver");
});

Deno.test("decide() a late failure of the uncertain token fails the attempt and kills the redelivery", async () => {
  const d = new Driver(workflow([task("a", { retry: { initial_ms: 10 } })]));
  const first = await uncertainA(d);
  const second = await d.dispatch("a");
  assert.equal((await d.fail(first, err("X"))).accepted, true);
  assert.equal(d.step("a").status, "backoff");
  assert.equal((await d.complete(second, 1)).accepted, false);
  await d.fireNextTimer();
  assert.equal(d.step("a").attempt, 2);
  assert.equal(d.step("a").redelivery, false, "a retry is a new attempt, not a redelivery");
  await d.dispatch("a");
  assert.equal("redelivery" in d.of("StepDispatched").at(-1)!, false);
});

Deno.test("decide() refuses uncertain for a step that is not dispatched", async () => {
  const d = new Driver(DEF);
  const first = await uncertainA(d);
  const again = await d.send({ type: "uncertain", token: first, reason: "again" });
  assert.equal(again.accepted, false, "already back in the queue");
  const tok = await d.dispatch("a");
  await d.complete(tok, 1);
  assert.equal((await d.send({ type: "uncertain", token: tok, reason: "late" })).accepted, false);
});

Deno.test("decide() ignores a repeated uncertain for a token whose attempt was redelivered", async () => {
  const d = new Driver(DEF);
  const first = await uncertainA(d);
  const second = await d.dispatch("a", "sess-new");
  const deadline = d.step("a").deadline_ms;
  const stale = await d.send({
    type: "uncertain",
    token: first,
    reason: "reported again after a restart",
  });
  assert.equal(stale.accepted, false);
  assert.equal(d.step("a").status, "dispatched");
  assert.equal(d.step("a").deadline_ms, deadline);
  assert.equal(d.of("StepAttemptUncertain").length, 1);
  // The redelivery's own loss is still recorded.
  assert.equal(
    (await d.send({ type: "uncertain", token: second, reason: "lost too" })).accepted,
    true,
  );
  assert.equal(d.step("a").status, "scheduled");
  const third = await d.dispatch("a");
  assert.equal(Object.keys(d.step("a").tokens).length, 3);
  assert.equal(
    (await d.complete(first, "first")).accepted,
    true,
    "any live token's result wins once",
  );
  assert.equal((await d.complete(third, "third")).accepted, false);
  assert.deepEqual(replay(d.history), d.s);
});

Deno.test("decide() cancel closes every live token of an uncertain step", async () => {
  const d = new Driver(DEF);
  const first = await uncertainA(d);
  const second = await d.dispatch("a");
  await d.send({ type: "cancel", reason: "stop" });
  assert.equal(d.s.status, "cancelled");
  assert.deepEqual(liveTokens(d.s), []);
  assert.equal((await d.complete(first, 1)).accepted, false);
  assert.equal((await d.complete(second, 1)).accepted, false);
});

Deno.test("decide() a timeout of the redelivery kills the uncertain token too", async () => {
  const d = new Driver(DEF);
  const first = await uncertainA(d);
  await d.dispatch("a");
  d.now += 60_000;
  assert.equal((await d.send({ type: "deadline", step: "a", attempt: 1 })).accepted, true);
  assert.equal(d.step("a").status, "backoff");
  assert.equal((await d.complete(first, "late")).accepted, false);
});
