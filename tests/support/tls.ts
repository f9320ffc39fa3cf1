/**
 * A self-signed certificate for the TLS tests (HTTP, Python SDK, gRPC), made by `openssl`; the
 * tests that need one skip themselves where it is not installed (HAS_OPENSSL).
 */
import assert from "node:assert/strict";

export const HAS_OPENSSL = await new Deno.Command("openssl", {
  args: ["version"],
  stdout: "null",
  stderr: "null",
}).output().then((o) => o.success, () => false);

export interface Pair {
  cert: string;
  certPath: string;
  keyPath: string;
}

/** A self-signed certificate for 127.0.0.1 and localhost, valid one day, in `dir`. */
export async function selfSigned(dir: string, name = "server"): Promise<Pair> {
  const certPath = `${dir}/${name}.crt`;
  const keyPath = `${dir}/${name}.key`;
  const out = await new Deno.Command("openssl", {
    args: [
      "req",
      "-x509",
      "-newkey",
      "rsa:2048",
      "-nodes",
      "-days",
      "1",
      "-subj",
      "/CN=localhost",
      "-addext",
      "subjectAltName=IP:127.0.0.1,DNS:localhost",
      // OpenSSL 3 marks a self-signed certificate as a CA by default, and rustls refuses a CA
      // certificate as a server's own (CaUsedAsEndEntity).
      "-addext",
      "basicConstraints=critical,CA:FALSE",
      "-keyout",
      keyPath,
      "-out",
      certPath,
    ],
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.ok(out.success, `openssl failed: ${new TextDecoder().decode(out.stderr)}`);
  return { cert: await Deno.readTextFile(certPath), certPath, keyPath };
}
