/**
 * The expression budget (issue 37): an expression that never ends, recurses without end, builds
 * huge sequences or results, or backtracks in a regular expression fails with
 * ExpressionLimitError (EXPRESSION_LIMIT) in bounded time. (What JSONata's guards cannot stop,
 * one long call of a built-in, the sandbox's deadline stops: lib/expressions/sandbox_test.ts.)
 */
import assert from "node:assert/strict";
import {
  configureExpressions,
  DEFAULT_EXPRESSION_BUDGET,
  evaluate,
  ExpressionError,
  ExpressionLimitError,
  regexProblems,
  type Scope,
} from "./expr.ts";
import { validateWorkflow } from "./validate.ts";

const SCOPE: Scope = {
  input: "a".repeat(40) + "!",
  steps: {},
  vars: {},
  execution: { id: "e", run_id: "r", root_id: "e", workflow: "W", version: "1.0.0" },
};

/** Evaluates with a 300 ms budget; answers the error and how long it took. */
async function overrun(text: string): Promise<{ error: unknown; ms: number }> {
  configureExpressions({ budget: { timeoutMs: 300 } });
  const t = performance.now();
  try {
    const v = await evaluate(`{% ${text} %}`, SCOPE);
    return { error: new Error(`evaluated to ${JSON.stringify(v)?.slice(0, 80)}`), ms: 0 };
  } catch (e) {
    return { error: e, ms: performance.now() - t };
  } finally {
    configureExpressions({ budget: {} });
  }
}

const OVERRUNS: Array<[string, string]> = [
  ["a tail call that never ends", "($f := function($n){ $f($n + 1) }; $f(0))"],
  ["recursion without end", "($f := function($n){ 1 + $f($n + 1) }; $f(0))"],
  ["mutual recursion", "($a := function($n){ $b($n) + 1 }; $b := function($n){ $a($n) }; $a(0))"],
  ["a sequence past the limit", "[1..2000000].($ * 2)"],
  ["a range past JSONata's limit", "[1..100000000]"],
  ["a result past the size limit", '$pad("", 2000000)'],
  ["a string doubled without end", '($f := function($s){ $f($s & $s) }; $f("ab"))'],
  ["a huge array built by a map", "$map([1..100000], function($v){ [1..100] })"],
  ["a filter that recurses", "[1,2,3][($f := function($n){ $f($n) }; $f($))]"],
  ["a $pad past the result limit", '$pad("x", 100000000)'],
];

for (const [name, text] of OVERRUNS) {
  Deno.test(`expression budget: ${name} fails with EXPRESSION_LIMIT`, async () => {
    const { error, ms } = await overrun(text);
    assert.ok(error instanceof ExpressionLimitError, `${name}: ${error}`);
    assert.equal(error.code, "EXPRESSION_LIMIT");
    assert.ok(ms < 5_000, `${name} took ${ms} ms`);
  });
}

Deno.test("expression budget: a mistake in an expression stays EXPRESSION_ERROR", async () => {
  configureExpressions({ budget: {} });
  await assert.rejects(
    () => evaluate('{% $number("x") + 1 %}', SCOPE),
    (e: unknown) => e instanceof ExpressionError && !(e instanceof ExpressionLimitError),
  );
});

Deno.test("expression budget: ordinary expressions are untouched by it", async () => {
  configureExpressions({ budget: { timeoutMs: 300 } });
  try {
    assert.equal(await evaluate("{% $sum([1..1000]) %}", SCOPE), 500500);
    assert.equal(
      await evaluate("{% ($f := function($n){ $n <= 1 ? 1 : $n * $f($n - 1) }; $f(20)) %}", SCOPE),
      2432902008176640000,
    );
    assert.equal(await evaluate('{% $count($split($pad("", 1000, "x,"), ",")) %}', SCOPE), 501);
  } finally {
    configureExpressions({ budget: {} });
  }
});

