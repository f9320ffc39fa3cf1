/**
 * Shared mode, a restart under the same node id (in process, on a real PostgreSQL): the new
 * process bumps the epochs of what the node owns, which fences the old one. The old process
 * (paused past the node timeout, then resumed, and not yet told by its heartbeat that it was
 * replaced) must not come back through orbit_owners: that row names its node id at the new
 * epoch, but the epoch belongs to the new process.
 *
 * The pause is modelled by its two effects: the new process's join is written into the
 * node's row (what NODE_JOIN does once the old heartbeat is older than the node timeout), and
 * the old process's heartbeats look failed to it (a paused process has not run its next one).
 */
import assert from "node:assert/strict";
import postgres from "postgres";
import { postgresClient } from "../lib/store/postgres.ts";
import {
  BUMP_OWN_EPOCHS,
  NODE_HEARTBEAT,
  OWNED_AMONG,
  RECLAIM,
  RECLAIM_ROOTS,
  SHARED_CONNECTION_SETTINGS,
  STALE_ROOTS,
  TAKE_OVER,
} from "../sql/postgres/shared/mod.ts";
import { migratedDatabase, sharedPostgres } from "../tests/support/pg.ts";
import { WAITER_WORKFLOW } from "../tests/support/orders.ts";
import { deployAndStart, inProcessNode, startedNode } from "../tests/support/in_process_node.ts";
import { waitFor } from "../tests/support/server.ts";

Deno.test({
  name: "shared: a process replaced under its node id applies nothing more; the signal is " +
    "applied once, by the new process",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const url = await (await sharedPostgres()).createDatabase();
    // Long enough that the old process's gate stays open (it last heartbeated before the pause).
    const nodeTimeoutMs = 30_000;
    let paused = false;
    const fatal: string[] = [];
    const old = await startedNode(url, "node-x", {
      nodeTimeoutMs,
      afterStatement: (text) => {
        if (paused && text === NODE_HEARTBEAT) throw new Error("paused: heartbeat not written");
      },
      onFatal: (m) => fatal.push(m),
    });
    const fresh = inProcessNode(url, "node-x", { nodeTimeoutMs, onFatal: (m) => fatal.push(m) });
    const sql = postgres(url, { max: 1, onnotice: () => {} });
    try {
      await deployAndStart(old, [WAITER_WORKFLOW], {
        workflow: "Waiter",
        execution_id: "same-1",
        input: {},
      });

      // The old process pauses; the new one joins under the same id and resumes (epoch 2).
      paused = true;
      await sql`UPDATE orbit_nodes SET instance = ${fresh.n.instance} WHERE node_id = 'node-x'`;
      await fresh.n.open();
      await fresh.n.start(null);
      const [own] = await sql`SELECT epoch FROM orbit_owners WHERE execution_id = 'same-1'`;
      assert.equal(Number(own!.epoch), 2);

      // The old process resumes. Its first append is fenced (it held epoch 1) and it drops the
      // execution; the next signal must not load it again at the new process's epoch.
      const first = await old.call("POST", "/v1/executions/same-1/signals/go", {
        payload: "old-1",
      });
      assert.notEqual(first.status, 200, JSON.stringify(first.body));
      const second = await old.call("POST", "/v1/executions/same-1/signals/go", {
        payload: "old-2",
      });
      assert.equal(second.status, 503, JSON.stringify(second.body));
      assert.equal(second.body.error.code, "NODE_REPLACED");
      // Nor through an inbox entry (its owner loads it first) or a timer's wake-up.
      assert.equal(await old.n.runtime.executions.loadOwned("same-1"), false);

      const mine = await fresh.call("POST", "/v1/executions/same-1/signals/go", { payload: "new" });
      assert.equal(mine.status, 200, JSON.stringify(mine.body));
      const done = await waitFor(async () => {
        const r = await fresh.call("GET", "/v1/executions/same-1");
        return r.body.status === "completed" ? r.body : null;
      }, "same-1 completed");
      assert.equal(done.output, "new");
      const history = await sql<{ type: string; data: { payload?: unknown } }[]>`
        SELECT type, data FROM execution_events WHERE execution_id = 'same-1' ORDER BY seq`;
      const signals = history.filter((e) => e.type === "SignalReceived");
      assert.deepEqual(signals.map((e) => e.data.payload), ["new"]);

      // Starts the old process commits before it can tell (in flight, or before its
      // heartbeat) are its own: the new process takes the trees back, when a command reaches
      // one or, at the latest, within its next maintenance tick (one nothing reaches).
      for (const id of ["same-late", "same-quiet"]) {
        const late = await old.call("POST", "/v1/executions", {
          workflow: "Waiter",
          execution_id: id,
          input: {},
        });
        assert.equal(late.status, 201, JSON.stringify(late.body));
      }
      const back = await fresh.call("POST", "/v1/executions/same-late/signals/go", {
        payload: "taken back",
      });
      assert.equal(back.status, 200, JSON.stringify(back.body));
      const stale = await old.call("POST", "/v1/executions/same-late/signals/go", {
        payload: "stale",
      });
      assert.notEqual(stale.status, 200, JSON.stringify(stale.body));
      const lateDone = await waitFor(async () => {
        const r = await fresh.call("GET", "/v1/executions/same-late");
        return r.body.status === "completed" ? r.body : null;
      }, "same-late completed");
      assert.equal(lateDone.output, "taken back");
      await waitFor(async () => {
        const [o] = await sql`SELECT instance FROM orbit_owners WHERE execution_id = 'same-quiet'`;
        return o?.instance === fresh.n.instance && fresh.n.runtime.executions.holds("same-quiet");
      }, "same-quiet taken back and loaded by the new process");

      // Once its heartbeat runs, the old process finds another instance on its row and stops
      // serving: writes answer 503 from then on.
      paused = false;
      await waitFor(() => !old.n.serving() && fatal.length > 0, "the old process stops");
      const after = await old.call("POST", "/v1/executions", {
        workflow: "Waiter",
        execution_id: "same-2",
        input: {},
      });
      assert.equal(after.status, 503, JSON.stringify(after.body));
      assert.equal(after.body.error.code, "NODE_REPLACED");
      assert.ok(fresh.n.serving());
    } finally {
      await sql.end({ timeout: 1 });
      await fresh.n.stop();
      await old.n.abort();
    }
  },
});

