/**
 * The CLI over gRPC (`--grpc host:port`): deploy, start, show, history and health answer as they
 * do over HTTP, with `--server` pointing nowhere; a wrong token is refused the same way.
 */
import assert from "node:assert/strict";
import { api, MAIN, tempDir } from "./support/server.ts";
import { WORKFLOW } from "./support/three_steps.ts";
import { described, runDeno } from "./support/run.ts";
import { startGrpcServer } from "./grpc_support.ts";

const TOKEN = "client-token-0123456789abcdef";

Deno.test({
  name: "grpc: the CLI with --grpc deploys, starts and reads as over HTTP",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const dir = await tempDir();
    const s = await startGrpcServer({ db: `${dir}/orbit.db`, args: ["--token", TOKEN] });
    const file = `${dir}/three.json`;
    await Deno.writeTextFile(file, JSON.stringify(WORKFLOW));
    const cli = (args: string[], token = TOKEN) =>
      runDeno([
        "run",
        "-A",
        MAIN,
        ...args,
        "--server",
        "http://127.0.0.1:9",
        "--grpc",
        s.grpcAddr,
        "--token",
        token,
      ]);
    try {
      const deployed = await cli(["deploy", file]);
      assert.equal(deployed.code, 0, described(deployed));
      assert.match(deployed.stdout, /deployed Three 1\.0\.0/);
      const started = await cli(["start", "Three", "--id", "cli-1", "--input", '{"n":1}']);
      assert.equal(started.code, 0, described(started));
      assert.match(started.stdout, /started execution cli-1 of Three 1\.0\.0/);
      const http = api(s.url, TOKEN);
      const shown = await cli(["executions", "show", "cli-1", "--json"]);
      assert.equal(shown.code, 0, described(shown));
      const { updated_ms: _a, ...viaGrpc } = JSON.parse(shown.stdout);
      const { updated_ms: _b, ...viaHttp } = (await http.get("/v1/executions/cli-1")).body;
      assert.deepEqual(viaGrpc, viaHttp);
      const history = await cli(["executions", "history", "cli-1", "--json"]);
      assert.equal(history.code, 0, described(history));
      assert.deepEqual(
        JSON.parse(history.stdout),
        (await http.get("/v1/executions/cli-1/history")).body,
      );
      const health = await cli(["health"]);
      assert.equal(health.code, 0, described(health));
      const refused = await cli(["executions", "show", "cli-1"], "wrong-token-0123456789abcdef");
      assert.equal(refused.code, 1, described(refused));
      assert.match(refused.stderr, /UNAUTHORIZED/);
    } finally {
      assert.equal((await s.kill()).code, 0, s.logs.join("\n"));
    }
  },
});
