/**
 * The gRPC binding's `.proto` files: the copy the server embeds (lib/grpc/protos.ts) is the one
 * in proto/, and the single-file bundle, which has no proto/ beside it, serves gRPC (without reflection).
 */
import assert from "node:assert/strict";
import { embedded } from "../lib/grpc/embed_protos.ts";
import { grpcClient } from "../lib/grpc/client.ts";
import { startServer, tempDir } from "./support/server.ts";
import { described, runDeno } from "./support/run.ts";

const ROOT = new URL("../", import.meta.url).pathname;

Deno.test("grpc: lib/grpc/protos.ts is proto/ as it is (deno run -A lib/grpc/embed_protos.ts)", async () => {
  assert.equal(await Deno.readTextFile(`${ROOT}lib/grpc/protos.ts`), await embedded());
});

Deno.test({
  name: "grpc: the deno bundle artifact serves gRPC from outside the project",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const dir = await tempDir();
    const out = `${dir}/orbit.js`;
    const b = await runDeno(["bundle", "--platform=deno", "-o", out, `${ROOT}main.ts`]);
    assert.equal(b.code, 0, described(b));
    const s = await startServer({
      db: `${dir}/orbit.db`,
      entry: out,
      cwd: dir,
      denoArgs: ["--unstable-no-legacy-abort"],
      args: ["--grpc-addr", "127.0.0.1:0"],
    });
    try {
      const line = await s.waitForLog(/ORBIT gRPC listening addr=/);
      const g = grpcClient(line.match(/addr=(\S+)/)![1]!);
      const health = await g.call("System", "Health", {});
      g.close();
      assert.equal(health.ok && JSON.parse(health.value.json).status, "ok");
      // Without reflection there (it reads .proto files from beside @grpc/reflection's code).
      await s.waitForLog(/gRPC server reflection is not available in this build/);
    } finally {
      await s.kill();
    }
  },
});
