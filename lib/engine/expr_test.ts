import assert from "node:assert/strict";
import {
  compile,
  evaluate,
  ExpressionError,
  expressionsIn,
  expressionText,
  type Scope,
} from "./expr.ts";

const SCOPE: Scope = {
  input: { order_id: "o-1", items: [{ sku: "a", qty: 2 }, { sku: "b", qty: 3 }], total: 12.5 },
  steps: { validate: { ok: true, total: 40 }, charge: "ch_1" },
  vars: { status: "waiting" },
  execution: {
    id: "exec-9",
    run_id: "run-3",
    root_id: "root-1",
    workflow: "Orders",
    version: "2.0.0",
  },
};

Deno.test("expressionText() finds the JSONata text of {% %} strings only", () => {
  assert.equal(expressionText("{% $input %}"), "$input");
  assert.equal(expressionText("  {%$input.a%}  "), "$input.a");
  assert.equal(expressionText("{% %}"), "");
  for (
    const v of ["plain", "{% no end", "no start %}", "x {% 1 %}", "{%}", 1, null, undefined, {}, []]
  ) {
    assert.equal(expressionText(v), null, JSON.stringify(v));
  }
});

Deno.test("evaluate() leaves literals untouched", async () => {
  for (const v of ["plain", "", "{% no end", "50%", 0, 12.5, true, false, null]) {
    assert.deepEqual(await evaluate(v, SCOPE), v);
  }
  const nested = { a: [1, "x", { b: null }], c: { d: "e" } };
  assert.deepEqual(await evaluate(nested, SCOPE), nested);
});

Deno.test("evaluate() evaluates objects and arrays member by member", async () => {
  const out = await evaluate({
    id: "{% $input.order_id %}",
    lit: "as is",
    list: ["{% $steps.validate.total %}", 2, { deep: "{% $steps.charge %}" }],
    nested: { n: { m: "{% $count($input.items) %}" } },
  }, SCOPE);
  assert.deepEqual(out, {
    id: "o-1",
    lit: "as is",
    list: [40, 2, { deep: "ch_1" }],
    nested: { n: { m: 2 } },
  });
});

Deno.test("evaluate() sees $input, $steps, $vars and $execution", async () => {
  assert.deepEqual(await evaluate("{% $input %}", SCOPE), SCOPE.input);
  assert.deepEqual(await evaluate("{% $steps %}", SCOPE), SCOPE.steps);
  assert.equal(await evaluate("{% $vars.status %}", SCOPE), "waiting");
  assert.equal(await evaluate("{% $execution.id %}", SCOPE), "exec-9");
  assert.equal(
    await evaluate("{% $execution.run_id & '/' & $execution.root_id %}", SCOPE),
    "run-3/root-1",
  );
  assert.equal(
    await evaluate("{% $execution.workflow & '@' & $execution.version %}", SCOPE),
    "Orders@2.0.0",
  );
  assert.equal(
    await evaluate("{% $signal %}", { ...SCOPE, signal: { a: 1 } }).then((v) => JSON.stringify(v)),
    '{"a":1}',
  );
});

Deno.test("evaluate() computes JSONata expressions", async () => {
  assert.equal(await evaluate("{% $sum($input.items.qty) %}", SCOPE), 5);
  assert.equal(await evaluate("{% $input.total > 10 ? 'big' : 'small' %}", SCOPE), "big");
  assert.deepEqual(await evaluate("{% $input.items[qty > 2].sku %}", SCOPE), "b");
  assert.deepEqual(await evaluate("{% { 'n': $input.total * 2 } %}", SCOPE), { n: 25 });
});

Deno.test("evaluate() turns undefined into null", async () => {
  assert.equal(await evaluate("{% $input.missing %}", SCOPE), null);
  assert.equal(await evaluate("{% $steps.nope.deeper %}", SCOPE), null);
  assert.deepEqual(await evaluate({ a: "{% $input.missing %}" }, SCOPE), { a: null });
  assert.deepEqual(await evaluate(["{% $input.missing %}"], SCOPE), [null]);
});

Deno.test("evaluate() makes results plain JSON", async () => {
  const seq = await evaluate("{% $input.items.sku %}", SCOPE);
  assert.deepEqual(seq, ["a", "b"]);
  assert.equal(Object.getPrototypeOf(seq), Array.prototype);
  assert.equal(Object.hasOwn(seq as object, "sequence"), false);
  assert.equal(await evaluate("{% $uppercase %}", SCOPE), null, "a function is not JSON");
  assert.equal(await evaluate("{% function($x) { $x } %}", SCOPE), null, "nor is a lambda");
  assert.deepEqual(
    await evaluate("{% { 'f': $sum, 'g': [$uppercase, 1], 'h': function() { 1 } } %}", SCOPE),
    {
      f: null,
      g: [null, 1],
      h: null,
    },
  );
  assert.equal(await evaluate("{% 1 / 0 %}", SCOPE), null, "Infinity is not JSON");
});

