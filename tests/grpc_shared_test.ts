/**
 * Shared mode over gRPC (reference page, "Shared mode"): every server serves gRPC; an execution
 * started over gRPC on one is run by a gRPC worker registered on the other, as over HTTP; the
 * health's nodes list names each server's gRPC address.
 */
import assert from "node:assert/strict";
import { sharedPostgres } from "./support/pg.ts";
import { waitFor } from "./support/server.ts";
import { startSharedServer } from "./support/shared_cluster.ts";
import { TASKS, WORKFLOW } from "./support/three_steps.ts";
import { asHttp, grpcClient } from "./grpc_support.ts";
import type { ServerProcess } from "./support/server.ts";

async function node(db: string, id: string): Promise<[ServerProcess, string]> {
  const s = await startSharedServer(db, id, { args: ["--grpc-addr", "127.0.0.1:0"] });
  const line = await s.waitForLog(/ORBIT gRPC listening addr=/);
  return [s, line.match(/addr=(\S+)/)![1]!];
}

Deno.test({
  name: "grpc: in shared mode every server serves gRPC; a start on one, a gRPC worker on the other",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const db = await (await sharedPostgres()).createDatabase();
    const [a, addrA] = await node(db, "node-1");
    const started: ServerProcess[] = [a];
    const clients: ReturnType<typeof grpcClient>[] = [];
    try {
      const [b, addrB] = await node(db, "node-2");
      started.push(b);
      const ga = grpcClient(addrA);
      const gb = grpcClient(addrB);
      clients.push(ga, gb);
      for (const g of [ga, gb]) {
        assert.deepEqual(await g.call("grpc.health.v1.Health", "Check", { service: "" }), {
          ok: true,
          value: { status: "SERVING" },
        });
      }
      assert.equal(
        asHttp(await ga.call("Workflows", "Deploy", { document_json: JSON.stringify(WORKFLOW) }))
          .status,
        201,
      );
      const reg = await gb.call("Workers", "Register", { worker_id: "w-b", tasks: TASKS });
      assert.equal(reg.ok, true, JSON.stringify(reg));
      const session = reg.ok ? reg.value.session_id : "";
      assert.equal(
        asHttp(
          await ga.call("Executions", "Start", {
            workflow: "Three",
            execution_id: "sh-1",
            input_json: "10",
          }),
        ).status,
        201,
      );
      const done = await waitFor(async () => {
        const p = await gb.call("Workers", "Poll", { session_id: session, wait_s: 1 });
        if (!p.ok) throw new Error(JSON.stringify(p.error));
        for (const t of p.value.tasks) {
          const c = await gb.call("Workers", "Complete", {
            token: t.token,
            output_json: String(JSON.parse(t.input_json) + 1),
          });
          if (!c.ok) throw new Error(JSON.stringify(c.error));
        }
        const e = asHttp(await ga.call("Executions", "Get", { execution_id: "sh-1" })).body as {
          status: string;
          output: unknown;
        };
        return e.status === "completed" ? e : null;
      }, "sh-1 completed");
      assert.equal(done.output, 13);

      // /v1/health's nodes name each server's gRPC address (orbit_nodes.grpc_addr).
      const health = asHttp(await ga.call("System", "Health", {})).body as {
        nodes: Array<{ node_id: string; addr: string; grpc_addr?: string }>;
      };
      assert.deepEqual(
        health.nodes.map((n) => [n.node_id, n.addr, n.grpc_addr]),
        [["node-1", a.url, addrA], ["node-2", b.url, addrB]],
      );
    } finally {
      for (const c of clients) c.close();
      for (const s of started) assert.equal((await s.kill()).code, 0, s.logs.join("\n"));
    }
  },
});
