/**
 * Standby mode with real server processes on a real PostgreSQL (reference page, first half):
 * election, standby behaviour, failover after SIGKILL, a paused leader fenced, the election
 * session terminated, PostgreSQL restarted under the cluster.
 */
import assert from "node:assert/strict";
import postgres from "postgres";
import { api, type ServerProcess, startServer, waitFor } from "./support/server.ts";
import { sharedPostgres } from "./support/pg.ts";
import { ORDER_WORKFLOW, orderInput } from "./support/orders.ts";

const T = { sanitizeOps: false, sanitizeResources: false };

async function node(db: string, id: string, extra: string[] = []): Promise<ServerProcess> {
  return await startServer({
    db,
    args: ["--cluster", "--node-id", id, "--session-timeout", "3", ...extra],
  });
}

/** `a` elected with term 1 and `b` following it; `a` is stopped if `b` cannot start. */
async function leaderAndStandby(db: string): Promise<[ServerProcess, ServerProcess]> {
  const a = await node(db, "a");
  try {
    await a.waitForLog(
      /cluster: leader is serving node_id=a term=1 active_executions=0 recovery_ms=\d+/,
    );
    const b = await node(db, "b");
    await b.waitForLog(/cluster: standby; following the leader term=1 leader="a"/);
    return [a, b];
  } catch (e) {
    await a.kill("SIGKILL");
    throw e;
  }
}

async function ready(s: ServerProcess): Promise<boolean> {
  try {
    return (await api(s.url).get("/v1/ready")).status === 200;
  } catch {
    return false;
  }
}

Deno.test({
  ...T,
  name: "cluster: --cluster with SQLite is refused with the page's message",
  fn: async () => {
    const out = await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        new URL("../main.ts", import.meta.url).pathname,
        "server",
        "--cluster",
        "--db",
        "orbit.db",
      ],
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.equal(out.code, 2);
    assert.equal(
      new TextDecoder().decode(out.stderr).trim(),
      "error: --cluster requires a PostgreSQL database (--db postgres://...): the servers share it for leader election and history",
    );
  },
});

Deno.test({
  ...T,
  name:
    "cluster: one leader serves, the standby answers reads and NOT_LEADER, failover after SIGKILL",
  fn: async () => {
    const db = await (await sharedPostgres()).createDatabase();
    const [a, b] = await leaderAndStandby(db);
    try {
      assert.ok(
        a.logs.some((l) =>
          /INFO orbit_runtime::cluster: cluster mode: standby until elected node_id=a advertise_addr="http:\/\/127\.0\.0\.1:\d+"/
            .test(l)
        ),
      );

      // The leader serves writes; the standby refuses them before authentication.
      const ca = api(a.url);
      assert.equal((await ca.post("/v1/workflows", ORDER_WORKFLOW)).status, 201);
      assert.equal(
        (await ca.post("/v1/executions", {
          workflow: "OrderProcessing",
          execution_id: "c-1",
          input: orderInput("c-1"),
        })).status,
        201,
      );
      const refused = await fetch(`${b.url}/v1/executions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ workflow: "x" }),
      });
      assert.equal(refused.status, 503);
      assert.equal(refused.headers.get("retry-after"), "1");
      assert.equal(refused.headers.get("x-orbit-leader"), a.url);
      assert.deepEqual(await refused.json(), {
        error: {
          code: "NOT_LEADER",
          message: `this server is a standby; the leader is \`a\` at ${a.url}`,
          leader_node: "a",
          leader_addr: a.url,
        },
      });
      for (
        const path of [
          "/v1/workers/register",
          "/v1/workers/poll",
          "/v1/tasks/complete",
          "/v1/executions/c-1/cancel",
        ]
      ) {
        assert.equal((await api(b.url).post(path, {})).status, 503, path);
      }
      // Reads on the standby come from the database.
      const cb = api(b.url);
      assert.equal((await cb.get("/v1/executions/c-1")).body.status, "running");
      assert.ok((await cb.get("/v1/executions/c-1/history")).body.events.length >= 2);
      assert.equal((await cb.get("/v1/workflows/OrderProcessing/1.0.0")).status, 200);
      assert.equal((await cb.get("/v1/executions?limit=10")).body.executions.length, 1);
      assert.equal((await cb.get("/v1/ready")).status, 503);
      const hb = (await cb.get("/v1/health")).body;
      assert.equal(hb.role, "standby");
      assert.equal(hb.node_id, "b");
      assert.equal(hb.term, 1);
      assert.deepEqual(hb.leader, { node_id: "a", addr: a.url });
      assert.equal(hb.active_executions, 0);
      const ha = (await ca.get("/v1/health")).body;
      assert.equal(ha.role, "leader");
      assert.equal(ha.active_executions, 1);
      assert.deepEqual((await ca.get("/v1/ready")).body, {
        role: "leader",
        node_id: "a",
        term: 1,
        leader: { node_id: "a", addr: a.url },
        ready: true,
      });

      // Failover: SIGKILL the leader, the standby serves within about a second plus recovery.
      const killedAt = Date.now();
      await a.kill("SIGKILL");
      await waitFor(() => ready(b), "b to serve", 30_000, 20);
      const failoverMs = Date.now() - killedAt;
      console.log(`failover: SIGKILL to the new leader serving in ${failoverMs} ms`);
      await b.waitForLog(
        /cluster: elected leader; recovering executions from history node_id=b term=2/,
      );
      await b.waitForLog(/recovered active executions from history executions=1 in_flight=0/);
      await b.waitForLog(
        /cluster: leader is serving node_id=b term=2 active_executions=1 recovery_ms=\d+/,
      );
      // The new leader carries on with the execution.
      assert.equal((await cb.post("/v1/executions/c-1/cancel", {})).status, 200);
      assert.equal((await cb.get("/v1/executions/c-1/wait?timeout_s=10")).body.status, "cancelled");
    } finally {
      await a.kill("SIGKILL");
      await b.kill("SIGKILL");
    }
  },
});

