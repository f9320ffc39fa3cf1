/**
 * The CLI over gRPC (`--grpc`) pointed at a standby follows NOT_LEADER as it does over HTTP
 * (cli/http.ts): the request is repeated once at the leader, and the command's later requests go
 * there too. Where it goes over gRPC (cli/client.ts):
 *
 * - the leader's gRPC address, which the standby names in `orbit-leader` (the leader recorded it
 *   with its term: by default its `--grpc-addr`). The two servers here listen for gRPC on two
 *   ports of one host, so the leader's host on `--grpc`'s port would be the standby again;
 * - for a leader with no gRPC address recorded (a version before it recorded one: its term's
 *   record is made so by hand), the leader's host on `--grpc`'s port: the servers listen on
 *   127.0.0.2 and 127.0.0.3 with one gRPC port.
 *
 * PostgreSQL as in every standby test.
 */
import assert from "node:assert/strict";
import postgres from "postgres";
import { sharedPostgres } from "./support/pg.ts";
import { api, MAIN, type ServerProcess, startServer, tempDir, waitFor } from "./support/server.ts";
import { WORKFLOW } from "./support/three_steps.ts";
import { described, runDeno } from "./support/run.ts";
import { grpcClient } from "./grpc_support.ts";

const T = { sanitizeOps: false, sanitizeResources: false };
const TOKEN = "client-token-0123456789abcdef";

/** A port free on both hosts (a moment ago). */
function portFreeOn(hosts: string[]): number {
  for (let i = 0; i < 50; i++) {
    const first = Deno.listen({ hostname: hosts[0]!, port: 0 });
    const port = (first.addr as Deno.NetAddr).port;
    const others: Deno.Listener[] = [];
    try {
      for (const h of hosts.slice(1)) others.push(Deno.listen({ hostname: h, port }));
      return port;
    } catch {
      // Taken on another host: try another.
    } finally {
      first.close();
      for (const l of others) l.close();
    }
  }
  throw new Error(`no port free on ${hosts.join(", ")}`);
}

type Node = ServerProcess & { grpcAddr: string };

/** A standby-mode server on `host`, gRPC on `grpcPort` (0: a free one). */
async function node(db: string, id: string, host: string, grpcPort: number): Promise<Node> {
  const s = await startServer({
    db,
    addr: `${host}:0`,
    args: ["--cluster", "--node-id", id, "--token", TOKEN, "--grpc-addr", `${host}:${grpcPort}`],
  });
  const line = await s.waitForLog(/ORBIT gRPC listening addr=/);
  return { ...s, grpcAddr: line.match(/addr=(\S+)/)![1]! };
}

/** Two servers, a the leader and b following it. */
async function cluster(db: string, hosts: [string, string], ports: [number, number]) {
  const servers: Node[] = [];
  const a = await node(db, "a", hosts[0], ports[0]);
  servers.push(a);
  try {
    await a.waitForLog(/cluster: leader is serving node_id=a term=1/);
    const b = await node(db, "b", hosts[1], ports[1]);
    servers.push(b);
    await b.waitForLog(/cluster: standby; following the leader term=1 leader="a"/);
    return { a, b, servers };
  } catch (e) {
    for (const s of servers) await s.kill("SIGKILL");
    throw e;
  }
}

function cli(b: Node) {
  return (args: string[], grpc: string) =>
    runDeno(["run", "-A", MAIN, ...args, "--server", b.url, "--grpc", grpc, "--token", TOKEN]);
}

const re = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

