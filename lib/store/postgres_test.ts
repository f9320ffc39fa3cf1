import assert from "node:assert/strict";
import postgres from "postgres";
import { sharedPostgres } from "../../tests/support/pg.ts";
import { isTransientPostgresError, openPostgresStore } from "./postgres.ts";
import { READ_CLUSTER } from "../../sql/postgres/cluster.ts";
import { FencedError, type Store } from "./store.ts";
import { startFaultProxy } from "../../chaos/fault_proxy.ts";
import { appendItem, createItem, runStoreConformance } from "./conformance/suite.ts";

const urls = new WeakMap<Store, string>();

async function open(url?: string): Promise<Store> {
  url ??= await (await sharedPostgres()).createDatabase();
  const store = await openPostgresStore(url);
  urls.set(store, url);
  return store;
}

runStoreConformance("postgres", () => open(), { reopen: (store) => open(urls.get(store)) });

/** A plain client for what only a test does (moving the term, watching locks). */
function client(url: string) {
  return postgres(url, { max: 1, onnotice: () => {} });
}

Deno.test("postgres store: the fence rejects a commit after the term moves, writing nothing", async () => {
  const url = await (await sharedPostgres()).createDatabase();
  let term: number | null = 0;
  const store = await openPostgresStore(url, { fence: () => term });
  const sql = client(url);
  try {
    await store.migrate();
    const a = createItem("a");
    await store.commit([a]);

    await sql`UPDATE orbit_cluster SET term = 1 WHERE id = 1`;
    await assert.rejects(store.commit([appendItem(a.row, 2), createItem("b")]), {
      name: "FencedError",
      message:
        "fenced: this server led term 0, but the cluster is at term 1; another server is the leader",
    });
    assert.equal(await store.getExecution("b"), null);
    assert.deepEqual(await store.getExecution("a"), a.row);
    assert.deepEqual(await store.readHistory(a.row.run_id, 0, 10), a.events);

    term = 1;
    await store.commit([createItem("b")]);
    term = null; // no fence: a single server writes whatever the term
    await store.commit([createItem("c")]);
    assert.equal((await store.getExecution("c"))?.execution_id, "c");
  } finally {
    await sql.end();
    await store.close();
  }
});

Deno.test("postgres store: a commit waiting on a term bump sees the new term", async () => {
  const url = await (await sharedPostgres()).createDatabase();
  const store = await openPostgresStore(url, { fence: () => 0 });
  const leader = client(url);
  const watcher = client(url);
  try {
    await store.migrate();
    let outcome: Promise<unknown> = Promise.resolve();
    await leader.begin(async (tx) => {
      // A new leader is half-way through its bump: the commit's FOR SHARE must wait for it.
      await tx`SELECT term FROM orbit_cluster WHERE id = 1 FOR UPDATE`;
      outcome = store.commit([createItem("late")]).then(() => null, (e) => e);
      const deadline = Date.now() + 10_000;
      for (;;) {
        const [row] = await watcher`SELECT count(*)::int AS n FROM pg_stat_activity
          WHERE datname = current_database() AND wait_event_type = 'Lock'`;
        if (row?.n > 0) break;
        assert.ok(Date.now() < deadline, "the commit never waited for the cluster row");
        await new Promise((r) => setTimeout(r, 20));
      }
      await tx`UPDATE orbit_cluster SET term = 2 WHERE id = 1`;
    });
    const error = await outcome;
    assert.ok(error instanceof FencedError, `expected FencedError, got ${error}`);
    assert.equal(await store.getExecution("late"), null);
  } finally {
    await leader.end();
    await watcher.end();
    await store.close();
  }
});

