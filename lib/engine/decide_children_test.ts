/**
 * The server's limits on child workflows in the pure core: depth (recorded in WorkflowCreated)
 * and open children per run. A child step past a limit fails with CHILD_LIMIT in history, so
 * replay and later decisions never look at the limits again.
 */
import assert from "node:assert/strict";
import { continuation } from "./decide.ts";
import { replay } from "./state.ts";
import { Driver, workflow2 } from "./testing.ts";

const SELF = workflow2([
  { id: "kid", child: { workflow: "Test2", input: "{% $input %}" } },
  { id: "done", return: "{% $steps.kid %}" },
]);

Deno.test("decide() a child start records its depth, and a continued run keeps it", async () => {
  const d = new Driver(SELF, { executionId: "root.kid.kid" });
  await d.start(1, { parent_id: "root.kid", root_id: "root", depth: 2 });
  assert.equal(d.history[0]!.type === "WorkflowCreated" && d.history[0]!.depth, 2);
  assert.equal(d.s.depth, 2);
  assert.equal(replay(d.history).depth, 2);
  const root = new Driver(SELF);
  await root.start(1);
  assert.equal("depth" in root.history[0]!, false, "a root execution's history has no depth");
  assert.equal(root.s.depth, 0);

  const c = new Driver(
    workflow2([{ id: "again", continue_as_new: {} }]),
    { executionId: "root.kid" },
  );
  await c.start(null, { parent_id: "root", root_id: "root", depth: 1 });
  assert.equal(continuation(c.s)?.depth, 1);
});

Deno.test("decide() a child step past --max-child-depth fails with CHILD_LIMIT, and replay keeps it", async () => {
  const d = new Driver(SELF, { executionId: "r.kid.kid" });
  d.limits = { max_depth: 2, max_children: null };
  const r = await d.start(1, { parent_id: "r.kid", root_id: "r", depth: 2 });
  assert.deepEqual(r.events.map((e) => e.type), [
    "WorkflowCreated",
    "StepStarted",
    "StepFailed",
    "WorkflowFailed",
  ]);
  const failed = d.of("StepFailed")[0]!;
  assert.equal(failed.error.code, "CHILD_LIMIT");
  assert.equal(failed.error.retryable, false);
  assert.deepEqual(failed.error.details, { limit: "max_child_depth", max: 2, depth: 3 });
  assert.match(
    failed.error.message,
    /depth 3, beyond the server's limit of 2 \(--max-child-depth\)/,
  );
  assert.equal(d.step("kid").child, undefined, "no child to start");
  assert.equal(d.s.status, "failed");
  assert.equal(d.s.error?.code, "CHILD_LIMIT");
  // Replay reads the decision, whatever the limit is now.
  assert.deepEqual(replay(d.history), d.s);

  // One level up the same definition starts its child.
  const up = new Driver(SELF, { executionId: "r.kid" });
  up.limits = { max_depth: 2, max_children: null };
  await up.start(1, { parent_id: "r", root_id: "r", depth: 1 });
  assert.equal(up.step("kid").child?.execution_id, "r.kid.kid");
  assert.equal(up.s.status, "running");
});

Deno.test("decide() a child step past --max-children-per-execution fails with CHILD_LIMIT and cancels the others", async () => {
  const leaf = { workflow: "Leaf" };
  const def = workflow2([{
    id: "all",
    parallel: [
      [{ id: "a", child: leaf }],
      [{ id: "b", child: leaf }],
      [{ id: "c", child: leaf }],
    ],
  }]);
  const d = new Driver(def);
  d.limits = { max_depth: null, max_children: 2 };
  await d.start();
  const failed = d.of("StepFailed")[0]!;
  assert.equal(failed.step, "c");
  assert.equal(failed.error.code, "CHILD_LIMIT");
  assert.deepEqual(failed.error.details, { limit: "max_children_per_execution", max: 2, open: 2 });
  assert.deepEqual(d.of("StepCancelled").map((e) => e.step).sort(), ["a", "all", "b"]);
  assert.equal(d.s.status, "failed");
  assert.deepEqual(replay(d.history), d.s);

  // A child that ended frees its place: one after the other, any number runs.
  const seq = new Driver(workflow2([
    { id: "a", child: leaf },
    { id: "b", child: leaf },
    { id: "c", child: leaf },
  ]));
  seq.limits = { max_depth: null, max_children: 1 };
  await seq.start();
  for (const id of ["a", "b", "c"]) await seq.childResult(id, "completed", { output: id });
  assert.equal(seq.s.status, "completed");
});

Deno.test("decide() a child start the shell refused with CHILD_LIMIT keeps that code", async () => {
  const d = new Driver(SELF);
  await d.start(1);
  await d.send({
    type: "child_result",
    step: "kid",
    execution_id: "exec-1.kid",
    status: "failed",
    error: { code: "CHILD_LIMIT", message: "the tree runs 10000 executions" },
  });
  assert.equal(d.of("StepFailed")[0]!.error.code, "CHILD_LIMIT");
  assert.equal(d.of("StepFailed")[0]!.error.message, "the tree runs 10000 executions");
  assert.equal(d.s.error?.code, "CHILD_LIMIT");

  // A child that ran and failed with that code (its own child was refused) is CHILD_FAILED.
  const up = new Driver(SELF);
  await up.start(1);
  await up.send({
    type: "child_result",
    step: "kid",
    execution_id: "exec-1.kid",
    run_id: "run-of-kid",
    status: "failed",
    error: { code: "CHILD_LIMIT", message: "depth 33" },
  });
  const failed = up.of("StepFailed")[0]!;
  assert.equal(failed.error.code, "CHILD_FAILED");
  assert.deepEqual(failed.error.details, {
    child: "exec-1.kid",
    status: "failed",
    error: { code: "CHILD_LIMIT", message: "depth 33" },
  });
});