Deno.test("evaluate() does not change its scope", async () => {
  const scope = structuredClone(SCOPE);
  const out = await evaluate("{% $input %}", scope) as Record<string, unknown>;
  out.order_id = "changed";
  await evaluate("{% $append($input.items, [{'sku': 'c'}]) %}", scope);
  assert.deepEqual(scope, SCOPE);
});

Deno.test("evaluate() throws ExpressionError naming the expression", async () => {
  await assert.rejects(
    () => evaluate("{% $error('nope') %}", SCOPE),
    (e: unknown) => {
      assert.ok(e instanceof ExpressionError);
      assert.equal(e.name, "ExpressionError");
      assert.equal(e.message, "Cannot evaluate expression \"$error('nope')\": nope");
      return true;
    },
  );
  await assert.rejects(() => evaluate({ a: ["{% $notAFunction() %}"] }, SCOPE), ExpressionError);
  await assert.rejects(() => evaluate("{% ( %}", SCOPE), ExpressionError);
});

Deno.test("compile() caches by text and throws on invalid JSONata", () => {
  assert.equal(compile("$input.a + 1"), compile("$input.a + 1"));
  assert.throws(() => compile("$input.("));
  assert.throws(() => compile("$input.("), "an invalid expression is not cached");
});

Deno.test("expressionsIn() yields every {% %} string with its JSON path", () => {
  const found = [...expressionsIn({
    a: "{% $input %}",
    b: ["lit", "{% 1 %}", { c: "{% $steps.x %}" }],
    d: 5,
    e: null,
  }, "$.steps[0].input")];
  assert.deepEqual(found, [
    { path: "$.steps[0].input.a", text: "$input" },
    { path: "$.steps[0].input.b[1]", text: "1" },
    { path: "$.steps[0].input.b[2].c", text: "$steps.x" },
  ]);
  assert.deepEqual([...expressionsIn("{% 2 %}", "$.x")], [{ path: "$.x", text: "2" }]);
  assert.deepEqual([...expressionsIn(undefined, "$.x")], []);
});

Deno.test("evaluate() reads plain paths exactly as JSONata does", async () => {
  const reference = async (text: string, scope: Scope) => {
    // What evaluate() always did: JSONata, then a JSON round trip of objects.
    const r = await compile(text).evaluate({}, { ...scope });
    if (r === undefined) return null;
    const isFn = (x: unknown) =>
      typeof x === "function" ||
      (x !== null && typeof x === "object" && ("_jsonata_function" in x || "_jsonata_lambda" in x));
    if (isFn(r)) return null;
    if (r === null || typeof r !== "object") return r;
    return JSON.parse(JSON.stringify(r, (_k, x) => isFn(x) ? null : x));
  };
  const fn = { _jsonata_function: true, a: 1 };
  const inputs: unknown[] = [
    { a: { b: 1 } },
    { a: [{ b: 1 }, { b: [2, 3] }, { c: 4 }] },
    { a: [] },
    { a: [[1], [2]] },
    { a: [{ b: 1 }] },
    { a: { b: [{ c: 1 }] } },
    { a: null },
    { a: "text" },
    { a: 0 },
    { a: { b: -0 } },
    { a: fn },
    JSON.parse('{"a":{"__proto__":{"b":5}}}'),
    [1, 2],
    [{ a: 1 }],
    "text",
    null,
    {},
  ];
  const texts = [
    "$input",
    "$input.a",
    "$input.a.b",
    "$input.a.b.c",
    "$input.constructor",
    "$input.a.__proto__",
    "$input.a.__proto__.b",
    "$input.a.length",
    "$input.`a`",
    "$steps",
    "$steps.validate.total",
    "$vars",
    "$vars.status",
    "$execution",
    "$execution.id",
    "$signal",
    "$signal.a",
  ];
  for (const input of inputs) {
    for (const signal of [undefined, input]) {
      const scope = { ...SCOPE, input, ...(signal !== undefined ? { signal } : {}) };
      for (const text of texts) {
        const tpl = `{% ${text} %}`;
        const what = `${text} on ${JSON.stringify(input)}`;
        const want = await reference(text, scope);
        assert.deepEqual(await evaluate(tpl, scope), want, what);
        assert.deepEqual(await evaluate({ x: [tpl] }, scope), { x: [want] }, what);
      }
    }
  }
});

Deno.test("evaluate() results share no object with the scope", async () => {
  const scope = structuredClone(SCOPE);
  for (const text of ["$input", "$input.items", "$steps", "$steps.validate", "$vars"]) {
    const out = await evaluate(`{% ${text} %}`, scope) as Record<string, unknown>;
    out.changed = true;
  }
  (await evaluate({ a: "{% $input.items %}" }, scope) as { a: unknown[] }).a.push(1);
  assert.deepEqual(scope, SCOPE);
});
