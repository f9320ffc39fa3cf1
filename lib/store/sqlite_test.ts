import assert from "node:assert/strict";
import { DatabaseSync } from "node:sqlite";
import { CREATE_MIGRATIONS_TABLE, MIGRATIONS } from "../../sql/sqlite/migrations.ts";
import { INSERT_EVENT, PRAGMAS, READ_HISTORY } from "../../sql/sqlite/queries.ts";
import { openSqliteStore } from "./sqlite.ts";
import type { Store } from "./store.ts";
import { appendItem, createItem, runStoreConformance } from "./conformance/suite.ts";

const dir = Deno.makeTempDirSync({ prefix: "orbit-sqlite-test-" });
globalThis.addEventListener("unload", () => Deno.removeSync(dir, { recursive: true }));
const paths = new WeakMap<Store, string>();
let n = 0;

async function open(path = `${dir}/${++n}.db`): Promise<Store> {
  const store = await openSqliteStore(path);
  paths.set(store, path);
  return store;
}

runStoreConformance("sqlite", () => open(), { reopen: (store) => open(paths.get(store)) });

Deno.test("sqlite store: migration 5 moves a version-4 history into the appended table", async () => {
  const path = `${dir}/v4.db`;
  const old = new DatabaseSync(path);
  old.exec(PRAGMAS);
  old.exec(CREATE_MIGRATIONS_TABLE);
  for (const m of MIGRATIONS.filter((m) => m.version <= 4)) {
    old.exec(m.sql);
    old.prepare("INSERT INTO orbit_migrations (version, applied_ms) VALUES (?, 0)").run(m.version);
  }
  const a = createItem("a");
  const b = createItem("b");
  const insert = old.prepare(INSERT_EVENT);
  // Written out of seq order: the v4 table kept them in (run_id, seq) order all the same.
  const a2 = appendItem(a.row, 3);
  const rows = [
    ...[...a2.events].reverse().map((ev) => [a, ev] as const),
    [b, b.events[0]!] as const,
    [a, a.events[0]!] as const,
  ];
  for (const [item, ev] of rows) {
    const { run_id, execution_id } = item.row;
    insert.run(run_id, ev.seq, execution_id, ev.type, ev.time_ms, JSON.stringify(ev));
  }
  old.close();

  const store = await open(path);
  try {
    await store.migrate();
    assert.deepEqual(await store.readHistory(a.row.run_id, 0, 10), [...a.events, ...a2.events]);
    assert.deepEqual(await store.readHistory(a.row.run_id, 2, 1), [a2.events[1]]);
    assert.deepEqual(await store.readHistory(b.row.run_id, 0, 10), b.events);
  } finally {
    await store.close();
  }
  const db = new DatabaseSync(path);
  try {
    assert.deepEqual(indexesOf(db, "execution_events"), ["execution_events_run_seq_idx"]);
    // The unique index refuses a second event at the same seq, as the primary key did.
    assert.throws(
      () => db.prepare(INSERT_EVENT).run(a.row.run_id, 2, "a", "t", 0, "{}"),
      /UNIQUE constraint failed/,
    );
    const plan = db.prepare(`EXPLAIN QUERY PLAN ${READ_HISTORY}`).all({
      run_id: "x",
      after_seq: 0,
      limit: 1,
    }).map((r) => String(r.detail));
    assert.ok(plan.some((d) => d.includes("execution_events_run_seq_idx")), plan.join("; "));
  } finally {
    db.close();
  }
});

/** The names of a table's indexes, in name order. */
function indexesOf(db: DatabaseSync, table: string): unknown[] {
  return db.prepare(
    "SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = ? ORDER BY name",
  ).all(table).map((r) => r.name);
}

Deno.test("sqlite store: workflow_executions keeps only the indexes its queries use", async () => {
  const path = `${dir}/indexes.db`;
  const store = await open(path);
  await store.migrate();
  await store.close();
  const db = new DatabaseSync(path);
  try {
    // created, workflow and status: the list's three filters; wake: start-up and timers.
    assert.deepEqual(indexesOf(db, "workflow_executions"), [
      "sqlite_autoindex_workflow_executions_1",
      "workflow_executions_created_idx",
      "workflow_executions_status_idx",
      "workflow_executions_wake_idx",
      "workflow_executions_workflow_idx",
    ]);
  } finally {
    db.close();
  }
});
