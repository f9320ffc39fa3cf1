import assert from "node:assert/strict";
import { systemClock, timeOrderedId } from "./runtime.ts";

Deno.test("ids are UUIDs version 7: the time first, so later ids sort after", () => {
  const re = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
  const a = timeOrderedId(1_700_000_000_000);
  const b = timeOrderedId(1_700_000_000_001);
  assert.match(a, re);
  assert.match(b, re);
  assert.ok(a.startsWith("018bcfe5-6800-7"), a);
  assert.ok(a < b);
  const ids = new Set(Array.from({ length: 1000 }, () => systemClock.newId()));
  assert.equal(ids.size, 1000);
  for (const id of ids) assert.match(id, re);
});
