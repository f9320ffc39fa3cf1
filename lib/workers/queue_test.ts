/**
 * The in-memory task queue on its own: states built by hand (only the fields the queue reads),
 * looked up through a map that stands for the executions held in memory.
 */
import assert from "node:assert/strict";
import type { ExecutionState } from "../engine/state.ts";
import { MemoryTaskQueue } from "./queue.ts";

function state(
  id: string,
  steps: Array<{ id: string; task: string; status?: string; attempt?: number; language?: string }>,
): ExecutionState {
  return {
    execution_id: id,
    phase: "running",
    steps: Object.fromEntries(steps.map((s) => [s.id, {
      id: s.id,
      kind: "task",
      task: s.task,
      contract: "1",
      status: s.status ?? "scheduled",
      attempt: s.attempt ?? 1,
      language: s.language ?? null,
      tokens: {},
    }])),
  } as unknown as ExecutionState;
}

function setup() {
  const held = new Map<string, ExecutionState>();
  const queue = new MemoryTaskQueue({ stateOf: (id) => held.get(id) });
  const install = (s: ExecutionState) => {
    held.set(s.execution_id, s);
    return queue.enqueue(s);
  };
  return { held, queue, install };
}

const ts = (...names: string[]) => ({
  runtime: "typescript",
  tasks: names.map((name) => ({ name, contract: "1" })),
});

Deno.test("a queued step is queued once and taken once, up to max, for the tasks served", () => {
  const { queue, install } = setup();
  assert.equal(install(state("e1", [{ id: "a", task: "t" }, { id: "b", task: "u" }])), true);
  assert.equal(install(state("e1", [{ id: "a", task: "t" }, { id: "b", task: "u" }])), false);
  assert.equal(install(state("e2", [{ id: "a", task: "t" }])), true);
  assert.equal(queue.depth("t", "1"), 2);
  assert.deepEqual(queue.take(ts("x"), 5), []);
  assert.deepEqual(queue.take(ts("t"), 1).map((q) => q.execution_id), ["e1"]);
  assert.deepEqual(queue.take(ts("t", "u"), 5).map((q) => `${q.execution_id}/${q.step}`), [
    "e2/a",
    "e1/b",
  ]);
  assert.deepEqual(queue.take(ts("t", "u"), 5), []);
  assert.equal(queue.depth("t", "1"), 0);
});

Deno.test("a step no longer scheduled at that attempt is dropped; a new attempt is queued again", () => {
  const { queue, install } = setup();
  install(state("e1", [{ id: "a", task: "t" }]));
  install(state("e1", [{ id: "a", task: "t", status: "dispatched" }]));
  assert.equal(queue.depth("t", "1"), 0);
  assert.deepEqual(queue.take(ts("t"), 5), []);
  install(state("e1", [{ id: "a", task: "t", attempt: 2 }]));
  assert.deepEqual(queue.take(ts("t"), 5).map((q) => q.attempt), [2]);
});

Deno.test("a task pinned to a language waits for a session that serves it in that language", () => {
  const { queue, install } = setup();
  install(state("e1", [{ id: "a", task: "t", language: "python" }]));
  assert.deepEqual(queue.take(ts("t"), 5), []);
  assert.equal(queue.depth("t", "1"), 1);
  assert.deepEqual(queue.take({ ...ts("t"), runtime: "python" }, 5).map((q) => q.step), ["a"]);
});

Deno.test("requeued tasks go back in front, once, while still scheduled", () => {
  const { held, queue, install } = setup();
  install(state("e1", [{ id: "a", task: "t" }]));
  install(state("e2", [{ id: "a", task: "t" }]));
  const taken = queue.take(ts("t"), 1);
  queue.requeue(taken);
  queue.requeue(taken);
  assert.equal(queue.depth("t", "1"), 2);
  assert.deepEqual(queue.take(ts("t"), 5).map((q) => q.execution_id), ["e1", "e2"]);
  held.set("e1", state("e1", [{ id: "a", task: "t", status: "succeeded" }]));
  queue.requeue(taken);
  assert.equal(queue.depth("t", "1"), 0);
});

Deno.test("a task put back with a hold keeps its place and is not taken before the hold ends", () => {
  const held = new Map<string, ExecutionState>();
  let now = 1_000;
  const queue = new MemoryTaskQueue({ stateOf: (id) => held.get(id) }, () => now);
  for (const id of ["e1", "e2"]) {
    const s = state(id, [{ id: "a", task: "t" }]);
    held.set(id, s);
    queue.enqueue(s);
  }
  const taken = queue.take(ts("t"), 1);
  queue.requeue(taken, now + 100);
  assert.equal(queue.depth("t", "1"), 2, "still queued");
  assert.deepEqual(queue.take(ts("t"), 5).map((q) => q.execution_id), ["e2"], "held: skipped");
  assert.deepEqual(queue.take(ts("t"), 5), []);
  now += 100;
  assert.deepEqual(queue.take(ts("t"), 5).map((q) => q.execution_id), ["e1"]);
  queue.requeue(taken);
  assert.deepEqual(queue.take(ts("t"), 5).map((q) => q.execution_id), ["e1"], "no hold: at once");
});