/** Deploy, then start with --wait (several requests), through the standby; then at a directly. */
async function commandsThroughStandby(a: Node, b: Node, note: RegExp): Promise<void> {
  const run = cli(b);
  const dir = await tempDir();
  const file = `${dir}/three.json`;
  await Deno.writeTextFile(file, JSON.stringify(WORKFLOW));

  // Deploy through the standby: repeated at the leader, which has it.
  const deployed = await run(["deploy", file], b.grpcAddr);
  assert.equal(deployed.code, 0, described(deployed));
  assert.match(deployed.stdout, /deployed Three 1\.0\.0/);
  assert.match(deployed.stderr, note);
  assert.equal((await api(a.url, TOKEN).get("/v1/workflows/Three")).status, 200);

  // A command of several requests (start, then wait): the later ones go to the leader.
  const started = await run(
    ["start", "Three", "--id", "cli-s1", "--input", "1", "--wait", "--timeout", "1"],
    b.grpcAddr,
  );
  assert.equal(started.code, 4, described(started)); // no worker: the wait ran out
  assert.match(started.stderr, note);
  assert.equal(
    started.stderr.match(/is not the leader/g)?.length,
    1,
    `only the first request went to the standby:\n${described(started)}`,
  );
  assert.match(started.stdout, /started execution cli-s1 of Three 1\.0\.0/);
  const shown = await api(a.url, TOKEN).get("/v1/executions/cli-s1");
  assert.equal(shown.status, 200, JSON.stringify(shown.body));

  // At the leader itself: no note.
  const direct = await run(["executions", "show", "cli-s1", "--json"], a.grpcAddr);
  assert.equal(direct.code, 0, described(direct));
  assert.doesNotMatch(direct.stderr, /not the leader/);
  assert.equal(JSON.parse(direct.stdout).execution_id, "cli-s1");
}

Deno.test({
  ...T,
  name: "grpc: the CLI with --grpc at a standby repeats the request at the leader's gRPC address",
  fn: async () => {
    const db = await (await sharedPostgres()).createDatabase();
    const { a, b, servers } = await cluster(db, ["127.0.0.1", "127.0.0.1"], [0, 0]);
    try {
      const port = (addr: string) => new URL(`http://${addr}`).port;
      assert.notEqual(port(a.grpcAddr), port(b.grpcAddr));
      await commandsThroughStandby(
        a,
        b,
        new RegExp(
          `note: ${re(b.grpcAddr)} is not the leader; repeating the request at ` +
            `${re(a.grpcAddr)} \\(the leader ${re(a.url)}, its gRPC address\\)`,
        ),
      );
    } finally {
      for (const s of servers) await s.kill("SIGKILL");
    }
  },
});

Deno.test({
  ...T,
  name:
    "grpc: the CLI with --grpc at a standby reaches a leader with no gRPC address recorded at its host on --grpc's port",
  fn: async () => {
    const db = await (await sharedPostgres()).createDatabase();
    const port = portFreeOn(["127.0.0.2", "127.0.0.3"]);
    const { a, b, servers } = await cluster(db, ["127.0.0.2", "127.0.0.3"], [port, port]);
    const sql = postgres(db, { max: 1, onnotice: () => {} });
    const g = grpcClient(b.grpcAddr, { token: TOKEN });
    try {
      // The term's record as a leader of a version before migration 10 leaves it: no gRPC
      // address at this term. The standby re-reads it within a second.
      await sql`UPDATE orbit_cluster SET leader_grpc_term = NULL WHERE id = 1`;
      await waitFor(async () => {
        const h = await api(b.url, TOKEN).get("/v1/health");
        return !("grpc_addr" in ((h.body as { leader: object }).leader ?? {}));
      }, "b to read a leader without a gRPC address");
      const r = await g.call("Executions", "List", {});
      assert.equal(r.ok, false);
      if (!r.ok) {
        assert.equal(r.error.orbitCode, "NOT_LEADER");
        assert.equal(r.error.metadata["orbit-leader"], undefined);
        assert.equal(r.error.metadata["orbit-leader-http"], a.url);
      }
      await commandsThroughStandby(
        a,
        b,
        new RegExp(
          `note: 127\\.0\\.0\\.3:${port} is not the leader; repeating the request at ` +
            `127\\.0\\.0\\.2:${port} \\(the leader ${re(a.url)}, on --grpc's port\\)`,
        ),
      );
    } finally {
      g.close();
      await sql.end();
      for (const s of servers) await s.kill("SIGKILL");
    }
  },
});
