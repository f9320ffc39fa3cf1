/**
 * The reference page's sentence, end to end on PostgreSQL: "On the gRPC binding, a standby fails
 * every call with UNAVAILABLE and orbit-error-code: NOT_LEADER." Two servers in standby mode
 * with `--grpc-addr` on different ports: the standby's NOT_LEADER names the leader's gRPC
 * address in `orbit-leader` (recorded by the leader, by default its `--grpc-addr`) and its HTTP
 * address in `orbit-leader-http`; HTTP's answer is unchanged. Then the leader is SIGKILLed and a
 * gRPC worker finishes the execution on the new leader.
 */
import assert from "node:assert/strict";
import { sharedPostgres } from "./support/pg.ts";
import { api, waitFor } from "./support/server.ts";
import { TASKS, WORKFLOW } from "./support/three_steps.ts";
import { asHttp, grpcClient, type GrpcServerProcess, startGrpcServer } from "./grpc_support.ts";
import type { GrpcClient } from "../lib/grpc/client.ts";

const T = { sanitizeOps: false, sanitizeResources: false };
const TOKEN = "client-token-0123456789abcdef";

function node(db: string, id: string): Promise<GrpcServerProcess> {
  return startGrpcServer({
    db,
    args: ["--cluster", "--node-id", id, "--session-timeout", "3", "--token", TOKEN],
  });
}

/** One step of a gRPC worker: register if it has no session here, poll once, complete. */
async function work(g: GrpcClient, session: { id: string | null }): Promise<number> {
  if (!session.id) {
    const r = await g.call("Workers", "Register", { worker_id: "w-grpc", tasks: TASKS });
    if (!r.ok) return 0;
    session.id = r.value.session_id;
  }
  const p = await g.call("Workers", "Poll", { session_id: session.id, wait_s: 1, max_tasks: 3 });
  if (!p.ok) {
    if (p.error.orbitCode === "UNKNOWN_SESSION") session.id = null;
    return 0;
  }
  for (const t of p.value.tasks) {
    const input = JSON.parse(t.input_json);
    await g.call("Workers", "Complete", {
      token: t.token,
      output_json: JSON.stringify(input + 1),
    });
  }
  return p.value.tasks.length;
}

