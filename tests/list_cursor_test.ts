/**
 * `GET /v1/executions?cursor=`: a cursor the server did not hand out is the client's fault
 * (400 INVALID_CURSOR); a storage failure while listing is the server's (500 STORAGE_ERROR),
 * with or without a cursor. The app runs in-process (no socket) on a real SQLite store whose
 * listing is made to fail.
 */
import assert from "node:assert/strict";
import { createApp } from "../routes/app.ts";
import { Runtime } from "../lib/runtime.ts";
import { openSqliteStore } from "../lib/store/sqlite.ts";
import { encodeListCursor } from "../lib/store/store.ts";

async function withApp(fn: (app: ReturnType<typeof createApp>, rt: Runtime) => Promise<void>) {
  const dir = await Deno.makeTempDir();
  const store = await openSqliteStore(`${dir}/orbit.db`);
  await store.migrate();
  const rt = new Runtime(store, { sessionTimeoutMs: 30_000, maxActiveExecutions: null });
  try {
    await fn(createApp(rt, { token: null, maxBodyBytes: 1 << 20, ui: false }), rt);
  } finally {
    await store.close();
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("a malformed cursor answers 400 INVALID_CURSOR", async () => {
  await withApp(async (app) => {
    for (const cursor of ["not-a-cursor", btoa("[1]"), "%%%"]) {
      const r = await app.request(`/v1/executions?cursor=${encodeURIComponent(cursor)}`);
      assert.equal(r.status, 400, cursor);
      assert.equal((await r.json()).error.code, "INVALID_CURSOR");
    }
    const ok = await app.request(
      `/v1/executions?cursor=${encodeListCursor({ created_ms: 1, execution_id: "x" })}`,
    );
    assert.equal(ok.status, 200);
  });
});

Deno.test("a storage failure while listing with a cursor answers 500 STORAGE_ERROR, not INVALID_CURSOR", async () => {
  await withApp(async (app, rt) => {
    const cursor = encodeListCursor({ created_ms: Date.now(), execution_id: "x" });
    // The connection closes under the store: every query fails from now on.
    await rt.store.close();
    for (const path of [`/v1/executions?cursor=${cursor}`, "/v1/executions"]) {
      const r = await app.request(path);
      const body = await r.json();
      assert.equal(r.status, 500, JSON.stringify(body));
      assert.equal(body.error.code, "STORAGE_ERROR");
      assert.match(body.error.message, /^STORAGE_ERROR: /);
    }
    // A malformed cursor is still the client's fault, storage or not.
    const bad = await app.request("/v1/executions?cursor=nope!");
    assert.equal(bad.status, 400);
    assert.equal((await bad.json()).error.code, "INVALID_CURSOR");
  });
});