Deno.test("regular expressions run in linear time (RE2): no catastrophic backtracking", async () => {
  const input = "a".repeat(5_000) + "!";
  const t = performance.now();
  const v = await evaluate("{% $match($input, /^(a+)+$/) %}", { ...SCOPE, input });
  assert.equal(v, null);
  assert.ok(performance.now() - t < 1_000, `took ${performance.now() - t} ms`);
  // The same semantics as RegExp for what both run: groups, flags, indices past a surrogate pair.
  assert.deepEqual(
    await evaluate('{% $match("x😀ÉÉb-éb", /(é+)b/i) %}', SCOPE),
    [
      { match: "ÉÉb", index: 3, groups: ["ÉÉ"] },
      { match: "éb", index: 7, groups: ["é"] },
    ],
  );
  assert.equal(await evaluate('{% $replace("a1b22", /\\d+/, "#") %}', SCOPE), "a#b#");
  assert.deepEqual(await evaluate('{% $split("a, b,c", /,\\s*/) %}', SCOPE), ["a", "b", "c"]);
  assert.equal(await evaluate('{% $contains("Hello", /^h/i) %}', SCOPE), true);
  assert.equal(await evaluate('{% $contains("\\u00e9t\\u00e9", /\\u00e9t/) %}', SCOPE), true);
});

Deno.test("a regular expression RE2 cannot run is refused at deploy, with its path", () => {
  assert.deepEqual(regexProblems("$match($input, /a+/)"), []);
  assert.equal(regexProblems("$match($input, /(a)\\1/)").length, 1);
  const r = validateWorkflow({
    ir: "orbit-ir/1",
    name: "Re",
    version: "1.0.0",
    steps: [{ id: "done", return: "{% $match($input, /(?<=a)b/) %}" }],
  });
  assert.equal(r.ok, false);
  const problems = r.ok ? [] : r.problems;
  assert.equal(problems.length, 1, JSON.stringify(problems));
  assert.equal(problems[0]!.path, "$.steps[0].return");
  assert.match(problems[0]!.message, /linear-time engine/);
});

Deno.test("the budget's defaults are what docs/operations.md states (Limits)", () => {
  assert.deepEqual(DEFAULT_EXPRESSION_BUDGET, {
    timeoutMs: 1000,
    maxDepth: 2000,
    maxSequence: 1_000_000,
    maxResultBytes: 1_048_576,
  });
});

Deno.test("$sort is n log n with JSONata's contract (its own merge sort is quadratic)", async () => {
  // JSONata's own sort of 200,000 items runs for minutes and out of memory; this one takes
  // about 0.5 s on an idle machine. The budget is generous so a loaded machine cannot fail it.
  configureExpressions({ budget: { timeoutMs: 30_000 } });
  try {
    assert.equal(await evaluate("{% $count($sort([1..200000].(200000 - $))) %}", SCOPE), 200000);
    assert.deepEqual(await evaluate('{% $sort(["b", "a", "c"]) %}', SCOPE), ["a", "b", "c"]);
    assert.deepEqual(await evaluate("{% $sort([3, 1, 2]) %}", SCOPE), [1, 2, 3]);
    // Stable, with the comparator's "true puts the right one first".
    assert.deepEqual(
      await evaluate(
        '{% $sort([{"k":2,"n":"a"},{"k":1,"n":"b"},{"k":2,"n":"c"},{"k":1,"n":"d"}], ' +
          "function($l, $r){ $l.k > $r.k }).n %}",
        SCOPE,
      ),
      ["b", "d", "a", "c"],
    );
    assert.deepEqual(await evaluate("{% [3, 1, 2]^($) %}", SCOPE), [1, 2, 3]);
    await assert.rejects(() => evaluate('{% $sort([1, "a"]) %}', SCOPE), /D3070|sort/);
  } finally {
    configureExpressions({ budget: {} });
  }
});

Deno.test("$pad keeps JSONata's contract under the cap", async () => {
  assert.equal(await evaluate('{% $pad("ab", 5) %}', SCOPE), "ab   ");
  assert.equal(await evaluate('{% $pad("ab", -5, "#") %}', SCOPE), "###ab");
  assert.equal(await evaluate('{% $pad("ab", 7, "xy") %}', SCOPE), "abxyxyx");
  assert.equal(await evaluate('{% $pad("😀", 3, "é") %}', SCOPE), "😀éé");
  assert.equal(await evaluate('{% $pad("abc", 2) %}', SCOPE), "abc");
});