Deno.test(
  "shared ownership statements: a replaced process takes, bumps and takes back nothing; " +
    "the process on the node's row takes back what the replaced one created",
  async () => {
    const url = await migratedDatabase();
    const sql = postgres(url, { max: 1, onnotice: () => {} });
    try {
      // node-x is process "new" now; "old" was replaced. node-d is dead, with one tree.
      await sql`INSERT INTO orbit_nodes (node_id, addr, heartbeat_ms, started_ms, instance)
      VALUES ('node-x', NULL, 1, 1, 'new'), ('node-d', NULL, 0, 0, 'dead')`;
      await sql`INSERT INTO orbit_owners (execution_id, root_id, node_id, epoch, since_ms, instance)
      VALUES ('d-1', 'd-1', 'node-d', 1, 0, 'dead'), ('late', 'late', 'node-x', 1, 0, 'old'),
        ('late/c', 'late', 'node-x', 1, 0, 'old')`;
      const rows = (r: Iterable<Record<string, unknown>>) =>
        [...r].map((x) => `${x.execution_id}@${x.epoch}`).sort();

      assert.deepEqual(
        rows(await sql.unsafe(TAKE_OVER, ["node-x", ["d-1"], "node-d", 5, "old"])),
        [],
      );
      assert.deepEqual(rows(await sql.unsafe(BUMP_OWN_EPOCHS, ["node-x", 5, "old"])), []);
      assert.deepEqual(rows(await sql.unsafe(RECLAIM, ["node-x", "late", "old", 5])), []);
      assert.deepEqual(
        rows(await sql.unsafe(RECLAIM_ROOTS, ["node-x", ["late"], "old", 5])),
        [],
      );
      // Rows of another instance, whether it sorts before or after this one's; none of its own.
      for (const me of ["new", "a", "z", "old"]) {
        assert.deepEqual(
          [...await sql.unsafe(STALE_ROOTS, ["node-x", me])].map((r) => r.root_id),
          me === "old" ? [] : ["late"],
        );
      }

      assert.deepEqual(rows(await sql.unsafe(RECLAIM, ["node-x", "late/c", "new", 5])), [
        "late/c@2",
        "late@2",
      ]);
      assert.deepEqual(rows(await sql.unsafe(TAKE_OVER, ["node-x", ["d-1"], "node-d", 5, "new"])), [
        "d-1@2",
      ]);
      const owners = await sql`SELECT execution_id, node_id, epoch, instance FROM orbit_owners
      ORDER BY execution_id`;
      assert.deepEqual(
        owners.map((o) => `${o.execution_id} ${o.node_id}@${o.epoch} ${o.instance}`),
        ["d-1 node-x@2 new", "late node-x@2 new", "late/c node-x@2 new"],
      );
      // What the old process reads as its own: nothing.
      assert.deepEqual([...await sql.unsafe(OWNED_AMONG, ["node-x", ["d-1", "late"], "old"])], []);
    } finally {
      await sql.end({ timeout: 1 });
    }
  },
);

