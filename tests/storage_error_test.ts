/**
 * A database failure that reaches the app's error handler outside the store (shared mode's
 * claims, sessions and forwards run their own statements) answers 500 STORAGE_ERROR with the
 * driver's message, as a failed commit does, not 500 INTERNAL. The app runs in-process; the
 * failure is a real postgres.js error (a connection refused on a port nothing listens on).
 */
import assert from "node:assert/strict";
import postgres from "postgres";
import { createApp } from "../routes/app.ts";
import { Runtime } from "../lib/runtime.ts";
import { openSqliteStore } from "../lib/store/sqlite.ts";

Deno.test("a lost database connection under a request answers 500 STORAGE_ERROR", async () => {
  const dir = await Deno.makeTempDir();
  const store = await openSqliteStore(`${dir}/orbit.db`);
  await store.migrate();
  const rt = new Runtime(store, { sessionTimeoutMs: 30_000, maxActiveExecutions: null });
  const dead = postgres("postgres://x@127.0.0.1:1/x", { max: 1, connect_timeout: 2 });
  try {
    const failure = await dead`SELECT 1`.then(() => null, (e) => e);
    assert.ok(failure instanceof Error);
    const app = createApp(rt, { token: null, maxBodyBytes: 1 << 20, ui: false });
    app.get("/v1/test-storage-failure", () => {
      throw failure;
    });
    app.get("/v1/test-bug", () => {
      throw new TypeError("a bug");
    });
    const r = await app.request("/v1/test-storage-failure");
    const body = await r.json();
    assert.equal(r.status, 500, JSON.stringify(body));
    assert.equal(body.error.code, "STORAGE_ERROR");
    assert.equal(body.error.message, `STORAGE_ERROR: ${failure.message}`);
    // Anything else is still the server's own error, with no detail for the client.
    const bug = await app.request("/v1/test-bug");
    assert.equal(bug.status, 500);
    assert.equal((await bug.json()).error.code, "INTERNAL");
  } finally {
    await dead.end({ timeout: 1 });
    await store.close();
    await Deno.remove(dir, { recursive: true });
  }
});
