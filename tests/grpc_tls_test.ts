/**
 * The gRPC binding over TLS with the HTTP flags (`--tls-cert`, `--tls-key`): a client that trusts
 * the certificate is served, with the token as `authorization` metadata; a plain-text client is
 * not. The certificate is self-signed, made here by `openssl` (skipped, loudly, without it).
 */
import assert from "node:assert/strict";
import { grpcClient } from "../lib/grpc/client.ts";
import { tempDir } from "./support/server.ts";
import { startGrpcServer } from "./grpc_support.ts";
import { HAS_OPENSSL, selfSigned } from "./support/tls.ts";

if (!HAS_OPENSSL) console.warn("!!! SKIPPING the gRPC TLS test: openssl is not installed");

Deno.test({
  name: "grpc: --tls-cert/--tls-key serve gRPC over TLS too; a plain-text client gets nothing",
  ignore: !HAS_OPENSSL,
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const dir = await tempDir();
    const { certPath, keyPath } = await selfSigned(dir);
    const s = await startGrpcServer({
      db: `${dir}/orbit.db`,
      args: ["--tls-cert", certPath, "--tls-key", keyPath, "--token", "tls-secret"],
    });
    const tls = grpcClient(s.grpcAddr, {
      token: "tls-secret",
      ca: await Deno.readTextFile(certPath),
      serverName: "localhost",
    });
    const plain = grpcClient(s.grpcAddr, { token: "tls-secret" });
    try {
      assert.ok(s.logs.some((l) => /ORBIT gRPC listening addr=\S+ tls=true/.test(l)));
      const ok = await tls.call("Workflows", "List", {});
      assert.deepEqual(ok.ok && JSON.parse(ok.value.json), { workflows: [] });
      const refused = await plain.call("Workflows", "List", {}, { deadlineMs: 3000 });
      assert.equal(refused.ok, false);
      if (!refused.ok) {
        assert.ok(["UNAVAILABLE", "DEADLINE_EXCEEDED"].includes(refused.error.status));
      }
    } finally {
      tls.close();
      plain.close();
      assert.equal((await s.kill()).code, 0, s.logs.join("\n"));
    }
  },
});
