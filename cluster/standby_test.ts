import assert from "node:assert/strict";
import postgres from "postgres";
import { Elector } from "./standby.ts";
import { ELECTION_LOCK_KEY } from "../sql/postgres/cluster.ts";
import { sharedPostgres } from "../tests/support/pg.ts";
import { openPostgresStore } from "../lib/store/postgres.ts";
import { waitFor } from "../tests/support/server.ts";

async function freshDb(): Promise<string> {
  const url = await (await sharedPostgres()).createDatabase();
  const store = await openPostgresStore(url);
  await store.migrate();
  await store.close();
  return url;
}

function elector(url: string, nodeId: string, events: string[], grpc: string | null = null) {
  return new Elector({
    url,
    nodeId,
    advertiseAddr: `http://${nodeId}.test:7233`,
    grpcAdvertiseAddr: grpc,
    onElected: (term) => {
      events.push(`${nodeId} elected ${term}`);
      return Promise.resolve();
    },
    onLost: (reason) => {
      events.push(`${nodeId} lost: ${reason}`);
    },
  });
}

Deno.test({
  name:
    "Elector: one leader; a leader whose session is cut takes its lock back at its term; a moved term steps it down; a leader that leaves is replaced",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const url = await freshDb();
    const events: string[] = [];
    const a = elector(url, "a", events);
    const b = elector(url, "b", events);
    const admin = postgres(url, { max: 1, onnotice: () => {} });
    try {
      a.start();
      await waitFor(() => a.serving(), "a to lead");
      assert.equal(a.term, 1);
      b.start();
      await waitFor(() => b.leader?.node_id === "a", "b to follow a");
      assert.equal(b.role, "standby");
      assert.equal(b.term, 1);
      const sessions =
        await admin`SELECT application_name FROM pg_stat_activity WHERE application_name LIKE 'orbit-cluster:%' ORDER BY 1`;
      assert.deepEqual(sessions.map((r) => r.application_name), [
        "orbit-cluster:a",
        "orbit-cluster:b",
      ]);

      // The leader only loses its connection (issue 36: a proxy or pgbouncer cutting it): it
      // takes its lock back at the same term and goes on, no election, no recovery; the
      // standby leaves it that chance.
      const [session] =
        await admin`SELECT pid FROM pg_stat_activity WHERE application_name = 'orbit-cluster:a'`;
      const pid = session!.pid;
      await admin`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'orbit-cluster:a'`;
      await waitFor(
        async () => {
          const [r] = await admin`SELECT l.pid FROM pg_locks l JOIN pg_stat_activity s USING (pid)
          WHERE l.locktype = 'advisory' AND l.granted AND s.application_name = 'orbit-cluster:a'`;
          return r !== undefined && r.pid !== pid;
        },
        "a to hold the lock again on a new session",
        10_000,
      );
      await waitFor(() => a.serving(), "a to serve again");
      assert.equal(a.term, 1);
      assert.equal(b.role, "standby");
      assert.deepEqual(events, ["a elected 1"]);
      const [kept] = await admin`SELECT term, leader_node FROM orbit_cluster WHERE id = 1`;
      assert.equal(Number(kept!.term), 1);

      // Another election (the term moved on) is a real loss: a steps down and follows.
      await admin`UPDATE orbit_cluster SET term = term + 1, leader_node = 'x' WHERE id = 1`;
      await waitFor(() => events.some((e) => e.startsWith("a lost: ")), "a to report the loss");
      assert.match(events.find((e) => e.startsWith("a lost: "))!, /the term moved on to 2/);
      assert.equal(a.serving(), false);

      // Whoever is elected next bumps the term again; then the leader leaves for good, and the
      // other one takes over.
      await waitFor(() => a.serving() || b.serving(), "a leader at term 3", 20_000);
      const [first, second] = a.serving() ? [a, b] : [b, a];
      assert.equal(first.term, 3);
      const t0 = Date.now();
      await first.stop();
      await waitFor(() => second.serving(), "the other to take over", 20_000);
      console.log(`failover after the leader left: ${Date.now() - t0} ms`);
      assert.equal(second.term, 4);
      const [row] = await admin`SELECT term, leader_node FROM orbit_cluster WHERE id = 1`;
      assert.equal(Number(row!.term), 4);
      assert.equal(row!.leader_node, second.opts.nodeId);
    } finally {
      await a.stop();
      await b.stop();
      await admin.end();
    }
  },
});

Deno.test({
  name:
    "Elector: the leader's gRPC address is recorded with its term; a term bumped without one (a leader of an earlier version) names none",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const url = await freshDb();
    const events: string[] = [];
    const a = elector(url, "a", events, "a.test:7234");
    const b = elector(url, "b", events, "b.test:7300");
    const c = elector(url, "c", events, "c.test:7301");
    const admin = postgres(url, { max: 1, onnotice: () => {} });
    try {
      a.start();
      await waitFor(() => a.serving(), "a to lead");
      assert.deepEqual(a.leader, {
        node_id: "a",
        addr: "http://a.test:7233",
        grpc_addr: "a.test:7234",
      });
      b.start();
      await waitFor(() => b.leader?.node_id === "a", "b to follow a");
      assert.deepEqual(b.leader, a.leader);
      await b.stop();

      // a leaves; a server of a version before migration 10 takes the lock and bumps the term
      // its way (sql/postgres/cluster.ts before it): leader_grpc_addr still holds a's.
      await a.stop();
      await admin`SELECT pg_advisory_lock(${ELECTION_LOCK_KEY}::bigint)`;
      await admin`UPDATE orbit_cluster SET term = term + 1, leader_node = 'old',
        leader_addr = 'http://old.test:7233', since_ms = 0 WHERE id = 1`;
      const [row] = await admin`SELECT term, leader_grpc_addr, leader_grpc_term FROM orbit_cluster`;
      assert.deepEqual([Number(row!.term), row!.leader_grpc_addr, Number(row!.leader_grpc_term)], [
        2,
        "a.test:7234",
        1,
      ]);
      c.start();
      await waitFor(() => c.leader?.node_id === "old", "c to follow the old leader");
      assert.deepEqual(c.leader, { node_id: "old", addr: "http://old.test:7233" });
      assert.equal(c.term, 2);

      // The old leader goes: c is elected and records its own.
      await admin`SELECT pg_advisory_unlock(${ELECTION_LOCK_KEY}::bigint)`;
      await waitFor(() => c.serving(), "c to lead", 20_000);
      const [now] = await admin`SELECT term, leader_grpc_addr, leader_grpc_term FROM orbit_cluster`;
      assert.deepEqual([Number(now!.term), now!.leader_grpc_addr, Number(now!.leader_grpc_term)], [
        3,
        "c.test:7301",
        3,
      ]);
    } finally {
      await a.stop();
      await b.stop();
      await c.stop();
      await admin.end();
    }
  },
});
