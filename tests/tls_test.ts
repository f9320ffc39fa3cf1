/**
 * `--tls-cert`/`--tls-key` against a real server process, with a self-signed certificate made
 * here by `openssl` (the tests that need one are skipped where it is not installed), and the
 * refusals: one of the two options alone, a file that cannot be read, one that is no PEM
 * certificate or key, a key of another certificate.
 */
import assert from "node:assert/strict";
import { startServer, tempDir } from "./support/server.ts";
import { serverRefusal } from "./support/refusal.ts";
import { HAS_OPENSSL, selfSigned } from "./support/tls.ts";

Deno.test({
  name: "with --tls-cert and --tls-key the server speaks HTTPS and says tls=true",
  ignore: !HAS_OPENSSL,
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const dir = await tempDir();
    const pair = await selfSigned(dir);
    const server = await startServer({
      db: `${dir}/orbit.db`,
      args: ["--tls-cert", pair.certPath, "--tls-key", pair.keyPath, "--token", "tls-secret"],
    });
    const client = Deno.createHttpClient({ caCerts: [pair.cert] });
    try {
      assert.ok(
        server.logs.some((l) =>
          /INFO .*ORBIT runtime listening addr=127\.0\.0\.1:\d+ tls=true ui=true/.test(l)
        ),
      );
      assert.match(server.url, /^https:\/\/127\.0\.0\.1:\d+$/);

      let r = await fetch(`${server.url}/v1/health`, { client });
      assert.equal(r.status, 200);
      assert.equal((await r.json()).status, "ok");
      r = await fetch(`${server.url}/v1/executions`, {
        client,
        headers: { authorization: "Bearer tls-secret" },
      });
      assert.equal(r.status, 200, "the API behind TLS, with its token");
      await r.body?.cancel();

      // Without the certificate as a trust anchor the client refuses it; plain HTTP gets nothing.
      await assert.rejects(fetch(`${server.url}/v1/health`));
      await assert.rejects(fetch(`${server.url.replace("https:", "http:")}/v1/health`));
    } finally {
      client.close();
      await server.kill("SIGKILL");
    }
  },
});

Deno.test({
  name: "over TLS, HTTP/2 and HTTP/1.1 are served and connections without a request are closed",
  ignore: !HAS_OPENSSL,
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const dir = await tempDir();
    const pair = await selfSigned(dir);
    const server = await startServer({
      db: `${dir}/orbit.db`,
      args: [
        "--tls-cert",
        pair.certPath,
        "--tls-key",
        pair.keyPath,
        "--header-timeout",
        "1",
        "--idle-timeout",
        "2",
      ],
    });
    const u = new URL(server.url);
    const open = () =>
      Deno.connectTls({ hostname: u.hostname, port: Number(u.port), caCerts: [pair.cert] });
    /** Milliseconds until the server closes `conn`, reading what it sends before. */
    const closedAfter = async (conn: Deno.TlsConn, since: number) => {
      const buf = new Uint8Array(65_536);
      const timer = setTimeout(() => conn.close(), 20_000);
      try {
        while ((await conn.read(buf).catch(() => null)) !== null) { /* an answer */ }
        return Date.now() - since;
      } finally {
        clearTimeout(timer);
      }
    };
    try {
      for (const protocol of [["h2", "http/1.1"], ["http/1.1"]]) {
        const conn = await Deno.connectTls({
          hostname: u.hostname,
          port: Number(u.port),
          caCerts: [pair.cert],
          alpnProtocols: protocol,
        });
        const { alpnProtocol } = await conn.handshake();
        assert.equal(alpnProtocol, protocol[0], "the protocol offered first is chosen");
        conn.close();
      }
      const client = Deno.createHttpClient({ caCerts: [pair.cert] });
      try {
        const r = await fetch(`${server.url}/v1/health`, { client });
        assert.equal(r.status, 200);
        await r.body?.cancel();
      } finally {
        client.close();
      }

      // A connection that completed its handshake and asks nothing; one kept alive after a request.
      const since = Date.now();
      const silent = await open();
      await silent.handshake();
      const kept = await open();
      await kept.write(
        new TextEncoder().encode(`GET /v1/health HTTP/1.1\r\nHost: ${u.host}\r\n\r\n`),
      );
      const first = new Uint8Array(4096);
      assert.match(new TextDecoder().decode(first.subarray(0, (await kept.read(first))!)), / 200 /);
      const keptSince = Date.now();
      const [a, b] = await Promise.all([closedAfter(silent, since), closedAfter(kept, keptSince)]);
      assert.ok(a >= 900 && a < 3_500, `the silent TLS connection closed after ${a} ms`);
      assert.ok(b >= 1_900 && b < 4_500, `the kept-alive TLS connection closed after ${b} ms`);
    } finally {
      await server.kill("SIGKILL");
    }
  },
});

Deno.test("--tls-cert without --tls-key, or the reverse, is refused", async () => {
  const db = `${await tempDir()}/orbit.db`;
  let r = await serverRefusal(["--db", db, "--tls-cert", "/tmp/server.crt"]);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /^error: --tls-cert and --tls-key must be given together$/m);
  r = await serverRefusal(["--db", db], { ORBIT_TLS_KEY: "/tmp/server.key" });
  assert.equal(r.code, 2);
  assert.match(r.stderr, /^error: --tls-cert and --tls-key must be given together$/m);
});

Deno.test("a certificate file that cannot be read or is no certificate stops the server", async () => {
  const dir = await tempDir();
  const db = `${dir}/orbit.db`;
  const garbage = `${dir}/garbage.pem`;
  await Deno.writeTextFile(garbage, "this is not a PEM file\n");

  let r = await serverRefusal([
    "--db",
    db,
    "--tls-cert",
    `${dir}/missing.crt`,
    "--tls-key",
    garbage,
  ]);
  assert.equal(r.code, 2);
  assert.match(r.stderr, new RegExp(`^error: cannot read --tls-cert ${dir}/missing\\.crt: `, "m"));

  r = await serverRefusal(["--db", db, "--tls-cert", garbage, "--tls-key", garbage]);
  assert.equal(r.code, 2);
  assert.match(
    r.stderr,
    new RegExp(
      `^error: cannot use --tls-cert ${garbage} with --tls-key ${garbage}: .*certificate`,
      "m",
    ),
  );
  assert.ok(!r.stderr.includes("    at "), "one line, no stack trace");
  await assert.rejects(Deno.stat(db), Deno.errors.NotFound, "refused before the database opens");
});

Deno.test({
  name: "a key that is no key, or belongs to another certificate, stops the server",
  ignore: !HAS_OPENSSL,
  fn: async () => {
    const dir = await tempDir();
    const db = `${dir}/orbit.db`;
    const one = await selfSigned(dir, "one");
    const other = await selfSigned(dir, "other");

    let r = await serverRefusal([
      "--db",
      db,
      "--tls-cert",
      one.certPath,
      "--tls-key",
      one.certPath,
    ]);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /^error: cannot use --tls-cert .* with --tls-key .*: .*key/m);

    r = await serverRefusal(["--db", db, "--tls-cert", one.certPath, "--tls-key", other.keyPath]);
    assert.equal(r.code, 2);
    assert.match(
      r.stderr,
      new RegExp(
        `^error: cannot use --tls-cert ${one.certPath} with --tls-key ${other.keyPath}: `,
        "m",
      ),
    );
    assert.ok(!r.stderr.includes("    at "), "one line, no stack trace");
  },
});
