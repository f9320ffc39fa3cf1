import assert from "node:assert/strict";
import { Driver, task, workflow } from "../engine/testing.ts";
import type { ExecutionState } from "../engine/state.ts";
import { OWN_TASK_HEAD_START_MS, sharedChanges } from "./shared_changes.ts";

/** Sends a command through the driver and returns the queue changes of its append. */
async function step(d: Driver, send: () => Promise<unknown>, claimedPayload = true) {
  const prev: ExecutionState | null = d.state ? structuredClone(d.state) : null;
  const before = d.history.length;
  await send();
  return sharedChanges(prev, d.s, d.history.slice(before), d.now, claimedPayload);
}

Deno.test("sharedChanges: a scheduled task is enqueued once, its dispatch takes the queued row", async () => {
  const d = new Driver(workflow([task("a", { input: "{% $input %}" }), task("b")]));
  const start = await step(d, () => d.start({ x: 1 }));
  assert.equal(start.enqueue.length, 1);
  assert.equal(start.enqueue[0]!.step, "a");
  assert.equal(start.enqueue[0]!.unit, "run-1/a/1/0");
  assert.deepEqual(start.enqueue[0]!.payload?.input, { x: 1 });
  let token = "";
  const dispatch = await step(d, async () => token = await d.dispatch("a"));
  // The queued row is taken in the dispatch's commit (or carries the token of its claim).
  assert.deepEqual(dispatch, {
    enqueue: [],
    gone: [],
    cancel: [],
    done: [],
    take: [{
      unit: "run-1/a/1/0",
      token,
      session_id: "sess-1",
      claimed_by: "",
      claimed_ms: d.now,
      head_ms: OWN_TASK_HEAD_START_MS,
    }],
  });
  const done = await step(d, () => d.complete(token, 2));
  assert.deepEqual(done.done, [token]);
  assert.deepEqual(done.cancel, []);
  assert.deepEqual(done.enqueue.map((t) => t.step), ["b"]);
});

Deno.test("sharedChanges: an uncertain attempt is a new unit; its dead token is cancelled when the redelivery succeeds", async () => {
  const d = new Driver(workflow([task("a")]));
  await d.start();
  const first = await d.dispatch("a");
  const unc = await step(d, () => d.send({ type: "uncertain", token: first, reason: "lost" }));
  assert.deepEqual(unc.enqueue.map((t) => t.unit), ["run-1/a/1/1"]);
  assert.equal(unc.enqueue[0]!.payload?.redelivery, true);
  const second = await d.dispatch("a");
  const ok = await step(d, () => d.complete(second, 1));
  assert.deepEqual(ok.done, [second]);
  assert.deepEqual(ok.cancel, [first]);
});

Deno.test("sharedChanges: a cancel removes queued units and cancels claimed attempts", async () => {
  const d = new Driver(workflow([task("a")]));
  await d.start();
  const queued = await step(d, () => d.send({ type: "cancel", reason: "stop" }));
  assert.deepEqual(queued.gone, ["run-1/a/1/0"]);

  const e = new Driver(workflow([task("a")]));
  await e.start();
  const token = await e.dispatch("a");
  const claimed = await step(e, () => e.send({ type: "cancel", reason: "stop" }));
  assert.deepEqual(claimed.cancel, [token]);
  assert.deepEqual(claimed.gone, []);
});

Deno.test("sharedChanges: a step dispatched in the append that scheduled it is written claimed, without its payload unless asked", async () => {
  const d = new Driver(workflow([task("a"), task("b", { input: "{% $steps.a %}" })]));
  await d.start();
  const first = await d.dispatch("a");
  // One append: the result, and the step it makes ready dispatched to the same session.
  const prev = structuredClone(d.s);
  const before = d.history.length;
  await d.complete(first, { n: 1 });
  const second = await d.dispatch("b");
  const events = d.history.slice(before);
  const kept = sharedChanges(prev, d.s, events, d.now);
  const left = sharedChanges(prev, d.s, events, d.now, false);
  for (const c of [kept, left]) {
    assert.deepEqual(c.enqueue.map((t) => [t.step, t.unit, t.claimed]), [
      ["b", "run-1/b/1/0", { token: second, session_id: "sess-1", node_id: "" }],
    ]);
    assert.deepEqual(c.done, [first]);
  }
  assert.deepEqual(kept.enqueue[0]!.payload?.input, { n: 1 });
  assert.equal(left.enqueue[0]!.payload, null);
  // A queued row keeps its payload either way: a claim hands it out from the row.
  const d2 = new Driver(workflow([task("a", { input: "{% $input %}" })]));
  const queued = await step(d2, () => d2.start({ x: 1 }), false);
  assert.deepEqual(queued.enqueue[0]!.payload?.input, { x: 1 });
});
