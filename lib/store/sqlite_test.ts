import assert from "node:assert/strict";
import { DatabaseSync } from "node:sqlite";
import { CREATE_MIGRATIONS_TABLE, MIGRATIONS } from "../../sql/sqlite/migrations.ts";
import { PRAGMAS, READ_HISTORY } from "../../sql/sqlite/queries.ts";
import { openSqliteStore } from "./sqlite.ts";
import type { Store } from "./store.ts";
import { appendItem, createItem, runStoreConformance } from "./store_conformance.ts";

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
  const insert = old.prepare(
    "INSERT INTO execution_events (run_id, seq, execution_id, type, time_ms, data) VALUES (?, ?, ?, ?, ?, ?)",
  );
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
    const indexes = db.prepare(
      "SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'execution_events'",
    ).all().map((r) => r.name);
    assert.deepEqual(indexes, ["execution_events_run_seq_idx"]);
    // The unique index refuses a second event at the same seq, as the primary key did.
    assert.throws(() => insert2(db, a.row.run_id, 2), /UNIQUE constraint failed/);
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

function insert2(db: DatabaseSync, runId: string, seq: number) {
  db.prepare(
    "INSERT INTO execution_events (run_id, seq, execution_id, type, time_ms, data) VALUES (?, ?, 'a', 't', 0, '{}')",
  ).run(runId, seq);
}

Deno.test("sqlite store: workflow_executions keeps only the indexes its queries use", async () => {
  const path = `${dir}/indexes.db`;
  const store = await open(path);
  await store.migrate();
  await store.close();
  const db = new DatabaseSync(path);
  try {
    const indexes = db.prepare(
      "SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'workflow_executions' ORDER BY name",
    ).all().map((r) => r.name);
    // created, workflow and status: the list's three filters; wake: start-up and timers.
    assert.deepEqual(indexes, [
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
