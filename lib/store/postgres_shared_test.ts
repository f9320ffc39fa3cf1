/**
 * The shared-mode commit (sql/postgres/shared.ts COMMIT_OWNED): ownership rows written with
 * the create and deleted with the terminal status, the per-execution fence, and the queue and
 * inbox rows written in the same statement as the events.
 */
import assert from "node:assert/strict";
import postgres from "postgres";
import { sharedPostgres } from "../../tests/support/pg.ts";
import { openPostgresStore } from "./postgres.ts";
import type { AppendItem, SharedAppend } from "./store.ts";
import { appendItem, createItem } from "./store_conformance.ts";

function shared(node: string, epoch: number, over: Partial<SharedAppend> = {}): SharedAppend {
  return { node_id: node, epoch, enqueue: [], gone: [], cancel: [], done: [], inbox: [], ...over };
}

function owned(item: AppendItem, node: string, epoch: number, over: Partial<SharedAppend> = {}) {
  return { ...item, shared: shared(node, epoch, over) };
}

function task(execution_id: string, run_id: string, unit: string) {
  return {
    execution_id,
    run_id,
    step: "s2",
    attempt: 1,
    unit,
    task_name: "orders.validate",
    contract_version: "1",
    language: null,
    enqueued_ms: 1,
    payload: { task: "orders.validate", contract: "1", input: null },
  };
}

Deno.test("postgres shared commit: an execution owned elsewhere is fenced alone, the rest commits", async () => {
  const url = await (await sharedPostgres()).createDatabase();
  const store = await openPostgresStore(url);
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  try {
    await store.migrate();
    const a = createItem("a");
    const b = createItem("b");
    assert.deepEqual(await store.commit([owned(a, "n1", 1), owned(b, "n1", 1)]), {
      fenced: new Map(),
    });
    const owners = await sql`SELECT execution_id, node_id, epoch FROM orbit_owners ORDER BY 1`;
    assert.deepEqual(owners.map((o) => [o.execution_id, o.node_id, Number(o.epoch)]), [
      ["a", "n1", 1],
      ["b", "n1", 1],
    ]);

    // Another node takes `a` over (the takeover statement's effect).
    await sql`UPDATE orbit_owners SET node_id = 'n2', epoch = 2 WHERE execution_id = 'a'`;
    const r = await store.commit([
      owned(appendItem(a.row, 1), "n1", 1, { enqueue: [task("a", a.row.run_id, "ua")] }),
      owned(appendItem(b.row, 1), "n1", 1, { enqueue: [task("b", b.row.run_id, "ub")] }),
    ]);
    const fenced = (r as { fenced: Map<string, Error> }).fenced;
    assert.deepEqual([...fenced.keys()], ["a"]);
    assert.equal(
      fenced.get("a")!.message,
      "fenced: execution `a` is owned by node `n2` at epoch 2; this node held epoch 1",
    );
    assert.equal(fenced.get("a")!.name, "FencedError");
    // Nothing of `a` was written, all of `b` was.
    assert.equal((await store.readHistory(a.row.run_id, 0, 10)).length, 1);
    assert.equal((await store.readHistory(b.row.run_id, 0, 10)).length, 2);
    const tasks = await sql`SELECT execution_id, unit, state FROM orbit_tasks ORDER BY 1`;
    assert.deepEqual(tasks.map((t) => [t.execution_id, t.unit, t.state]), [["b", "ub", "queued"]]);
  } finally {
    await sql.end();
    await store.close();
  }
});

Deno.test("postgres shared commit: the terminal status deletes the ownership row and the task rows of reported attempts", async () => {
  const url = await (await sharedPostgres()).createDatabase();
  const store = await openPostgresStore(url);
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  try {
    await store.migrate();
    const a = createItem("a");
    await store.commit([owned(a, "n1", 1, { enqueue: [task("a", a.row.run_id, "u1")] })]);
    await sql`UPDATE orbit_tasks SET state = 'claimed', token = 'a/t1' WHERE unit = 'u1'`;
    await sql`INSERT INTO orbit_inbox (node_id, execution_id, kind, payload, created_ms)
              VALUES ('n1', 'a', 'complete', '{}', 1)`;
    const [entry] = await sql`SELECT seq FROM orbit_inbox`;
    // A continued run keeps the ownership row.
    const cont = appendItem(a.row, 1, { status: "continued" });
    await store.commit([owned(cont, "n1", 1)]);
    assert.equal((await sql`SELECT count(*)::int AS n FROM orbit_owners`)[0]!.n, 1);
    const done = appendItem(cont.row, 1, { status: "completed", closed_ms: 5 });
    await store.commit([
      owned(done, "n1", 1, { done: ["a/t1"], inbox: [Number(entry!.seq)] }),
    ]);
    assert.equal((await sql`SELECT count(*)::int AS n FROM orbit_owners`)[0]!.n, 0);
    assert.equal((await sql`SELECT count(*)::int AS n FROM orbit_tasks`)[0]!.n, 0);
    assert.equal((await sql`SELECT count(*)::int AS n FROM orbit_inbox`)[0]!.n, 0);
  } finally {
    await sql.end();
    await store.close();
  }
});

Deno.test("postgres shared commit: a create of an existing id is a DuplicateExecutionError and writes nothing", async () => {
  const url = await (await sharedPostgres()).createDatabase();
  const store = await openPostgresStore(url);
  try {
    await store.migrate();
    await store.commit([owned(createItem("a"), "n1", 1)]);
    await assert.rejects(
      store.commit([
        owned(createItem("a", { run_id: "a-run-2" }), "n2", 1),
        owned(createItem("c"), "n2", 1),
      ]),
      { name: "DuplicateExecutionError" },
    );
    assert.equal(await store.getExecution("c"), null);
  } finally {
    await store.close();
  }
});
