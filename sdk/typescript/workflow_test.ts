import assert from "node:assert/strict";
import { z } from "zod";
import { defineTask, expr, workflow } from "./mod.ts";

Deno.test("expr wraps a JSONata expression", () => {
  assert.equal(expr("$steps.validate.total"), "{% $steps.validate.total %}");
  assert.equal(expr("{% $input %}"), "{% $input %}");
  assert.equal(expr("  $input.total > 1000 "), "{% $input.total > 1000 %}");
});

Deno.test("builder: sequential task steps emit orbit-ir/1", () => {
  const doc = workflow("OrderProcessing", "1.0.0")
    .input({ type: "object", required: ["order_id"] })
    .task("validate", {
      task: "orders.validate",
      contract: "1",
      input: "{% $input %}",
      retry: {
        max_attempts: 5,
        initial_ms: 500,
        backoff: 2,
        max_ms: 30000,
        non_retryable: ["INVALID_ORDER"],
      },
      timeout_s: 30,
    })
    .task("charge", {
      task: "payments.charge",
      contract: "1",
      language: "python",
      input: { amount: expr("$steps.validate.total") },
      compensate: { task: "payments.refund", contract: "1", input: expr("$steps.charge") },
    })
    .returns("{% $steps %}", "done")
    .build();
  assert.deepEqual(doc, {
    ir: "orbit-ir/1",
    name: "OrderProcessing",
    version: "1.0.0",
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
          non_retryable: ["INVALID_ORDER"],
        },
        timeout_s: 30,
      },
      {
        id: "charge",
        task: "payments.charge",
        contract: "1",
        language: "python",
        input: { amount: "{% $steps.validate.total %}" },
        compensate: { task: "payments.refund", contract: "1", input: "{% $steps.charge %}" },
      },
      { id: "done", return: "{% $steps %}" },
    ],
  });
});

Deno.test("builder: any ir/2 feature switches to orbit-ir/2", () => {
  const base = () => workflow("W", "2.1.0").task("a", { task: "t", contract: "1" });
  assert.equal(base().build().ir, "orbit-ir/1");
  assert.equal(base().sleep("s", 60).build().ir, "orbit-ir/2");
  assert.equal(base().waitSignal("w", "go").build().ir, "orbit-ir/2");
  assert.equal(base().http("h", { url: "https://x" }).build().ir, "orbit-ir/2");
  assert.equal(base().child("c", { workflow: "X" }).build().ir, "orbit-ir/2");
  assert.equal(base().assign("v", { x: 1 }).build().ir, "orbit-ir/2");
  assert.equal(base().continueAsNew("n").build().ir, "orbit-ir/2");
  assert.equal(base().if("i", "$input.x", []).build().ir, "orbit-ir/2");
  assert.equal(base().parallel("p", [[], []]).build().ir, "orbit-ir/2");
  assert.equal(base().timeout(10).build().ir, "orbit-ir/2");
  assert.equal(base().signal("x").build().ir, "orbit-ir/2");
  assert.equal(base().query("q", 1).build().ir, "orbit-ir/2");
  assert.equal(base().handler("x", []).build().ir, "orbit-ir/2");
  assert.equal(base().step({ id: "raw", sleep_s: 1 }).build().ir, "orbit-ir/2");
  assert.equal(base().ir("orbit-ir/2").build().ir, "orbit-ir/2");
  assert.throws(() => base().sleep("s", 1).ir("orbit-ir/1").build(), /ir\/1 was forced/);
});

