import assert from "node:assert/strict";
import { settledBy, TimeoutError, withTimeout } from "./with_timeout.ts";

const later = <T>(ms: number, v: T) => new Promise<T>((r) => setTimeout(() => r(v), ms));

Deno.test("withTimeout: the answer in time, a TimeoutError past it, p's own error", async () => {
  assert.equal(await withTimeout(later(5, "a"), 1000), "a");
  await assert.rejects(withTimeout(later(1000, "b"), 10), TimeoutError);
  await assert.rejects(withTimeout(Promise.reject(new Error("db down")), 1000), /db down/);
});

Deno.test("settledBy: true when p settles (either way) by the deadline, else false", async () => {
  assert.equal(await settledBy(later(5, 1), Date.now() + 1000), true);
  assert.equal(await settledBy(Promise.reject(new Error("failed")), Date.now() + 1000), true);
  const started = performance.now();
  let resolve!: () => void;
  const never = new Promise<void>((r) => (resolve = r));
  assert.equal(await settledBy(never, Date.now() + 30), false);
  assert.ok(performance.now() - started < 1000, "gave up at the deadline");
  // A deadline already past: only a promise settled by now counts.
  assert.equal(await settledBy(never, Date.now() - 5), false);
  resolve();
  assert.equal(await settledBy(never, Date.now() - 5), true);
});
