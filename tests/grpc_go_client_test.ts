/**
 * The gRPC binding from grpc-go, the library grpcurl is built on (Debian's
 * golang-google-grpc-dev, built offline in GOPATH mode): tests/grpc_go/main.go checks health
 * and does `grpcurl list` and `describe` through server reflection. Skipped, loudly, where Go or
 * that package is not installed.
 */
import assert from "node:assert/strict";
import { tempDir } from "./support/server.ts";
import { goEnv } from "./conformance/sdks.ts";
import { startGrpcServer } from "./grpc_support.ts";

const GOPATH = "/usr/share/gocode";
const DIR = new URL("./grpc_go", import.meta.url).pathname;

let hasGo = false;
try {
  hasGo = (await new Deno.Command("go", { args: ["version"], stdout: "null", stderr: "null" })
    .output()).success && (await Deno.stat(`${GOPATH}/src/google.golang.org/grpc`)).isDirectory;
} catch { /* not installed */ }
if (!hasGo) {
  console.warn("!!! SKIPPING the grpc-go client's test: go or golang-google-grpc-dev is missing");
}

Deno.test({
  name: "grpc: a grpc-go client sees SERVING, lists the services and describes orbit.v1.Workers",
  ignore: !hasGo,
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const dir = await tempDir();
    const bin = `${dir}/grpc-go-client`;
    const build = await new Deno.Command("go", {
      args: ["build", "-o", bin, "."],
      cwd: DIR,
      env: { ...goEnv(), GO111MODULE: "off", GOPATH },
      stderr: "piped",
    }).output();
    assert.ok(build.success, new TextDecoder().decode(build.stderr));
    const s = await startGrpcServer({ db: `${dir}/orbit.db` });
    try {
      const out = await new Deno.Command(bin, {
        args: [s.grpcAddr],
        stdout: "piped",
        stderr: "piped",
      }).output();
      const text = new TextDecoder().decode(out.stdout);
      assert.ok(out.success, new TextDecoder().decode(out.stderr));
      assert.deepEqual(text.trim().split("\n"), [
        "health SERVING",
        "service grpc.health.v1.Health",
        "service orbit.v1.Executions",
        "service orbit.v1.Schedules",
        "service orbit.v1.System",
        "service orbit.v1.Workers",
        "service orbit.v1.Workflows",
        "method orbit.v1.Workers.Register(.orbit.v1.RegisterRequest) returns (.orbit.v1.RegisterResponse)",
        "method orbit.v1.Workers.Poll(.orbit.v1.PollRequest) returns (.orbit.v1.TasksResponse)",
        "method orbit.v1.Workers.PollStream(.orbit.v1.PollStreamRequest) returns (.orbit.v1.Task)",
        "method orbit.v1.Workers.Heartbeat(.orbit.v1.HeartbeatRequest) returns (.orbit.v1.HeartbeatResponse)",
        "method orbit.v1.Workers.Complete(.orbit.v1.CompleteRequest) returns (.orbit.v1.ReportResponse)",
        "method orbit.v1.Workers.Fail(.orbit.v1.FailRequest) returns (.orbit.v1.ReportResponse)",
        "method orbit.v1.Workers.Unregister(.orbit.v1.UnregisterRequest) returns (.orbit.v1.UnregisterResponse)",
        "method orbit.v1.Workers.List(.orbit.v1.ListWorkersRequest) returns (.orbit.v1.Document)",
      ]);
    } finally {
      await s.kill();
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    }
  },
});
