import assert from "node:assert/strict";
import {
  backoffMs,
  canonicalJson,
  compensationId,
  DEFAULT_RETRY,
  IR2_KINDS,
  isTaskStep,
  type Problem,
  retryPolicy,
} from "./ir.ts";
import { validateWorkflow } from "./validate.ts";

const GOOD = {
  ir: "orbit-ir/1",
  name: "OrderProcessing",
  version: "1.2.3-beta.1+build.5",
  description: "takes an order",
  input_schema: { type: "object", required: ["order_id"] },
  steps: [
    {
      id: "validate",
      task: "orders.validate",
      contract: "1",
      input: "{% $input %}",
      retry: {
        max_attempts: 5,
        initial_ms: 500,
        backoff: 2,
        max_ms: 30000,
        non_retryable: ["INVALID"],
      },
      timeout_s: 30,
    },
    {
      id: "charge",
      task: "payments.charge",
      contract: "1",
      language: "python",
      input: { amount: "{% $steps.validate.total %}", items: ["{% $steps.validate.items %}", 1] },
      compensate: { task: "payments.refund", contract: "1", input: "{% $steps.charge %}" },
    },
    { id: "done", return: "{% $steps %}" },
  ],
};

function problems(doc: unknown): Problem[] {
  const r = validateWorkflow(doc);
  assert.equal(r.ok, false, "expected the document to be refused");
  return r.ok ? [] : r.problems;
}

function paths(doc: unknown): string[] {
  return problems(doc).map((p) => p.path);
}

/** GOOD with its steps replaced. */
function withSteps(...steps: unknown[]): Record<string, unknown> {
  return { ...GOOD, steps };
}

const t = (id: string, extra: Record<string, unknown> = {}) => ({
  id,
  task: "t.x",
  contract: "1",
  ...extra,
});

Deno.test("validateWorkflow() accepts a valid orbit-ir/1 document and returns it", () => {
  const r = validateWorkflow(GOOD);
  assert.deepEqual(r, { ok: true, doc: GOOD });
});

Deno.test("validateWorkflow() reports every problem with its JSON path in one pass", () => {
  const found = problems({
    ir: "orbit-ir/1",
    name: "9bad",
    version: "1.0",
    steps: [
      t("a", { input: "{% $steps.nope %}", retry: { max_attempts: 0 } }),
      t("a", { input: "{% ( %}" }),
      { id: "r", return: 1 },
      t("c", { timeout_s: -1 }),
    ],
  });
  assert.deepEqual(found.map((p) => p.path).sort(), [
    "$.name",
    "$.steps[0].input",
    "$.steps[0].retry.max_attempts",
    "$.steps[1].id",
    "$.steps[1].input",
    "$.steps[2]",
    "$.steps[3].timeout_s",
    "$.version",
  ]);
  for (const p of found) assert.ok(p.message.length > 0, p.path);
});

Deno.test("validateWorkflow() refuses a document that is not an object", () => {
  for (const raw of [null, undefined, 1, "x", [], [GOOD], true]) {
    assert.deepEqual(validateWorkflow(raw), {
      ok: false,
      problems: [{ path: "$", message: "a workflow must be a JSON object" }],
    });
  }
});

Deno.test("validateWorkflow() names both places of a duplicate step id", () => {
  const [p] = problems(withSteps(t("a"), t("b"), t("a")));
  assert.deepEqual(p, {
    path: "$.steps[2].id",
    message: 'duplicate step id "a" (also $.steps[0])',
  });
});

Deno.test("validateWorkflow() reports a $steps reference to an unknown step", () => {
  const [p, ...rest] = problems(
    withSteps(t("a"), t("b", { input: { x: ["{% $steps.ghost.id %}"] } })),
  );
  assert.deepEqual(rest, []);
  assert.deepEqual(p, {
    path: "$.steps[1].input.x[0]",
    message: 'unknown step "ghost" in $steps.ghost',
  });
});

Deno.test("validateWorkflow() reports a forward reference to a later step", () => {
  const [p] = problems(withSteps(t("a", { input: "{% $steps.b %}" }), t("b")));
  assert.equal(p!.path, "$.steps[0].input");
  assert.match(p!.message, /step "b" runs later/);
});

Deno.test("validateWorkflow() refuses a step input that reads its own output", () => {
  const [p] = problems(withSteps(t("a", { input: "{% $steps.a %}" })));
  assert.equal(p!.path, "$.steps[0].input");
  assert.match(p!.message, /cannot read its own output/);
});

