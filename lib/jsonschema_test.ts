/**
 * User JSON Schemas run their patterns on RE2 (issue 37: `^(a+)+$` against 26 `a`s and `!`
 * blocked the server for 340 ms, doubling per character).
 */
import assert from "node:assert/strict";
import { compileSchema, validateAgainst } from "./jsonschema.ts";
import { validateWorkflow } from "./engine/validate.ts";

Deno.test("a backtracking pattern in a schema answers in linear time", () => {
  const schema = { type: "string", pattern: "^(a+)+$" };
  const t = performance.now();
  const problems = validateAgainst(schema, "a".repeat(10_000) + "!");
  const ms = performance.now() - t;
  assert.equal(problems.length, 1);
  assert.match(problems[0]!.message, /must match pattern/);
  // A backtracking engine takes 2^10000 steps (never ends); RE2 a few ms. The bound is loose
  // so that a loaded machine cannot fail it.
  assert.ok(ms < 15_000, `took ${ms} ms`);
  assert.deepEqual(validateAgainst(schema, "aaaa"), []);
});

Deno.test("patternProperties run on RE2 too", () => {
  const schema = {
    type: "object",
    patternProperties: { "^(x+)+y$": { type: "number" } },
  };
  assert.deepEqual(validateAgainst(schema, { xxy: 1 }), []);
  assert.equal(validateAgainst(schema, { xxy: "no" }).length, 1);
  const t = performance.now();
  assert.deepEqual(validateAgainst(schema, { ["x".repeat(10_000)]: "skipped" }), []);
  assert.ok(performance.now() - t < 15_000);
});

Deno.test("a schema pattern RE2 cannot run is refused at deploy with its path", () => {
  assert.throws(() => compileSchema({ type: "string", pattern: "(a)\\1" }), /linear-time/);
  const r = validateWorkflow({
    ir: "orbit-ir/1",
    name: "Re",
    version: "1.0.0",
    input_schema: { type: "object", properties: { s: { type: "string", pattern: "(?=a)" } } },
    steps: [{ id: "done", return: "{% $input %}" }],
  });
  assert.equal(r.ok, false);
  const problems = r.ok ? [] : r.problems;
  assert.equal(problems[0]?.path, "$.input_schema");
  assert.match(problems[0]!.message, /linear-time engine/);
});

Deno.test("schemas with different patterns each use their own (Ajv shares by the pattern's name)", () => {
  assert.deepEqual(validateAgainst({ type: "string", pattern: "^a$" }, "a"), []);
  assert.equal(validateAgainst({ type: "string", pattern: "^b$" }, "a").length, 1);
  assert.deepEqual(validateAgainst({ type: "string", pattern: "^b$" }, "b"), []);
});