Deno.test("postgres store: commits work again soon after a server restart", async () => {
  const pg = await sharedPostgres();
  const store = await open();
  try {
    await store.migrate();
    const a = createItem("a");
    await store.commit([a]);
    await pg.restart();
    const next = appendItem(a.row, 1);
    const deadline = Date.now() + 10_000;
    for (;;) {
      try {
        await store.commit([next]);
        break;
      } catch (e) {
        assert.ok(isTransientPostgresError(e), `not a transient error: ${e}`);
        assert.ok(Date.now() < deadline, `still failing after the restart: ${e}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    }
    assert.deepEqual(await store.getExecution("a"), next.row);
    assert.equal((await store.readHistory(a.row.run_id, 0, 10)).length, 2);
  } finally {
    await store.close();
  }
});

Deno.test("postgres store: a U+0000 in a value fails the commit clearly and writes nothing", async () => {
  const store = await open();
  try {
    await store.migrate();
    await assert.rejects(
      store.commit([createItem("ok"), createItem("nul", { input: "a\u0000b" })]),
      {
        message: /U\+0000/,
      },
    );
    assert.equal(await store.getExecution("ok"), null);
  } finally {
    await store.close();
  }
});

Deno.test({
  name: "postgres store: a statement without an answer (a black-holed link) fails after the " +
    "stuck limit, and the store works again through new connections",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const url = new URL(await (await sharedPostgres()).createDatabase());
    const proxy = startFaultProxy({ hostname: url.hostname, port: Number(url.port) });
    const via = new URL(url);
    via.port = String(proxy.port);
    const store = await openPostgresStore(via.href, { max: 1, stuckMs: 1000 });
    try {
      await store.migrate();
      assert.equal(await store.getExecution("nope"), null);
      // The link swallows everything from now on, without a FIN or a reset: postgres.js waits
      // for an answer forever.
      proxy.blackhole();
      const t0 = performance.now();
      const outcome = await Promise.race([
        store.getExecution("nope").then(() => "answered", (e) => e),
        new Promise((r) => setTimeout(() => r("still waiting after 10 s"), 10_000)),
      ]);
      assert.ok(outcome instanceof Error, String(outcome));
      assert.equal((outcome as { code?: string }).code, "CONNECTION_DESTROYED");
      assert.ok(isTransientPostgresError(outcome), "a commit failing so is an ambiguous one");
      const waited = performance.now() - t0;
      assert.ok(waited >= 1000 && waited < 5000, `failed after ${Math.round(waited)} ms`);
      // The link works again: the replaced client's new connection answers.
      proxy.heal();
      assert.equal(await store.getExecution("nope"), null);
    } finally {
      proxy.heal();
      await store.close();
      await proxy.close();
    }
  },
});

/** The names of `table`'s indexes, sorted. */
async function indexNames(sql: postgres.Sql, table: string): Promise<string[]> {
  return (await sql`SELECT indexname FROM pg_indexes WHERE tablename = ${table}
                    ORDER BY indexname`).map((r) => r.indexname);
}

Deno.test("postgres store: events are indexed by their key only, and a history read uses it", async () => {
  // Migration 7 dropped execution_events_execution_idx (one B-tree insert per event that no
  // query used), from a database made before it too.
  const url = await (await sharedPostgres()).createDatabase();
  const store = await openPostgresStore(url);
  const sql = client(url);
  try {
    await store.migrate();
    const indexes = () => indexNames(sql, "execution_events");
    assert.deepEqual(await indexes(), ["execution_events_pkey"]);

    // A database at version 6 still has the index: migrating removes it.
    await sql`CREATE INDEX execution_events_execution_idx ON execution_events (execution_id)`;
    await sql`DELETE FROM orbit_migrations WHERE version = 7`;
    await store.migrate();
    assert.deepEqual(await indexes(), ["execution_events_pkey"]);

    const a = createItem("a");
    await store.commit([a]);
    assert.deepEqual(await store.readHistory(a.row.run_id, 0, 10), a.events);
    await sql`SET enable_seqscan = off`;
    const plan = (await sql.unsafe(
      `EXPLAIN SELECT data FROM execution_events WHERE run_id = 'r' AND seq > 0 ORDER BY seq LIMIT 10`,
    )).map((r) => String(r["QUERY PLAN"])).join("\n");
    assert.match(plan, /execution_events_pkey/);
  } finally {
    await sql.end();
    await store.close();
  }
});

Deno.test("postgres store: migration 9 leaves orbit_tasks with the unit, token, claim and cancel indexes, rows kept", async () => {
  // From a database made before it (version 8: a primary key on id and an index on
  // execution_id, token in the database's collation), with attempts queued and claimed.
  const url = await (await sharedPostgres()).createDatabase();
  const store = await openPostgresStore(url);
  const sql = client(url);
  try {
    await store.migrate();
    const indexes = () => indexNames(sql, "orbit_tasks");
    const after = [
      "orbit_tasks_cancelled_idx",
      "orbit_tasks_claim_idx",
      "orbit_tasks_token_idx",
      "orbit_tasks_unit_idx",
    ];
    assert.deepEqual(await indexes(), after);

    await sql`ALTER TABLE orbit_tasks ADD PRIMARY KEY (id)`;
    await sql`CREATE INDEX orbit_tasks_execution_idx ON orbit_tasks (execution_id)`;
    await sql`ALTER TABLE orbit_tasks ALTER COLUMN token TYPE text COLLATE "default"`;
    await sql`DELETE FROM orbit_migrations WHERE version = 9`;
    await sql`INSERT INTO orbit_tasks (execution_id, run_id, step, attempt, unit, task_name,
        contract_version, state, enqueued_ms, payload, token)
      VALUES ('e1', 'r1', 's', 1, 'r1/s/1/0', 't', '1', 'claimed', 1, '{}', 'e1/u1'),
        ('e1', 'r1', 'q', 1, 'r1/q/1/0', 't', '1', 'queued', 2, '{}', NULL)`;
    assert.equal((await indexes()).length, 6);
    await store.migrate();
    assert.deepEqual(await indexes(), after);
    const [col] = await sql`SELECT collation_name FROM information_schema.columns
      WHERE table_name = 'orbit_tasks' AND column_name = 'token'`;
    assert.equal(col?.collation_name, "C");
    const rows = await sql`SELECT unit, state, token FROM orbit_tasks ORDER BY id`;
    assert.deepEqual(rows.map((r) => [r.unit, r.state, r.token]), [
      ["r1/s/1/0", "claimed", "e1/u1"],
      ["r1/q/1/0", "queued", null],
    ]);
  } finally {
    await sql.end();
    await store.close();
  }
});

Deno.test("postgres store: migration 10 adds the gRPC address columns; rows from before it keep theirs and name no gRPC address", async () => {
  const url = await (await sharedPostgres()).createDatabase();
  const store = await openPostgresStore(url);
  const sql = client(url);
  try {
    await store.migrate();
    const columns = async (table: string) =>
      (await sql`SELECT column_name FROM information_schema.columns WHERE table_name = ${table}
                 ORDER BY column_name`).map((r) => r.column_name as string);
    assert.ok((await columns("orbit_cluster")).includes("leader_grpc_addr"));
    assert.ok((await columns("orbit_cluster")).includes("leader_grpc_term"));
    assert.ok((await columns("orbit_nodes")).includes("grpc_addr"));

    // A database at version 9, with a leader of record and a shared-mode node row.
    await sql`ALTER TABLE orbit_cluster DROP COLUMN leader_grpc_addr, DROP COLUMN leader_grpc_term`;
    await sql`ALTER TABLE orbit_nodes DROP COLUMN grpc_addr`;
    await sql`DELETE FROM orbit_migrations WHERE version = 10`;
    await sql`UPDATE orbit_cluster SET term = 7, leader_node = 'a', leader_addr = 'http://a:7233',
      since_ms = 1 WHERE id = 1`;
    await sql`INSERT INTO orbit_nodes (node_id, addr, heartbeat_ms, started_ms, instance)
      VALUES ('n1', 'http://n1:7233', 1, 1, 'i1')`;
    await store.migrate();

    const [leader] = await sql.unsafe(READ_CLUSTER);
    assert.deepEqual({ ...leader }, {
      term: "7",
      leader_node: "a",
      leader_addr: "http://a:7233",
      since_ms: "1",
      leader_grpc_addr: null,
    });
    const [node] = await sql`SELECT node_id, addr, grpc_addr FROM orbit_nodes`;
    assert.deepEqual({ ...node }, { node_id: "n1", addr: "http://n1:7233", grpc_addr: null });
  } finally {
    await sql.end();
    await store.close();
  }
});
