import assert from "node:assert/strict";
import postgres from "postgres";
import { OrbitError, storageFailure } from "./errors.ts";
import { sharedPostgres } from "../tests/support/pg.ts";

Deno.test("storageFailure: a lost connection is 500 STORAGE_ERROR with postgres.js's message", () => {
  const lost = Object.assign(new Error("write CONNECTION_CLOSED 127.0.0.1:5432"), {
    code: "CONNECTION_CLOSED",
  });
  const e = storageFailure(lost);
  assert.ok(e instanceof OrbitError);
  assert.equal(e.status, 500);
  assert.equal(e.code, "STORAGE_ERROR");
  assert.equal(e.message, "STORAGE_ERROR: write CONNECTION_CLOSED 127.0.0.1:5432");
});

Deno.test("storageFailure: anything that is not the database's is left alone", () => {
  assert.equal(storageFailure(new TypeError("x is undefined")), null);
  assert.equal(storageFailure(Object.assign(new Error("odd"), { code: "ENOENT" })), null);
  assert.equal(storageFailure("a string"), null);
});

Deno.test({
  name: "storageFailure: an error PostgreSQL answered, and a refused connection",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const url = await (await sharedPostgres()).createDatabase();
    const sql = postgres(url, { max: 1, onnotice: () => {} });
    try {
      const answered = await sql`SELECT 1 / 0`.then(() => null, (e) => e);
      assert.equal(storageFailure(answered)?.code, "STORAGE_ERROR");
    } finally {
      await sql.end({ timeout: 5 });
    }
    // A port nothing listens on (the harness's cluster is elsewhere).
    const dead = postgres("postgres://x@127.0.0.1:1/x", { max: 1, connect_timeout: 2 });
    try {
      const refused = await dead`SELECT 1`.then(() => null, (e) => e);
      assert.equal(storageFailure(refused)?.code, "STORAGE_ERROR", String(refused?.code));
    } finally {
      await dead.end({ timeout: 1 });
    }
  },
});
