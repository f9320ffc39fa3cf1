import assert from "node:assert/strict";
import postgres from "postgres";
import { Elector } from "./standby.ts";
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

function elector(url: string, nodeId: string, events: string[]) {
  return new Elector({
    url,
    nodeId,
    advertiseAddr: `http://${nodeId}.test:7233`,
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
    "Elector: one leader, term increments, a terminated election session steps down and the standby takes over",
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

      const t0 = Date.now();
      await admin`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'orbit-cluster:a'`;
      // A condition with a deadline, not a timing bound: a loaded machine may take longer.
      await waitFor(() => b.serving(), "b to take over", 20_000);
      console.log(`failover after the leader's connection was cut: ${Date.now() - t0} ms`);
      assert.equal(b.term, 2);
      await waitFor(() => a.role === "standby", "a to step down");
      // The step-down stops serving at once, then closes the session, then reports the loss.
      await waitFor(() => events.some((e) => e.startsWith("a lost: ")), "a to report the loss");
      assert.equal(a.serving(), false);
      await waitFor(() => a.leader?.node_id === "b", "a to follow b");

      const [row] = await admin`SELECT term, leader_node FROM orbit_cluster WHERE id = 1`;
      assert.equal(Number(row!.term), 2);
      assert.equal(row!.leader_node, "b");

      await b.stop();
      await waitFor(() => a.serving(), "a to lead again", 10_000);
      assert.equal(a.term, 3);
      assert.deepEqual(events.filter((e) => e.includes("elected")), [
        "a elected 1",
        "b elected 2",
        "a elected 3",
      ]);
    } finally {
      await a.stop();
      await b.stop();
      await admin.end();
    }
  },
});
