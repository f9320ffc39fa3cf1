/**
 * The expression sandbox: worker threads with a hard deadline. One call of a built-in that runs
 * long by itself (`$distinct` over 100,000 items is quadratic: minutes in one synchronous call)
 * never reaches JSONata's guards; the sandbox stops it at its deadline, answers EXPRESSION_LIMIT,
 * keeps this thread's event loop turning meanwhile, and serves the next evaluations on a fresh
 * worker.
 */
import assert from "node:assert/strict";
import {
  configureExpressions,
  DEFAULT_EXPRESSION_BUDGET,
  evaluate,
  ExpressionError,
  ExpressionLimitError,
  type Scope,
} from "../engine/expr.ts";
import { WorkerSandbox } from "./sandbox.ts";

const SCOPE: Scope = {
  input: { items: [1, 2, 3] },
  steps: { a: { total: 7.5 } },
  vars: {},
  execution: { id: "e", run_id: "r", root_id: "e", workflow: "W", version: "1.0.0" },
};

function sandbox(timeoutMs = 300): WorkerSandbox {
  return new WorkerSandbox({ budget: { ...DEFAULT_EXPRESSION_BUDGET, timeoutMs }, graceMs: 200 });
}

Deno.test("the sandbox answers what the thread would, errors included", async () => {
  const s = sandbox();
  try {
    assert.equal(await s.evaluate("$floor($steps.a.total)", SCOPE), 7);
    assert.deepEqual(await s.evaluate("$input.items.($ * 2)", SCOPE), [2, 4, 6]);
    assert.equal(await s.evaluate('$match("aaa!", /^(a+)+$/)', SCOPE), null);
    await assert.rejects(
      () => s.evaluate('$number("x") + 1', SCOPE),
      (e: unknown) => e instanceof ExpressionError && !(e instanceof ExpressionLimitError),
    );
    await assert.rejects(
      () => s.evaluate("($f := function($n){ $f($n + 1) }; $f(0))", SCOPE),
      ExpressionLimitError,
    );
    assert.equal(s.terminated, 0, "JSONata's own guard stopped the loop; no worker was killed");
  } finally {
    s.close();
  }
});

Deno.test("a built-in that runs long by itself is stopped at the deadline; the thread keeps turning", async () => {
  const s = sandbox(300);
  try {
    const ticks: number[] = [];
    const t0 = performance.now();
    const timer = setInterval(() => ticks.push(performance.now() - t0), 20);
    const slow = s.evaluate("$count($distinct([1..100000]))", SCOPE);
    // Evaluations queued behind it, and beside it on the second worker, still answer.
    const beside = s.evaluate("$sum($input.items)", SCOPE);
    await assert.rejects(() => slow, (e: unknown) => {
      assert.ok(e instanceof ExpressionLimitError, String(e));
      assert.match(e.message, /ran past its deadline of 300 ms/);
      return true;
    });
    const took = performance.now() - t0;
    clearInterval(timer);
    assert.equal(await beside, 6);
    assert.ok(took < 2_000, `stopped after ${took.toFixed(0)} ms`);
    assert.ok(ticks.length >= 10, `this thread's interval ran ${ticks.length} times`);
    assert.equal(s.terminated, 1);
    // A fresh worker serves the next one.
    assert.equal(await s.evaluate("$count($distinct([1,1,2]))", SCOPE), 2);
  } finally {
    s.close();
  }
});

Deno.test("evaluate() goes through the sandbox configured for it", async () => {
  const s = sandbox(300);
  configureExpressions({ sandbox: s });
  try {
    assert.equal(await evaluate("{% $floor($steps.a.total) %}", SCOPE), 7);
    // Plain paths never leave the thread.
    assert.equal(await evaluate("{% $steps.a.total %}", SCOPE), 7.5);
    await assert.rejects(
      () => evaluate("{% $count($distinct([1..100000])) %}", SCOPE),
      ExpressionLimitError,
    );
    assert.equal(s.terminated, 1);
  } finally {
    configureExpressions({ sandbox: null });
    s.close();
  }
});

Deno.test("a closed sandbox refuses evaluations and fails the waiting ones", async () => {
  const s = sandbox(300);
  const waiting = [1, 2, 3].map(() => s.evaluate("$count($distinct([1..100000]))", SCOPE));
  s.close();
  for (const w of waiting) await assert.rejects(() => w, /stopping/);
  await assert.rejects(() => s.evaluate("1", SCOPE), /stopping/);
});