Deno.test("builder: the spec's orbit-ir/2 example", () => {
  const charge = defineTask({
    name: "payments.charge",
    contract: "1",
    language: "python",
    input: z.object({ amount: z.number() }),
    handler: () => ({}),
  });
  const doc = workflow("OrderProcessing", "1.0.0")
    .input(z.object({ order_id: z.string() }))
    .timeout(3600)
    .signal("address_changed", { schema: { type: "object" } })
    .query("status", expr("$vars.status"))
    .task("validate", { task: "orders.validate", contract: "1", input: expr("$input") })
    .task("charge", {
      task: charge,
      input: { amount: expr("$steps.validate.total") },
      compensate: { task: "payments.refund", contract: "1", input: expr("$steps.charge") },
    })
    .waitSignal("approval", "approved", { timeout_s: 86400 })
    .sleep("cool_off", 60)
    .http("notify", { method: "POST", url: "https://hooks.example/x", body: expr("$steps") })
    .child("ship", { workflow: "Shipping", version: "1.0.0", input: expr("$input") })
    .parallel("both", [
      (b) => b.task("left", { task: "a.left", contract: "1" }),
      [{ id: "right", task: "a.right", contract: "1" }],
    ])
    .if(
      "big",
      "$input.total > 1000",
      (b) => b.assign("mark", { big: true }),
      (b) => b.assign("unmark", { big: false }),
    )
    .continueAsNew("again", { input: expr("$input") })
    .handler("address_changed", (h) => h.assign("set", { address: expr("$signal") }))
    .returns(expr("$steps"), "done")
    .build();

  assert.deepEqual(doc, {
    ir: "orbit-ir/2",
    name: "OrderProcessing",
    version: "1.0.0",
    input_schema: {
      type: "object",
      properties: { order_id: { type: "string" } },
      required: ["order_id"],
    },
    timeout_s: 3600,
    signals: { address_changed: { schema: { type: "object" } } },
    queries: { status: "{% $vars.status %}" },
    steps: [
      { id: "validate", task: "orders.validate", contract: "1", input: "{% $input %}" },
      {
        id: "charge",
        task: "payments.charge",
        contract: "1",
        language: "python",
        input: { amount: "{% $steps.validate.total %}" },
        compensate: { task: "payments.refund", contract: "1", input: "{% $steps.charge %}" },
      },
      { id: "approval", wait_signal: "approved", timeout_s: 86400 },
      { id: "cool_off", sleep_s: 60 },
      {
        id: "notify",
        http: { method: "POST", url: "https://hooks.example/x", body: "{% $steps %}" },
      },
      { id: "ship", child: { workflow: "Shipping", version: "1.0.0", input: "{% $input %}" } },
      {
        id: "both",
        parallel: [
          [{ id: "left", task: "a.left", contract: "1" }],
          [{ id: "right", task: "a.right", contract: "1" }],
        ],
      },
      {
        id: "big",
        if: "{% $input.total > 1000 %}",
        then: [{ id: "mark", assign: { big: true } }],
        else: [{ id: "unmark", assign: { big: false } }],
      },
      { id: "again", continue_as_new: { input: "{% $input %}" } },
      { id: "done", return: "{% $steps %}" },
    ],
    handlers: { address_changed: [{ id: "set", assign: { address: "{% $signal %}" } }] },
  });
  // JSON.stringify of the builder is the document too
  const b = workflow("A", "1.0.0").returns(1);
  assert.deepEqual(JSON.parse(JSON.stringify(b)), b.build());
});

Deno.test("builder: problems are caught early", () => {
  assert.throws(() => workflow("A", "1.0"), /semver/);
  assert.throws(() => workflow("A", "1.0.0").task("x", { task: "t" }), /contract/);
  assert.throws(() => workflow("A", "1.0.0").task("", { task: "t", contract: "1" }), /step id/);
  assert.throws(
    () =>
      workflow("A", "1.0.0")
        .task("x", { task: "t", contract: "1" })
        .if("c", "true", (b) => b.task("x", { task: "t", contract: "1" }))
        .build(),
    /step id "x" is used twice \(\$\.steps\[0\] and \$\.steps\[1\]\.then\[0\]\)/,
  );
  // build() hands out copies
  const w = workflow("A", "1.0.0").task("x", { task: "t", contract: "1", input: { a: 1 } });
  const d1 = w.build();
  (d1.steps[0]!.input as { a: number }).a = 2;
  assert.deepEqual(w.build().steps[0]!.input, { a: 1 });
});