Deno.test("validateWorkflow() lets a compensation read its own step but not later ones", () => {
  assert.equal(
    validateWorkflow(
      withSteps(t("a", { compensate: { task: "u", contract: "1", input: "{% $steps.a %}" } })),
    ).ok,
    true,
  );
  const [p] = problems(
    withSteps(
      t("a", { compensate: { task: "u", contract: "1", input: "{% $steps.b %}" } }),
      t("b"),
    ),
  );
  assert.equal(p!.path, "$.steps[0].compensate.input");
  assert.match(p!.message, /runs later/);
});

Deno.test("validateWorkflow() checks references in a return step", () => {
  assert.deepEqual(paths(withSteps(t("a"), { id: "r", return: { x: "{% $steps.zz %}" } })), [
    "$.steps[1].return.x",
  ]);
});

Deno.test("validateWorkflow() reports an invalid JSONata expression with its path", () => {
  const [p] = problems(withSteps(t("a", { input: { deep: [1, "{% $input.( %}"] } })));
  assert.equal(p!.path, "$.steps[0].input.deep[1]");
  assert.match(p!.message, /^invalid expression: /);
});

Deno.test("validateWorkflow() refuses a version that is not semver", () => {
  for (const version of ["1", "1.0", "01.0.0", "1.0.0.0", "v1.0.0", "", "1.0.0-"]) {
    assert.deepEqual(paths({ ...GOOD, version }), ["$.version"], version);
  }
  for (const version of ["0.0.0", "10.20.30", "1.0.0-rc.1", "1.0.0+sha.5"]) {
    assert.equal(validateWorkflow({ ...GOOD, version }).ok, true, version);
  }
});

Deno.test("validateWorkflow() refuses a missing or empty step list", () => {
  const { steps: _, ...noSteps } = GOOD;
  assert.deepEqual(paths(noSteps), ["$.steps"]);
  assert.deepEqual(problems({ ...GOOD, steps: [] }), [{
    path: "$.steps",
    message: "a workflow needs at least one step",
  }]);
  assert.deepEqual(paths({ ...GOOD, steps: {} }), ["$.steps"]);
});

Deno.test("validateWorkflow() reports missing top-level fields", () => {
  assert.deepEqual(paths({ steps: GOOD.steps }).sort(), ["$.ir", "$.name", "$.version"]);
});