Deno.test(
  "shared ownership statements: the per-second look for rows of a replaced process " +
    "reads none of this process's own",
  async () => {
    // STALE_ROOTS runs every second on every node; a generic plan made while orbit_owners was
    // empty must still find the other instances' rows through index conditions alone.
    const url = await migratedDatabase();
    const sql = postgresClient(url, {
      max: 1,
      applicationName: "orbit-test",
      settings: SHARED_CONNECTION_SETTINGS,
    });
    try {
      await sql`SET plan_cache_mode = force_generic_plan`;
      await sql.unsafe(`PREPARE stale (text, text) AS ${STALE_ROOTS}`);
      assert.deepEqual([...await sql.unsafe(`EXECUTE stale ('node-x', 'new')`)], []);
      await sql`INSERT INTO orbit_owners (execution_id, root_id, node_id, epoch, since_ms, instance)
      SELECT 'x' || i, 'x' || i, 'node-x', 1, 0, 'new' FROM generate_series(1, 5000) AS i`;
      await sql`INSERT INTO orbit_owners (execution_id, root_id, node_id, epoch, since_ms, instance)
      VALUES ('late', 'late', 'node-x', 1, 0, 'old')`;
      const [plan] = await sql.unsafe(
        `EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE stale ('node-x', 'new')`,
      );
      let read = 0;
      const walk = (n: Record<string, unknown>) => {
        if (n["Relation Name"] === "orbit_owners") {
          read += (Number(n["Actual Rows"] ?? 0) + Number(n["Rows Removed by Filter"] ?? 0)) *
            Number(n["Actual Loops"] ?? 1);
        }
        for (const c of (n["Plans"] as Record<string, unknown>[] | undefined) ?? []) walk(c);
      };
      walk((plan!["QUERY PLAN"] as { Plan: Record<string, unknown> }[])[0]!.Plan);
      assert.equal(read, 1, "rows of orbit_owners read");
    } finally {
      await sql.end({ timeout: 1 });
    }
  },
);

Deno.test({
  name: "shared: schedule claims name the process, so a process replaced under its node id " +
    "and its successor never take each other's claims for their own",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const url = await migratedDatabase();
    const a = await startedNode(url, "node-s");
    try {
      assert.equal(a.n.runtime.scheduler.owner, `node-s/${a.n.instance}`);
    } finally {
      await a.n.stop();
    }
  },
});