Deno.test({
  ...T,
  name: "cluster: a paused leader is fenced, steps down in process and follows the new leader",
  fn: async () => {
    const db = await (await sharedPostgres()).createDatabase();
    const [a, b] = await leaderAndStandby(db);
    const sql = postgres(db, { max: 1, onnotice: () => {} });
    try {
      assert.equal((await api(a.url).post("/v1/workflows", ORDER_WORKFLOW)).status, 201);

      Deno.kill(a.pid, "SIGSTOP");
      // PostgreSQL ends the silent election session after 5 s; b is elected.
      await waitFor(() => ready(b), "b to be elected while a is paused", 20_000);
      const before = (await sql`SELECT count(*)::int AS count FROM execution_events`)[0]!.count;
      // A request sent to the paused leader waits in its socket until it resumes.
      const late = api(a.url).post("/v1/executions", {
        workflow: "OrderProcessing",
        execution_id: "late-1",
        input: orderInput("late-1"),
      });
      Deno.kill(a.pid, "SIGCONT");
      const r = await late;
      assert.ok(
        r.status === 503 && r.body.error.code === "NOT_LEADER" ||
          r.status === 500 &&
            /fenced: this server led term 1, but the cluster is at term 2/.test(
              r.body.error.message,
            ),
        JSON.stringify(r.body),
      );
      await a.waitForLog(
        /ERROR orbit_runtime::cluster: cluster: lost leadership; stepped down to standby node_id=a reason=/,
      );
      await a.waitForLog(/cluster: standby; following the leader term=2 leader="b"/);
      const after = (await sql`SELECT count(*)::int AS count FROM execution_events`)[0]!.count;
      assert.equal(after, before, "the deposed leader wrote nothing");
      assert.equal((await api(b.url).get("/v1/executions/late-1")).status, 404);
      assert.equal((await api(a.url).get("/v1/health")).body.role, "standby");
      assert.equal(
        a.logs.some((l) => /stopped$/.test(l)),
        false,
        "no exit: it stepped down in process",
      );
    } finally {
      try {
        Deno.kill(a.pid, "SIGCONT");
      } catch { /* gone */ }
      await a.kill("SIGKILL");
      await b.kill("SIGKILL");
      await sql.end();
    }
  },
});

Deno.test({
  ...T,
  name:
    "cluster: a leader whose election session is terminated takes its lock back at its term; the standby stays one",
  fn: async () => {
    const db = await (await sharedPostgres()).createDatabase();
    const [a, b] = await leaderAndStandby(db);
    const sql = postgres(db, { max: 1, onnotice: () => {} });
    try {
      const rows =
        await sql`SELECT application_name FROM pg_stat_activity WHERE application_name LIKE 'orbit-cluster:%' ORDER BY 1`;
      assert.deepEqual(rows.map((r) => r.application_name), ["orbit-cluster:a", "orbit-cluster:b"]);
      await sql`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'orbit-cluster:a'`;
      // Only its connection was lost (issue 36): no election, no recovery, no step-down.
      await a.waitForLog(/took the leader lock back; still the leader node_id=a term=1 reason=/);
      await waitFor(() => ready(a), "a to serve again", 15_000);
      assert.equal((await api(a.url).get("/v1/health")).body.term, 1);
      assert.equal((await api(b.url).get("/v1/health")).body.term, 1);
      assert.equal(await ready(b), false);
      assert.ok(!a.logs.some((l) => /stepped down to standby/.test(l)), a.logs.join("\n"));
      assert.equal((await api(a.url).post("/v1/workflows", ORDER_WORKFLOW)).status, 201);
    } finally {
      await a.kill("SIGKILL");
      await b.kill("SIGKILL");
      await sql.end();
    }
  },
});

Deno.test({
  ...T,
  name: "cluster: PostgreSQL restarted under the cluster, a leader serves again",
  fn: async () => {
    const { startPostgres } = await import("./support/pg.ts");
    const pg = await startPostgres();
    const db = await pg.createDatabase();
    const [a, b] = await leaderAndStandby(db);
    try {
      await pg.restart();
      await waitFor(
        async () => (await ready(a)) || (await ready(b)),
        "a leader after the restart",
        30_000,
      );
      // Ready may be the old leader's last word before it notices that its lock session died
      // with the database; until the election settles a write answers 503 (never anything
      // else), and then one server takes it.
      const leader = await waitFor(
        async () => {
          for (const s of [a, b]) {
            if (!(await ready(s))) continue;
            const r = await api(s.url).post("/v1/workflows", ORDER_WORKFLOW);
            if (r.status === 201) return s;
            assert.equal(r.status, 503, JSON.stringify(r.body));
          }
          return null;
        },
        "a leader that takes a write after the restart",
        30_000,
      );
      assert.ok((await api(leader.url).get("/v1/health")).body.term >= 1);
    } finally {
      await a.kill("SIGKILL");
      await b.kill("SIGKILL");
      await pg.stop();
    }
  },
});