Deno.test({
  ...T,
  name:
    "grpc: a standby fails every call UNAVAILABLE with NOT_LEADER naming the leader's gRPC address; after failover it serves",
  fn: async () => {
    const db = await (await sharedPostgres()).createDatabase();
    const a = await node(db, "a");
    let b: GrpcServerProcess | null = null;
    const clients: GrpcClient[] = [];
    try {
      await a.waitForLog(/cluster: leader is serving node_id=a term=1/);
      b = await node(db, "b");
      await b.waitForLog(/cluster: standby; following the leader term=1 leader="a"/);
      // Each names the gRPC address it advertises (by default its --grpc-addr, as bound).
      for (const s of [a, b]) {
        const line = s.logs.find((l) => /ORBIT gRPC listening/.test(l)) ?? "";
        assert.ok(line.endsWith(` tls=false advertise_addr="${s.grpcAddr}"`), line);
      }
      // Two gRPC ports: the leader's cannot be guessed from the standby's.
      assert.notEqual(new URL(`http://${a.grpcAddr}`).port, new URL(`http://${b.grpcAddr}`).port);
      const ga = grpcClient(a.grpcAddr, { token: TOKEN });
      const gb = grpcClient(b.grpcAddr, { token: TOKEN });
      const anonymous = grpcClient(b.grpcAddr);
      clients.push(ga, gb, anonymous);

      // The leader serves gRPC.
      assert.equal(
        asHttp(await ga.call("Workflows", "Deploy", { document_json: JSON.stringify(WORKFLOW) }))
          .status,
        201,
      );
      assert.equal(
        asHttp(
          await ga.call("Executions", "Start", {
            workflow: "Three",
            execution_id: "g-1",
            input_json: "1",
          }),
        ).status,
        201,
      );

      // The standby: every call, reads, health and the worker protocol included, with or
      // without credentials.
      const calls: Array<[GrpcClient, string, string, Record<string, unknown>]> = [
        [gb, "System", "Health", {}],
        [gb, "System", "Ready", {}],
        [gb, "Workflows", "List", {}],
        [gb, "Workflows", "Deploy", { document_json: JSON.stringify(WORKFLOW) }],
        [gb, "Executions", "Get", { execution_id: "g-1" }],
        [gb, "Executions", "List", {}],
        [gb, "Executions", "Start", { workflow: "Three" }],
        [gb, "Executions", "Wait", { execution_id: "g-1", timeout_s: 1 }],
        [gb, "Executions", "Cancel", { execution_id: "g-1" }],
        [gb, "Executions", "Pending", { execution_id: "g-1" }],
        [gb, "Schedules", "List", {}],
        [gb, "Workers", "Register", { worker_id: "w", tasks: TASKS }],
        [gb, "Workers", "Poll", { session_id: "s", wait_s: 0 }],
        [gb, "Workers", "Complete", { token: "x" }],
        [gb, "Workers", "List", {}],
        [anonymous, "Executions", "Get", { execution_id: "g-1" }],
        [anonymous, "Workers", "Register", { worker_id: "w", tasks: TASKS }],
      ];
      for (const [g, service, rpc, request] of calls) {
        const r = await g.call(service, rpc, request);
        const what = `${service}.${rpc}`;
        assert.equal(r.ok, false, what);
        if (r.ok) continue;
        assert.equal(r.error.status, "UNAVAILABLE", what);
        assert.equal(r.error.orbitCode, "NOT_LEADER", what);
        assert.equal(r.error.metadata["orbit-leader"], a.grpcAddr, what);
        assert.equal(r.error.metadata["orbit-leader-http"], a.url, what);
        assert.equal(r.error.metadata["retry-after"], "1", what);
        assert.deepEqual(r.error.body, {
          error: {
            code: "NOT_LEADER",
            message: `this server is a standby; the leader is \`a\` at ${a.url}`,
            leader_node: "a",
            leader_addr: a.url,
          },
        }, what);
      }
      const history = await gb.stream("Executions", "History", { execution_id: "g-1" });
      assert.deepEqual(history.messages, []);
      assert.equal(history.error?.status, "UNAVAILABLE");
      assert.equal(history.error?.orbitCode, "NOT_LEADER");
      const polls = await gb.stream("Workers", "PollStream", { session_id: "s", slots: 1 });
      assert.deepEqual(polls.messages, []);
      assert.equal(polls.error?.status, "UNAVAILABLE");
      assert.equal(polls.error?.orbitCode, "NOT_LEADER");
      assert.equal(polls.error?.metadata["orbit-leader"], a.grpcAddr);
      assert.equal(polls.error?.metadata["orbit-leader-http"], a.url);
      assert.equal(history.error?.metadata["orbit-leader"], a.grpcAddr);
      // A client can reach the leader at that address.
      const follow = grpcClient(history.error!.metadata["orbit-leader"]!, { token: TOKEN });
      clients.push(follow);
      assert.equal(
        (await follow.stream("Executions", "History", { execution_id: "g-1" })).error,
        null,
      );

      // HTTP as before: x-orbit-leader is the HTTP address, the body has no gRPC address; the
      // health's leader has both.
      const refused = await fetch(`${b.url}/v1/workflows`, {
        method: "POST",
        body: JSON.stringify(WORKFLOW),
      });
      assert.equal(refused.status, 503);
      assert.equal(refused.headers.get("x-orbit-leader"), a.url);
      assert.deepEqual((await refused.json()).error, {
        code: "NOT_LEADER",
        message: `this server is a standby; the leader is \`a\` at ${a.url}`,
        leader_node: "a",
        leader_addr: a.url,
      });
      const health = await api(b.url, TOKEN).get("/v1/health");
      assert.deepEqual((health.body as { leader: unknown }).leader, {
        node_id: "a",
        addr: a.url,
        grpc_addr: a.grpcAddr,
      });
      // grpc.health.v1: what a balancer checks. NOT_SERVING on the standby, SERVING on a.
      assert.deepEqual(await gb.call("grpc.health.v1.Health", "Check", { service: "" }), {
        ok: true,
        value: { status: "NOT_SERVING" },
      });
      assert.deepEqual(await ga.call("grpc.health.v1.Health", "Check", { service: "" }), {
        ok: true,
        value: { status: "SERVING" },
      });

      // A gRPC worker takes the first step on a; a is SIGKILLed; the worker goes on with b.
      const session = { id: null as string | null };
      await waitFor(async () => await work(ga, session) > 0, "the first step served on a");
      await a.kill("SIGKILL");
      await b.waitForLog(/cluster: leader is serving node_id=b term=2/, 30_000);
      session.id = null;
      const done = await waitFor(async () => {
        await work(gb, session);
        const r = asHttp(await gb.call("Executions", "Get", { execution_id: "g-1" }));
        const e = r.body as { status?: string; output?: unknown };
        return e.status === "completed" ? e : null;
      }, "g-1 completed on b");
      assert.equal(done.output, 4);
      assert.deepEqual(await gb.call("grpc.health.v1.Health", "Check", { service: "" }), {
        ok: true,
        value: { status: "SERVING" },
      });
      assert.equal((await gb.call("System", "Health", {})).ok, true);
    } finally {
      for (const c of clients) c.close();
      await a.kill("SIGKILL");
      await b?.kill("SIGKILL");
    }
  },
});
