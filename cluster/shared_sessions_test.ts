/**
 * Worker sessions' rows under several servers: their contact writes (TOUCH_SESSIONS) and the
 * expiry (EXPIRE_SESSIONS) lock the rows they change in one order, so that two servers' writes
 * over the same sessions wait for each other but never deadlock; and a server has one contact
 * write in flight at a time.
 */
import assert from "node:assert/strict";
import type postgres from "postgres";
import { postgresClient } from "../lib/store/postgres.ts";
import { migratedDatabase } from "../tests/support/pg.ts";
import { waitFor } from "../tests/support/server.ts";
import { EXPIRE_SESSIONS, INSERT_SESSION, TOUCH_SESSIONS } from "../sql/postgres/shared/mod.ts";

/** A migrated database, three one-connection clients (A, B, and C to watch) and sessions. */
async function setup(sessions: string[]) {
  const url = await migratedDatabase();
  const client = (name: string) => postgresClient(url, { max: 1, applicationName: name });
  const a = client("orbit-test-a");
  const b = client("orbit-test-b");
  const c = client("orbit-test-c");
  for (const id of sessions) {
    await c.unsafe(INSERT_SESSION, [id, "w", "typescript", JSON.stringify([]), 1, 0]);
  }
  /** Until the statement of client `name` waits for a row lock. */
  const waitsForLock = (name: string) =>
    waitFor(
      async () =>
        (await c`SELECT 1 FROM pg_stat_activity
          WHERE application_name = ${name} AND wait_event_type = 'Lock'`).length === 1,
      `${name} waiting for a row lock`,
    );
  const contacts = async () =>
    Object.fromEntries(
      (await c<{ session_id: string; last_contact_ms: string }[]>`
        SELECT session_id, last_contact_ms FROM orbit_sessions ORDER BY session_id`)
        .map((r) => [r.session_id, Number(r.last_contact_ms)]),
    );
  const close = () => Promise.all([a.end(), b.end(), c.end()]);
  return { a, b, waitsForLock, contacts, close };
}

const touch = (sql: postgres.Sql | postgres.TransactionSql, list: Array<[string, number]>) =>
  sql.unsafe(TOUCH_SESSIONS, [list.map(([id, ms]) => ({ id, ms }))] as never[]);

Deno.test({
  name:
    "session contacts: two servers writing the same sessions in opposite orders do not deadlock",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    // s-y is inserted first, so a scan in table order meets it first too.
    const t = await setup(["s-y", "s-x"]);
    try {
      let second: Promise<unknown> | null = null;
      await t.a.begin(async (tx) => {
        await touch(tx, [["s-x", 100]]); // A holds s-x
        // B's list names s-y first: locking in the list's order, B would hold s-y while it
        // waits for s-x, and A's write of s-y below would close the cycle (40P01 after 1 s).
        second = touch(t.b, [["s-y", 200], ["s-x", 200]]);
        second.catch(() => {}); // awaited below
        await t.waitsForLock("orbit-test-b");
        await touch(tx, [["s-y", 300]]);
      });
      await second;
      assert.deepEqual(await t.contacts(), { "s-x": 200, "s-y": 300 });
    } finally {
      await t.close();
    }
  },
});

Deno.test({
  name: "session expiry locks in the contact writes' order and keeps a session written meanwhile",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    // Both silent since 0; s-y first in the table.
    const t = await setup(["s-y", "s-x"]);
    try {
      let expiry: Promise<Array<{ session_id: string }>> | null = null;
      await t.a.begin(async (tx) => {
        await touch(tx, [["s-x", 10_000]]); // a contact of s-x, not committed yet
        // Silent for more than 3 s at 5,000: both, as far as the expiry can see.
        expiry = t.b.unsafe(EXPIRE_SESSIONS, [3_000, 5_000]);
        expiry.catch(() => {}); // awaited below
        await t.waitsForLock("orbit-test-b");
        await touch(tx, [["s-y", 10_000]]);
      });
      // Both were written before the expiry could lock them: it checks them again, keeps them.
      assert.deepEqual([...await expiry!], []);
      assert.deepEqual(await t.contacts(), { "s-x": 10_000, "s-y": 10_000 });
    } finally {
      await t.close();
    }
  },
});
