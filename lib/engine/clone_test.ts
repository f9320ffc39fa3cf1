import assert from "node:assert/strict";
import { cloneJson } from "./clone.ts";

Deno.test("cloneJson() copies deeply: changing the copy leaves the original as it was", () => {
  const original = { a: [1, { b: "x" }], c: { d: null, e: undefined }, f: true, g: 1.5 };
  const copy = cloneJson(original);
  assert.deepEqual(copy, original);
  assert.ok(Object.hasOwn(copy.c, "e"), "undefined members are kept");
  (copy.a[1] as { b: string }).b = "changed";
  copy.c.d = 3 as unknown as null;
  copy.a.push(2);
  assert.deepEqual(original, { a: [1, { b: "x" }], c: { d: null, e: undefined }, f: true, g: 1.5 });
});

Deno.test("cloneJson() returns primitives as they are", () => {
  for (const v of [null, 0, "s", false, undefined]) assert.equal(cloneJson(v), v);
});
