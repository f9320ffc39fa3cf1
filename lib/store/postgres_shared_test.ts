/**
 * The shared-mode commit (sql/postgres/shared/commit.ts COMMIT_OWNED): ownership rows written with
 * the create and deleted with the terminal status, the per-execution fence, and the queue and
 * inbox rows written in the same statement as the events.
 */
import assert from "node:assert/strict";
import postgres from "postgres";
import { sharedPostgres } from "../../tests/support/pg.ts";
import { openPostgresStore, postgresClient } from "./postgres.ts";
import {
  type AppendItem,
  type CommitResult,
  InboxGoneError,
  type SharedAppend,
  type Store,
} from "./store.ts";
import { appendItem, createItem } from "./conformance/suite.ts";
import {
  claimTasks,
  COMMIT_OWNED,
  CONFIRM_TOKENS,
  CONFIRMED_AT,
  DEAD_ROOTS,
  KNOWN_TOKENS,
  LIST_NODES,
  ORPHAN_INBOX,
  READ_INBOX,
  READ_INBOX_OF,
  SETTLE_INBOX,
  SHARED_CONNECTION_SETTINGS,
  TAKE_CANCELLED,
  TASKS_OF,
} from "../../sql/postgres/shared/mod.ts";
import { waitFor } from "../../tests/support/server.ts";

function shared(node: string, epoch: number, over: Partial<SharedAppend> = {}): SharedAppend {
  return {
    node_id: node,
    epoch,
    enqueue: [],
    gone: [],
    cancel: [],
    done: [],
    inbox: [],
    take: [],
    ...over,
  };
}

function owned(item: AppendItem, node: string, epoch: number, over: Partial<SharedAppend> = {}) {
  return { ...item, shared: shared(node, epoch, over) };
}

function task(execution_id: string, run_id: string, unit: string, enqueued_ms = 1) {
  return {
    execution_id,
    run_id,
    step: "s2",
    attempt: 1,
    unit,
    task_name: "orders.validate",
    contract_version: "1",
    language: null,
    enqueued_ms,
    payload: { task: "orders.validate", contract: "1", input: null },
  };
}

/** A migrated store on a fresh database and a plain connection to it, both closed after `fn`. */
async function withStore(
  fn: (store: Store, sql: postgres.Sql, url: string) => Promise<void>,
): Promise<void> {
  const url = await (await sharedPostgres()).createDatabase();
  const store = await openPostgresStore(url);
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  try {
    await store.migrate();
    await fn(store, sql, url);
  } finally {
    await sql.end();
    await store.close();
  }
}

