/**
 * The CLI over gRPC (`--grpc`) pointed at a standby follows NOT_LEADER as it does over HTTP
 * (cli/http.ts): the request is repeated once at the leader, and the command's later requests go
 * there too. The leader's gRPC address is the leader's host on `--grpc`'s port (cli/client.ts),
 * so the two servers listen on two loopback addresses, 127.0.0.2 and 127.0.0.3, with the same
 * gRPC port; PostgreSQL as in every standby test.
 */
import assert from "node:assert/strict";
import { sharedPostgres } from "./support/pg.ts";
import { api, MAIN, type ServerProcess, startServer, tempDir } from "./support/server.ts";
import { WORKFLOW } from "./support/three_steps.ts";
import { described, runDeno } from "./support/run.ts";

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

async function node(db: string, id: string, host: string, grpcPort: number) {
  const s = await startServer({
    db,
    addr: `${host}:0`,
    args: ["--cluster", "--node-id", id, "--token", TOKEN, "--grpc-addr", `${host}:${grpcPort}`],
  });
  await s.waitForLog(/ORBIT gRPC listening addr=/);
  return s;
}

Deno.test({
  ...T,
  name: "grpc: the CLI with --grpc at a standby repeats the request at the leader's gRPC port",
  fn: async () => {
    const db = await (await sharedPostgres()).createDatabase();
    const port = portFreeOn(["127.0.0.2", "127.0.0.3"]);
    const servers: ServerProcess[] = [];
    try {
      const a = await node(db, "a", "127.0.0.2", port);
      servers.push(a);
      await a.waitForLog(/cluster: leader is serving node_id=a term=1/);
      const b = await node(db, "b", "127.0.0.3", port);
      servers.push(b);
      await b.waitForLog(/cluster: standby; following the leader term=1 leader="a"/);

      const dir = await tempDir();
      const file = `${dir}/three.json`;
      await Deno.writeTextFile(file, JSON.stringify(WORKFLOW));
      const cli = (args: string[], grpc: string) =>
        runDeno([
          "run",
          "-A",
          MAIN,
          ...args,
          "--server",
          b.url,
          "--grpc",
          grpc,
          "--token",
          TOKEN,
        ]);
      const note = new RegExp(
        `note: 127\\.0\\.0\\.3:${port} is not the leader; repeating the request at ` +
          `127\\.0\\.0\\.2:${port} \\(the leader ${
            a.url.replace(/\./g, "\\.")
          }, on --grpc's port\\)`,
      );

      // Deploy through the standby: repeated at the leader, which has it.
      const deployed = await cli(["deploy", file], `127.0.0.3:${port}`);
      assert.equal(deployed.code, 0, described(deployed));
      assert.match(deployed.stdout, /deployed Three 1\.0\.0/);
      assert.match(deployed.stderr, note);
      assert.equal((await api(a.url, TOKEN).get("/v1/workflows/Three")).status, 200);

      // A command of several requests (start, then wait): the later ones go to the leader.
      const started = await cli(
        ["start", "Three", "--id", "cli-s1", "--input", "1", "--wait", "--timeout", "1"],
        `127.0.0.3:${port}`,
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
      const direct = await cli(["executions", "show", "cli-s1", "--json"], `127.0.0.2:${port}`);
      assert.equal(direct.code, 0, described(direct));
      assert.doesNotMatch(direct.stderr, /not the leader/);
      assert.equal(JSON.parse(direct.stdout).execution_id, "cli-s1");
    } finally {
      for (const s of servers) await s.kill("SIGKILL");
    }
  },
});