Deno.test("validateWorkflow() reports each unknown key at its own path", () => {
  const found = problems({
    ...GOOD,
    owner: "x",
    steps: [
      t("a", {
        colour: "red",
        retry: { tries: 3 },
        compensate: { task: "u", contract: "1", when: 1 },
      }),
    ],
  });
  assert.deepEqual(found.map((p) => p.path).sort(), [
    "$.owner",
    "$.steps[0].colour",
    "$.steps[0].compensate.when",
    "$.steps[0].retry.tries",
  ]);
  assert.ok(found.every((p) => /^unknown key "/.test(p.message)));
});

Deno.test("validateWorkflow() refuses orbit-ir/2 step kinds in an orbit-ir/1 document", () => {
  const found = problems(withSteps(
    { id: "w", wait_signal: "approved" },
    { id: "s", sleep_s: 60 },
    { id: "h", http: { method: "POST", url: "https://x" } },
    { id: "c", child: { workflow: "W" } },
    { id: "p", parallel: [] },
    { id: "i", if: "{% true %}", then: [] },
    { id: "v", assign: { x: 1 } },
    { id: "n", continue_as_new: {} },
  ));
  assert.deepEqual(found.map((p) => p.path), IR2_KINDS.map((k, i) => `$.steps[${i}].${k}`));
  for (const [i, k] of IR2_KINDS.entries()) {
    assert.equal(found[i]!.message, `\`${k}\` steps need orbit-ir/2`);
  }
});

Deno.test("validateWorkflow() refuses an unsupported ir version and accepts orbit-ir/2", () => {
  assert.equal(validateWorkflow({ ...GOOD, ir: "orbit-ir/2" }).ok, true, "ir/2 is a superset");
  assert.deepEqual(problems({ ...GOOD, ir: "orbit-ir/9" }), [
    { path: "$.ir", message: 'unknown IR version "orbit-ir/9"; supported: orbit-ir/1, orbit-ir/2' },
  ]);
});

Deno.test("validateWorkflow() requires a return step to be the last step", () => {
  assert.deepEqual(problems(withSteps({ id: "r", return: 1 }, t("a"))), [
    { path: "$.steps[0]", message: "a return step must be the last step" },
  ]);
});

Deno.test("validateWorkflow() refuses an invalid input_schema", () => {
  const [p] = problems({ ...GOOD, input_schema: { type: "no-such-type" } });
  assert.equal(p!.path, "$.input_schema");
  assert.match(p!.message, /^invalid JSON Schema: /);
  assert.deepEqual(paths({ ...GOOD, input_schema: "object" }), ["$.input_schema"]);
});

Deno.test("validateWorkflow() refuses steps that are not objects or have no single kind", () => {
  const found = problems(
    withSteps(1, null, [], { id: "x" }, { id: "y", task: "t", contract: "1", return: 1 }),
  );
  assert.deepEqual(found.map((p) => p.path), [
    "$.steps[0]",
    "$.steps[1]",
    "$.steps[2]",
    "$.steps[3]",
    "$.steps[4]",
  ]);
  assert.equal(found[3]!.message, "a step needs one of: task, return");
  assert.equal(found[4]!.message, "a step has exactly one kind, found task and return");
});

Deno.test("validateWorkflow() checks step fields: ids, task names, contract, language, retry, timeout", () => {
  const found = problems(withSteps(
    { id: "1bad", task: "t", contract: "1" },
    { id: "b", task: "has space", contract: "" },
    t("c", { language: "Python" }),
    t("d", { retry: { backoff: 0.5, initial_ms: 1.5, non_retryable: [""] } }),
    t("e", { timeout_s: 0 }),
    t("f", { compensate: { task: "u" } }),
  ));
  assert.deepEqual(found.map((p) => p.path).sort(), [
    "$.steps[0].id",
    "$.steps[1].contract",
    "$.steps[1].task",
    "$.steps[2].language",
    "$.steps[3].retry.backoff",
    "$.steps[3].retry.initial_ms",
    "$.steps[3].retry.non_retryable[0]",
    "$.steps[4].timeout_s",
    "$.steps[5].compensate.contract",
  ]);
});

Deno.test("retryPolicy() fills what a step leaves out from DEFAULT_RETRY", () => {
  assert.deepEqual(retryPolicy({ task: "t", contract: "1" }), DEFAULT_RETRY);
  assert.deepEqual(retryPolicy({ task: "t", contract: "1", retry: { max_attempts: 7 } }), {
    ...DEFAULT_RETRY,
    max_attempts: 7,
  });
});

Deno.test("backoffMs() grows by the backoff factor and stops at max_ms", () => {
  const p = { ...DEFAULT_RETRY, initial_ms: 100, backoff: 2.5, max_ms: 1000 };
  assert.deepEqual([1, 2, 3, 4, 5].map((n) => backoffMs(p, n)), [100, 250, 625, 1000, 1000]);
  assert.equal(backoffMs({ ...p, initial_ms: 0 }, 3), 0);
});

Deno.test("isTaskStep(), compensationId() and canonicalJson() behave as documented", () => {
  assert.equal(isTaskStep({ id: "a", task: "t", contract: "1" }), true);
  assert.equal(isTaskStep({ id: "r", return: 1 }), false);
  assert.equal(compensationId("charge"), "charge.compensate");
  assert.equal(
    canonicalJson({ b: [2, { d: 1, c: null }], a: "x" }),
    '{"a":"x","b":[2,{"c":null,"d":1}]}',
  );
  assert.equal(canonicalJson({ y: 1, x: 2 }), canonicalJson({ x: 2, y: 1 }));
});

Deno.test("validateWorkflow() refuses more than 10,000 steps, counting branches, handlers and compensations", () => {
  const assign = (i: number) => ({ id: `s${i}`, assign: { n: i } });
  const doc = (steps: unknown[], extra: Record<string, unknown> = {}) => ({
    ir: "orbit-ir/2",
    name: "Many",
    version: "1.0.0",
    steps,
    ...extra,
  });
  const ok = validateWorkflow(doc(Array.from({ length: 10_000 }, (_, i) => assign(i))));
  assert.equal(ok.ok, true);
  const nested = doc([
    { id: "b", if: true, then: Array.from({ length: 9_000 }, (_, i) => assign(i)) },
    {
      id: "p",
      parallel: [[{
        id: "t",
        task: "x",
        contract: "1",
        compensate: { task: "y", contract: "1" },
      }]],
    },
  ], { handlers: { go: Array.from({ length: 997 }, (_, i) => assign(10_000 + i)) } });
  // 1 + 9,000 + 1 + 2 + 997 = 10,001
  const r = validateWorkflow(nested);
  assert.equal(r.ok, false);
  assert.deepEqual(r.ok ? [] : r.problems, [{
    path: "$.steps",
    message: "a workflow may hold at most 10000 steps (branches, handlers and compensations " +
      "included); this one has 10001",
  }]);
});