Deno.test("postgres shared commit: an execution owned elsewhere is fenced alone, the rest commits", () =>
  withStore(async (store, sql) => {
    const a = createItem("a");
    const b = createItem("b");
    assert.deepEqual(await store.commit([owned(a, "n1", 1), owned(b, "n1", 1)]), {
      fenced: new Map(),
      lost: new Map(),
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
  }));

Deno.test("postgres shared commit: a steady item is fenced like any other and writes no row", () =>
  withStore(async (store, sql) => {
    const a = createItem("a");
    const b = createItem("b");
    await store.commit([owned(a, "n1", 1), owned(b, "n1", 1)]);
    const versions = async () =>
      (await sql`SELECT execution_id, xmin::text AS v FROM workflow_executions ORDER BY 1`)
        .map((r) => r.v);
    const before = await versions();
    await sql`UPDATE orbit_owners SET node_id = 'n2', epoch = 2 WHERE execution_id = 'a'`;
    const a2 = { ...appendItem(a.row, 1), steady: true };
    const b2 = { ...appendItem(b.row, 2), steady: true };
    const r = await store.commit([owned(a2, "n1", 1), owned(b2, "n1", 1)]);
    assert.deepEqual([...(r as { fenced: Map<string, Error> }).fenced.keys()], ["a"]);
    // Neither row got a new version; b's events were written and its reads follow them.
    assert.deepEqual(await versions(), before);
    assert.equal((await store.readHistory(a.row.run_id, 0, 10)).length, 1);
    assert.deepEqual(await store.getExecution("a"), a.row);
    assert.deepEqual(await store.getExecution("b"), b2.row);
  }));

Deno.test("postgres shared commit: the terminal status deletes the ownership row and the task rows of reported attempts", () =>
  withStore(async (store, sql) => {
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
  }));

Deno.test("postgres shared commit: an append whose inbox entry is gone writes nothing of its execution, the rest commits", () =>
  withStore(async (store, sql) => {
    const a = createItem("a");
    const b = createItem("b");
    await store.commit([owned(a, "n1", 1), owned(b, "n1", 1)]);
    await sql`INSERT INTO orbit_inbox (node_id, execution_id, kind, payload, created_ms)
            VALUES ('n1', 'a', 'signal', '{}', 1), ('n1', 'b', 'signal', '{}', 1)`;
    const [ea, eb] = (await sql`SELECT seq FROM orbit_inbox ORDER BY seq`).map((r) =>
      Number(r.seq)
    );
    // a's entry withdrawn by the server that forwarded it (it answered "nothing was applied").
    await sql`DELETE FROM orbit_inbox WHERE seq = ${ea!}`;
    const a2 = appendItem(a.row, 1);
    const b2 = appendItem(b.row, 2);
    const r = await store.commit([
      owned(a2, "n1", 1, { inbox: [ea!] }),
      owned(b2, "n1", 1, { inbox: [eb!] }),
    ]);
    const lost = (r as CommitResult).lost!;
    assert.deepEqual([...lost.keys()], ["a"]);
    assert.ok(lost.get("a") instanceof InboxGoneError);
    assert.equal((r as CommitResult).fenced?.size ?? 0, 0);
    assert.equal((await store.readHistory(a.row.run_id, 0, 10)).length, 1);
    assert.deepEqual(await store.getExecution("a"), a.row);
    assert.equal((await store.readHistory(b.row.run_id, 0, 10)).length, 3);
    assert.equal((await sql`SELECT count(*)::int AS n FROM orbit_inbox`)[0]!.n, 0);
    // Applied again (an earlier commit of it landed although it reported an error): the same.
    const again = await store.commit([owned(appendItem(b2.row, 1), "n1", 1, { inbox: [eb!] })]);
    assert.deepEqual([...(again as CommitResult).lost!.keys()], ["b"]);
    assert.equal((await store.readHistory(b.row.run_id, 0, 10)).length, 3);
  }));

Deno.test("postgres shared commit: a withdrawal waits for the commit that holds its entry, then finds it gone", () =>
  withStore(async (store, sql, url) => {
    const a = createItem("a");
    await store.commit([owned(a, "n1", 1)]);
    await sql`INSERT INTO orbit_inbox (node_id, execution_id, kind, payload, created_ms)
            VALUES ('n1', 'a', 'signal', '{}', 1)`;
    const [e] = (await sql`SELECT seq FROM orbit_inbox`).map((r) => Number(r.seq));
    // The execution's row locked elsewhere: the commit locks its entry (before it writes
    // anything), writes the events, then waits for the row.
    const blocker = postgres(url, { max: 1, onnotice: () => {} });
    const withdrawer = postgres(url, { max: 1, onnotice: () => {} });
    let release!: () => void;
    const released = new Promise<void>((r) => release = r);
    let locked!: () => void;
    const isLocked = new Promise<void>((r) => locked = r);
    const held = blocker.begin(async (tx) => {
      await tx`SELECT 1 FROM workflow_executions WHERE execution_id = 'a' FOR UPDATE`;
      locked();
      await released;
    });
    const waiting = async (n: number) => {
      const [w] = await sql`SELECT count(*)::int AS n FROM pg_locks WHERE NOT granted`;
      return w!.n >= n;
    };
    try {
      await isLocked;
      const commit = store.commit([owned(appendItem(a.row, 1), "n1", 1, { inbox: [e!] })]);
      await waitFor(() => waiting(1), "the commit to wait for the row", 10_000, 20);
      const withdraw = withdrawer`DELETE FROM orbit_inbox WHERE seq = ${e!} RETURNING seq`
        .execute();
      await waitFor(() => waiting(2), "the withdrawal to wait for the entry", 10_000, 20);
      release();
      await held;
      const r = await commit;
      assert.equal((r as CommitResult).lost?.size ?? 0, 0);
      assert.equal((await withdraw).length, 0, "the withdrawal finds the entry applied");
      assert.equal((await store.readHistory(a.row.run_id, 0, 10)).length, 2);
    } finally {
      release();
      await blocker.end({ timeout: 1 });
      await withdrawer.end({ timeout: 1 });
    }
  }));

Deno.test("postgres shared commit: a child is created only by its parent's owner at the parent's epoch", () =>
  withStore(async (store, sql) => {
    const root = createItem("r");
    await store.commit([owned(root, "n1", 1)]);
    // n2 took the tree over (n1 stopped heartbeating); n1 has not noticed yet.
    await sql`UPDATE orbit_owners SET node_id = 'n2', epoch = epoch + 1 WHERE root_id = 'r'`;
    const child = createItem("r/c", { root_id: "r", parent_id: "r" });
    const other = createItem("x");
    const r = await store.commit([owned(child, "n1", 1), owned(other, "n1", 1)]) as CommitResult;
    assert.deepEqual([...r.fenced!.keys()], ["r/c"]);
    assert.match(
      r.fenced!.get("r/c")!.message,
      /^fenced: child execution `r\/c` not created: its parent `r` is owned by node `n2` at epoch 2; this node held epoch 1$/,
    );
    assert.equal(await store.getExecution("r/c"), null);
    assert.deepEqual(await store.getExecution("x"), other.row);
    // The same node at an epoch it no longer holds (a restart under its id bumped them).
    const stale = await store.commit([owned(child, "n2", 1)]) as CommitResult;
    assert.deepEqual([...stale.fenced!.keys()], ["r/c"]);
    // The owner at its epoch: created, owned with its root.
    const ok = await store.commit([owned(child, "n2", 2)]) as CommitResult;
    assert.equal(ok.fenced?.size ?? 0, 0);
    const owners = await sql`SELECT execution_id, root_id, node_id, epoch::int FROM orbit_owners
      ORDER BY execution_id`;
    assert.deepEqual(owners.map((o) => [o.execution_id, o.root_id, o.node_id, o.epoch]), [
      ["r", "r", "n2", 2],
      ["r/c", "r", "n2", 2],
      ["x", "x", "n1", 1],
    ]);
  }));

Deno.test("postgres shared inbox: a node that lost an execution neither reads nor settles its entries", () =>
  withStore(async (store, sql) => {
    await store.commit([owned(createItem("a"), "n1", 1), owned(createItem("f"), "n1", 1)]);
    await sql`UPDATE orbit_owners SET node_id = 'n2', epoch = epoch + 1 WHERE root_id = 'a'`;
    await sql`INSERT INTO orbit_inbox (node_id, execution_id, kind, payload, created_ms)
            VALUES ('n2', 'a', 'signal', '{}', 1), ('n1', 'gone', 'signal', '{}', 1)`;
    const [ea, eg] = (await sql`SELECT seq FROM orbit_inbox ORDER BY seq`).map((r) =>
      Number(r.seq)
    );
    const read = (node: string) => sql.unsafe(READ_INBOX_OF, ["a", node]);
    assert.equal((await read("n1")).length, 0);
    assert.equal((await read("n2")).length, 1);
    const settle = (seq: number, id: string, node: string, epoch: number | null) =>
      sql.unsafe(SETTLE_INBOX, [seq, id, node, epoch]);
    assert.equal((await settle(ea!, "a", "n1", 1)).length, 0, "the old owner");
    assert.equal((await settle(ea!, "a", "n2", 1)).length, 0, "the owner at a stale epoch");
    assert.equal((await settle(ea!, "a", "n2", 2)).length, 1, "the owner at its epoch");
    // No ownership row (the execution finished): whoever answers it settles it.
    assert.equal((await settle(eg!, "gone", "n1", null)).length, 1);
  }));

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

function take(unit: string, token: string, claimed_ms = 5000) {
  return { unit, token, session_id: "s1", claimed_by: "n1", claimed_ms, head_ms: 200 };
}

Deno.test("postgres shared commit: a dispatch takes its queued row; a row claimed by another token, or younger than a waiting row by more than the head start, refuses that append alone", () =>
  withStore(async (store, sql) => {
    const [a, b, c, d] = ["a", "b", "c", "d"].map((id) => createItem(id));
    await store.commit([
      owned(a!, "n1", 1, { enqueue: [task("a", a!.row.run_id, "ua", 1000)] }),
      owned(b!, "n1", 1, { enqueue: [task("b", b!.row.run_id, "ub", 1000)] }),
      owned(c!, "n1", 1, { enqueue: [task("c", c!.row.run_id, "uc", 1000)] }),
      owned(d!, "n1", 1, { enqueue: [task("d", d!.row.run_id, "ud", 1100)] }),
    ]);
    // `b` was claimed by another server (token b/other); `c`'s claim statement gave it c/t1.
    await sql`UPDATE orbit_tasks SET state = 'claimed', token = 'b/other' WHERE unit = 'ub'`;
    await sql`UPDATE orbit_tasks SET state = 'claimed', token = 'c/t1' WHERE unit = 'uc'`;
    const r = await store.commit([
      owned(appendItem(a!.row, 1), "n1", 1, { take: [take("ua", "a/t1")] }),
      owned(appendItem(b!.row, 1), "n1", 1, { take: [take("ub", "b/t1")] }),
      owned(appendItem(c!.row, 1), "n1", 1, { take: [take("uc", "c/t1")] }),
    ]);
    assert.deepEqual([...r!.lost!.keys()], ["b"]);
    assert.equal(r!.lost!.get("b")!.name, "TaskTakenError");
    assert.deepEqual([...r!.fenced!.keys()], []);
    assert.equal((await store.readHistory(a!.row.run_id, 0, 10)).length, 2);
    assert.equal((await store.readHistory(b!.row.run_id, 0, 10)).length, 1);
    assert.equal((await store.readHistory(c!.row.run_id, 0, 10)).length, 2);
    const rows = async () =>
      (await sql`SELECT unit, state, token, session_id, claimed_by, claimed_ms FROM orbit_tasks
               ORDER BY unit`).map((t) => [t.unit, t.state, t.token, t.claimed_by]);
    assert.deepEqual(await rows(), [
      ["ua", "claimed", "a/t1", "n1"],
      ["ub", "claimed", "b/other", null],
      ["uc", "claimed", "c/t1", null],
      ["ud", "queued", null, null],
    ]);

    // A row of the same task queued more than the head start before `d`'s: the claim decides.
    const e = createItem("e");
    await store.commit([owned(e, "n1", 1, { enqueue: [task("e", e.row.run_id, "ue", 800)] })]);
    const refused = await store.commit([
      owned(appendItem(d!.row, 1), "n1", 1, { take: [take("ud", "d/t1")] }),
    ]);
    assert.deepEqual([...refused!.lost!.keys()], ["d"]);
    assert.equal((await store.readHistory(d!.row.run_id, 0, 10)).length, 1);
    // Within the head start it is taken.
    await sql`UPDATE orbit_tasks SET enqueued_ms = 950 WHERE unit = 'ue'`;
    const taken = await store.commit([
      owned(appendItem(d!.row, 1), "n1", 1, { take: [take("ud", "d/t1")] }),
    ]);
    assert.deepEqual([...taken!.lost!.keys()], []);
    assert.deepEqual((await rows()).find((t) => t[0] === "ud"), ["ud", "claimed", "d/t1", "n1"]);

    // Two takes of one execution in one statement could split: refused as a whole.
    const f = createItem("f");
    await store.commit([owned(f, "n1", 1, {
      enqueue: [task("f", f.row.run_id, "uf1", 5000), task("f", f.row.run_id, "uf2", 5000)],
    })]);
    await assert.rejects(
      store.commit([
        owned(appendItem(f.row, 1), "n1", 1, { take: [take("uf1", "f/t1"), take("uf2", "f/t2")] }),
      ]),
      /two task takes of execution f/,
    );
  }));

Deno.test("postgres shared commit: a take waits for a claim holding the row, then yields to it", async () => {
  const url = await (await sharedPostgres()).createDatabase();
  const store = await openPostgresStore(url);
  const other = postgres(url, { max: 1, onnotice: () => {} });
  const watch = postgres(url, { max: 1, onnotice: () => {} });
  try {
    await store.migrate();
    const a = createItem("a");
    await store.commit([owned(a, "n1", 1, { enqueue: [task("a", a.row.run_id, "ua", 1000)] })]);
    // Another server's claim has locked the row and not committed yet.
    let release!: () => void;
    const held = new Promise<void>((r) => release = r);
    let locked!: () => void;
    const isLocked = new Promise<void>((r) => locked = r);
    const claim = other.begin(async (tx) => {
      await tx`SELECT id FROM orbit_tasks WHERE unit = 'ua' FOR UPDATE`;
      await tx`UPDATE orbit_tasks SET state = 'claimed', token = 'a/other' WHERE unit = 'ua'`;
      locked();
      await held;
    });
    await isLocked;
    const commit = store.commit([
      owned(appendItem(a.row, 1), "n1", 1, { take: [take("ua", "a/t1")] }),
    ]);
    // The commit waits on the row lock (a lock not granted) until the claim commits.
    await waitFor(
      async () =>
        (await watch`SELECT count(*)::int AS n FROM pg_locks WHERE NOT granted`)[0]!.n > 0,
      "the commit waiting on the claim's row lock",
    );
    release();
    await claim;
    const r = await commit;
    assert.deepEqual([...r!.lost!.keys()], ["a"]);
    assert.equal((await store.readHistory(a.row.run_id, 0, 10)).length, 1);
    const [row] = await other`SELECT state, token FROM orbit_tasks WHERE unit = 'ua'`;
    assert.deepEqual([row!.state, row!.token], ["claimed", "a/other"]);
  } finally {
    await other.end();
    await watch.end();
    await store.close();
  }
});

/**
 * A migrated database and a client on a shared server's connection settings, with generic
 * plans forced (as a statement prepared once and run many times gets them) for `fn`.
 */
async function onSharedConnection(fn: (sql: postgres.Sql) => Promise<void>): Promise<void> {
  const url = await (await sharedPostgres()).createDatabase();
  const store = await openPostgresStore(url);
  const sql = postgresClient(url, {
    max: 1,
    applicationName: "orbit-test",
    settings: SHARED_CONNECTION_SETTINGS,
  });
  try {
    await store.migrate();
    await sql`SET plan_cache_mode = force_generic_plan`;
    await fn(sql);
  } finally {
    await sql.end();
    await store.close();
  }
}

/**
 * 5,000 claimed attempts (execution `x<i>`, unit `u<i>`, token `x<i>/t`) and 5,000 queued rows
 * (`q<i>`, unit `v<i>`) of task `t`.
 */
async function fillTasks(sql: postgres.Sql): Promise<void> {
  await sql`INSERT INTO orbit_tasks (execution_id, run_id, step, attempt, unit, task_name,
      contract_version, state, enqueued_ms, payload, token, session_id, claimed_by, claimed_ms)
    SELECT 'x' || i, 'r' || i, 's', 1, 'u' || i, 't', '1', 'claimed', 0, '{}', 'x' || i || '/t',
      's1', 'n1', 0 FROM generate_series(1, 5000) AS i`;
  await sql`INSERT INTO orbit_tasks (execution_id, run_id, step, attempt, unit, task_name,
      contract_version, state, enqueued_ms, payload)
    SELECT 'q' || i, 'r' || i, 's', 1, 'v' || i, 't', '1', 'queued', i, '{}'
    FROM generate_series(1, 5000) AS i`;
}

type PlanNode = Record<string, unknown>;

/** `EXPLAIN (FORMAT JSON, …) EXECUTE …`: the top entry and every plan node, flattened. */
async function explain(sql: postgres.Sql, execute: string, analyze = false) {
  const plan = await sql.unsafe(`EXPLAIN (${analyze ? "ANALYZE, " : ""}FORMAT JSON) ${execute}`);
  const top = (plan[0]!["QUERY PLAN"] as PlanNode[])[0]!;
  const nodes: PlanNode[] = [];
  const walk = (n: PlanNode) => {
    nodes.push(n);
    for (const c of (n["Plans"] as PlanNode[] | undefined) ?? []) walk(c);
  };
  walk(top.Plan as PlanNode);
  return { top, nodes };
}

/** Rows an analyzed plan read from `tables` (returned or filtered out, every loop). */
function rowsRead(nodes: PlanNode[], tables: string[]): number {
  return nodes
    .filter((n) => tables.includes(String(n["Relation Name"])))
    .reduce(
      (sum, n) =>
        sum + (Number(n["Actual Rows"] ?? 0) + Number(n["Rows Removed by Filter"] ?? 0)) *
          Number(n["Actual Loops"] ?? 1),
      0,
    );
}

Deno.test("postgres shared commit: a plan made while the tables were small still reads only the ownership and task rows it names", async () => {
  // The statement is prepared once per connection and its generic plan kept. Its parameters are
  // JSON arrays the planner guesses at 100 rows: joined with them, the plan read every claimed
  // attempt of orbit_tasks twice per commit, and all of orbit_owners when made while the table
  // was small (5.2 ms in the executor with 20,000 waiting executions owned, against 1.2 ms with
  // none); and a plan made while orbit_tasks was small read the whole churning table to delete
  // reported attempts (3.7 ms of a 4.6 ms commit after 2,400 orders). Looked up from arrays, on
  // the store connection's settings, it probes the indexes.
  await onSharedConnection(async (sql) => {
    await sql.unsafe(
      `PREPARE c (jsonb, jsonb, jsonb, jsonb, jsonb, jsonb, jsonb, jsonb) AS ${COMMIT_OWNED}`,
    );
    const a = createItem("a");
    const params = [
      [{ ...a.row, is_create: false, owner_node: "n1", owner_epoch: 1, wake_at_ms: 0 }],
      [],
      [],
      [{ execution_id: "a", unit: "u1" }],
      [{ execution_id: "a", token: "x2/t" }],
      [{ execution_id: "a", token: "x3/t" }],
      [],
      [{
        execution_id: "a",
        unit: "u4",
        token: "a/t",
        session_id: "s",
        claimed_by: "n1",
        claimed_ms: 0,
        head_ms: 200,
      }],
    ].map((p) => `'${JSON.stringify(p).replaceAll("'", "''")}'`).join(", ");
    await sql.unsafe(`EXECUTE c (${params})`); // the plan is made on empty tables and kept
    await sql`INSERT INTO orbit_owners (execution_id, root_id, node_id, epoch, since_ms)
      SELECT 'x' || i, 'x' || i, 'n1', 1, 0 FROM generate_series(1, 20000) AS i`;
    await fillTasks(sql);
    const { nodes } = await explain(sql, `EXECUTE c (${params})`, true);
    const scans = nodes.filter((n) => n["Node Type"] === "Seq Scan").map((n) =>
      String(n["Relation Name"])
    );
    assert.deepEqual(scans.filter((r) => r === "orbit_owners" || r === "orbit_tasks"), []);
    // Task rows are found by token and unit: through the claim index, filtered by state, the
    // plan read every claimed attempt (5,000 here) on every commit, with nothing to cancel,
    // and every queued row to find the units taken or gone.
    const read = rowsRead(nodes, ["orbit_tasks", "orbit_owners"]);
    assert.ok(read < 50, `the commit read ${read} task and ownership rows`);
  });
});

Deno.test("postgres shared claim: a plan made on an empty queue still reads only a window of a long one", async () => {
  // The claim statement is prepared once per connection and its generic plan kept; made while
  // nothing was queued, it sorted every queued row of a task to find the oldest and joined the
  // window with the whole backlog (6,067 rows read for one claim on a 3,000-row backlog) until
  // an ANALYZE replaced it.
  await onSharedConnection(async (sql) => {
    await sql.unsafe(
      `PREPARE claim (jsonb, bigint, text, text, text, bigint, bigint) AS ${claimTasks(64)}`,
    );
    const regs = JSON.stringify([{ task_name: "t", contract_version: "1", lang: "typescript" }]);
    const args = `'${regs}', 1, 'n1', 's1', 'w1', 1, 200`;
    assert.deepEqual([...await sql.unsafe(`EXECUTE claim (${args})`)], []); // the plan is made
    await sql`INSERT INTO orbit_owners (execution_id, root_id, node_id, epoch, since_ms)
      SELECT 'x' || i, 'x' || i, 'n1', 1, 0 FROM generate_series(1, 3000) AS i`;
    await sql`INSERT INTO orbit_tasks (execution_id, run_id, step, attempt, unit, task_name,
        contract_version, state, enqueued_ms, payload)
      SELECT 'x' || i, 'r' || i, 's', 1, 'u' || i, 't', '1', 'queued', i, '{}'
      FROM generate_series(1, 3000) AS i`;
    const { nodes } = await explain(sql, `EXECUTE claim (${args})`, true);
    const read = rowsRead(nodes, ["orbit_tasks", "orbit_owners"]);
    const [row] = await sql`SELECT execution_id FROM orbit_tasks WHERE state = 'claimed'`;
    assert.equal(row?.execution_id, "x1", "the claim took the oldest row");
    assert.ok(read < 500, `the claim read ${read} rows`);
  });
});

Deno.test("postgres shared takeover scan: with many executions owned by live nodes, the per-second look for dead owners reads nothing", async () => {
  // DEAD_ROOTS runs every second on every node. It filtered every ownership row (85–195 ms a
  // run with 200,000 executions owned by two live nodes), and a plan of a large estimate was
  // compiled by LLVM before it ran (384 ms, 0.1 ms of it executing).
  await onSharedConnection(async (sql) => {
    await sql`INSERT INTO orbit_nodes (node_id, addr, heartbeat_ms, started_ms, instance)
      VALUES ('a', '', 9e15, 0, 'i'), ('b', '', 9e15, 0, 'i'), ('c', '', 0, 0, 'i')`;
    await sql`INSERT INTO orbit_owners (execution_id, root_id, node_id, epoch, since_ms)
      SELECT 'x' || i, 'x' || i, CASE WHEN i % 2 = 0 THEN 'a' ELSE 'b' END, 1, 0
      FROM generate_series(1, 50000) AS i`;
    await sql`INSERT INTO orbit_owners (execution_id, root_id, node_id, epoch, since_ms)
      VALUES ('d1', 'd1', 'c', 1, 0), ('d2', 'd2', 'c', 1, 0)`;
    await sql`ANALYZE orbit_owners`;
    await sql.unsafe(`PREPARE dead (text, bigint) AS ${DEAD_ROOTS}`);
    const { top, nodes } = await explain(sql, `EXECUTE dead ('a', 3000)`, true);
    const read = rowsRead(nodes, ["orbit_owners"]);
    assert.equal(top.JIT, undefined, "no JIT compilation");
    assert.ok(read < 100, `read ${read} ownership rows`);
    const roots = await sql.unsafe(`EXECUTE dead ('a', 3000)`);
    assert.deepEqual(roots.map((r) => [r.root_id, r.node_id]), [["d1", "c"], ["d2", "c"]]);
  });
});

Deno.test("postgres shared heartbeats: the statements that confirm, look up and report attempts read only the rows they name", async () => {
  // Every worker heartbeat confirms its attempts, owners read when their attempts were last
  // confirmed, and sessions take their cancel notices: each on a plan kept from when the tables
  // were small, with thousands of attempts claimed and queued.
  await onSharedConnection(async (sql) => {
    const statements: Array<[string, string, string]> = [
      ["confirm", `(jsonb, bigint) AS ${CONFIRM_TOKENS}`, `'["x1/t", "x2/t"]', 5`],
      ["confirmed", `(jsonb) AS ${CONFIRMED_AT}`, `'["x1/t", "x2/t"]'`],
      ["known", `(jsonb) AS ${KNOWN_TOKENS}`, `'["x1/t", "x2/t"]'`],
      ["tasks", `(jsonb) AS ${TASKS_OF}`, `'["x1", "q1"]'`],
      ["cancelled", `(text, jsonb) AS ${TAKE_CANCELLED}`, `'s2', '["x1/t", "x2/t"]'`],
    ];
    for (const [name, text, args] of statements) {
      await sql.unsafe(`PREPARE ${name} ${text}`);
      await sql.unsafe(`EXECUTE ${name} (${args})`);
    }
    await fillTasks(sql);
    for (const [name, , args] of statements) {
      const { nodes } = await explain(sql, `EXECUTE ${name} (${args})`, true);
      const read = rowsRead(nodes, ["orbit_tasks"]);
      assert.ok(read <= 2, `${name} read ${read} task rows`);
    }
  });
});

Deno.test("postgres shared inbox and node list: with many executions owned, reads touch the entries and nodes, not the ownership rows", async () => {
  // The owner reads its inbox every few milliseconds while entries arrive; /v1/ready and
  // /v1/health list the nodes with their owned counts. Joined with or counted from
  // orbit_owners, each read every ownership row of the node (7.9 ms an inbox read, 3.7 ms a
  // node list with 20,000 owned).
  await onSharedConnection(async (sql) => {
    // The plans are made while the tables are empty, and kept.
    await sql.unsafe(`PREPARE inbox (text, integer) AS ${READ_INBOX}`);
    await sql.unsafe(`PREPARE orphans (integer, bigint) AS ${ORPHAN_INBOX}`);
    await sql.unsafe(`PREPARE nodes (bigint) AS ${LIST_NODES}`);
    for (const e of ["inbox ('n1', 100)", "orphans (100, 1)", "nodes (3000)"]) {
      await sql.unsafe(`EXECUTE ${e}`);
    }
    await sql`INSERT INTO orbit_nodes (node_id, addr, heartbeat_ms, started_ms, instance, owned)
      VALUES ('n1', '', 9e15, 0, 'i', 20000), ('n2', '', 9e15, 0, 'i', 1),
        ('n3', '', 0, 0, 'i', 7), ('n4', '', 9e15, 0, 'i', NULL)`;
    await sql`INSERT INTO orbit_owners (execution_id, root_id, node_id, epoch, since_ms)
      SELECT 'x' || i, 'x' || i, 'n1', 1, 0 FROM generate_series(1, 20000) AS i`;
    await sql`INSERT INTO orbit_owners (execution_id, root_id, node_id, epoch, since_ms)
      VALUES ('y1', 'y1', 'n2', 1, 0), ('z1', 'z1', 'n3', 1, 0), ('z2', 'z2', 'n3', 1, 0),
        ('w1', 'w1', 'n4', 1, 0)`;
    await sql`INSERT INTO orbit_inbox (node_id, execution_id, kind, payload, created_ms)
      VALUES ('n1', 'x7', 'signal', '{}', 0), ('n1', 'y1', 'signal', '{}', 0),
        ('n1', 'gone', 'signal', '{}', 0)`;
    for (
      const [execute, answer] of [
        ["EXECUTE inbox ('n1', 100)", ["x7"]],
        ["EXECUTE orphans (100, 1)", ["gone"]],
      ] as const
    ) {
      const { nodes } = await explain(sql, execute, true);
      const read = rowsRead(nodes, ["orbit_owners"]);
      assert.ok(read <= 3, `${execute} read ${read} ownership rows`);
      assert.deepEqual((await sql.unsafe(execute)).map((r) => r.execution_id), answer);
    }
    const { nodes } = await explain(sql, "EXECUTE nodes (3000)", true);
    const read = rowsRead(nodes, ["orbit_owners"]);
    assert.ok(read < 10, `the node list read ${read} ownership rows`);
    // Live nodes answer what their heartbeat wrote; a dead one, or one that has not written
    // its count since it joined, is counted.
    const list = await sql.unsafe("EXECUTE nodes (3000)");
    assert.deepEqual(list.map((n) => [n.node_id, Number(n.owned)]), [
      ["n1", 20000],
      ["n2", 1],
      ["n3", 2],
      ["n4", 1],
    ]);
  });
});

Deno.test("postgres shared takeover: an execution's attempts are found by their tokens, not those of ids it prefixes", async () => {
  // TASKS_OF reads a range of the token index (`<execution id>/…`): execution `e1` must not get
  // the attempts of `e10` or of `e1/b` (whose tokens also begin with `e1`), and a queued row
  // (no token yet) is not an attempt.
  await onSharedConnection(async (sql) => {
    await sql`INSERT INTO orbit_tasks (execution_id, run_id, step, attempt, unit, task_name,
        contract_version, state, enqueued_ms, payload, token, claimed_by)
      VALUES ('e1', 'r1', 's', 1, 'r1/s/1/0', 't', '1', 'claimed', 1, '{}', 'e1/u1', 'n1'),
        ('e1', 'r1', 'q', 1, 'r1/q/1/0', 't', '1', 'queued', 1, '{}', NULL, NULL),
        ('e1', 'r1', 'c', 1, 'r1/c/1/0', 't', '1', 'cancelled', 1, '{}', 'e1/u4', 'n1'),
        ('e1/b', 'r2', 's', 1, 'r2/s/1/0', 't', '1', 'claimed', 1, '{}', 'e1/b/u2', 'n1'),
        ('e10', 'r3', 's', 1, 'r3/s/1/0', 't', '1', 'claimed', 1, '{}', 'e10/u3', 'n2')`;
    const of = async (ids: string[]) =>
      (await sql.unsafe(TASKS_OF, [sql.json(ids)])).map((r) =>
        `${r.execution_id} ${r.token} ${r.state} ${r.claimed_by}`
      ).sort();
    assert.deepEqual(await of(["e1"]), ["e1 e1/u1 claimed n1", "e1 e1/u4 cancelled n1"]);
    assert.deepEqual(await of(["e1/b", "e10"]), [
      "e1/b e1/b/u2 claimed n1",
      "e10 e10/u3 claimed n2",
    ]);
    assert.deepEqual(await of(["e2"]), []);
  });
});
