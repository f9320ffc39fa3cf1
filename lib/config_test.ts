/**
 * `--grpc-advertise-addr` (issue 41): checked into the config with a message naming the option,
 * and its default derived from `--grpc-addr` as `--advertise-addr`'s is from `--addr`.
 */
import assert from "node:assert/strict";
import {
  advertisedAddr,
  advertisedGrpcAddr,
  ConfigError,
  parseServerConfig,
  type ServerConfig,
} from "./config.ts";
import { runDeno } from "../tests/support/run.ts";

/** The flags as commander hands them over, defaults included. */
const FLAGS = {
  db: "postgres://orbit@127.0.0.1/orbit",
  addr: "127.0.0.1:7233",
  sessionTimeout: "30",
  logFormat: "text",
  logLevel: "info",
  maxBodyBytes: "1048576",
  headerTimeout: "20",
  idleTimeout: "65",
  clusterMode: "standby",
  nodeTimeout: "5",
  expressionTimeoutMs: "1000",
};

function parse(flags: Record<string, unknown>): ServerConfig {
  return parseServerConfig({ ...FLAGS, ...flags });
}

Deno.test("config: --grpc-advertise-addr takes host:port, with --cluster and --grpc-addr", () => {
  const on = { cluster: true, grpcAddr: "0.0.0.0:7234" };
  assert.equal(parse(on).grpcAdvertiseAddr, null);
  for (
    const v of ["orbit-0.orbit.internal:7234", "10.0.0.7:1", "[fd00::7]:65535", "orbit_0:7234"]
  ) {
    assert.equal(parse({ ...on, grpcAdvertiseAddr: v }).grpcAdvertiseAddr, v);
  }
  for (const v of ["http://orbit-0:7234", "orbit-0", ":7234", "orbit-0:0", "orbit-0:70000", ""]) {
    assert.throws(() => parse({ ...on, grpcAdvertiseAddr: v }), {
      name: "ConfigError",
      message:
        `--grpc-advertise-addr must be host:port such as orbit-0.orbit.internal:7234 (the address gRPC clients dial: no scheme, a port from 1 to 65535), got "${v}"`,
    });
  }
  assert.throws(
    () => parse({ grpcAddr: "0.0.0.0:7234", grpcAdvertiseAddr: "orbit-0:7234" }),
    new ConfigError("--grpc-advertise-addr requires --cluster"),
  );
  assert.throws(
    () => parse({ cluster: true, grpcAdvertiseAddr: "orbit-0:7234" }),
    new ConfigError(
      "--grpc-advertise-addr requires --grpc-addr (it is where this server's gRPC binding is reached)",
    ),
  );
});

Deno.test("config: the advertised addresses' defaults come from where the server listens", () => {
  assert.equal(advertisedAddr("127.0.0.1", 7233, false), "http://127.0.0.1:7233");
  assert.equal(advertisedAddr("::1", 7233, true), "https://[::1]:7233");
  assert.equal(advertisedAddr("0.0.0.0", 7233, false), null);
  assert.equal(advertisedGrpcAddr("127.0.0.1", 41234), "127.0.0.1:41234");
  assert.equal(advertisedGrpcAddr("orbit-0.orbit.internal", 7234), "orbit-0.orbit.internal:7234");
  assert.equal(advertisedGrpcAddr("::1", 7234), "[::1]:7234");
  for (const wildcard of ["0.0.0.0", "::"]) assert.equal(advertisedGrpcAddr(wildcard, 7234), null);
});

Deno.test({
  name:
    "config: the server refuses a bad --grpc-advertise-addr (ORBIT_GRPC_ADVERTISE_ADDR) with exit 2",
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    const main = new URL("../main.ts", import.meta.url).pathname;
    const out = await runDeno(
      ["run", "-A", main, "server", "--cluster", "--db", FLAGS.db, "--grpc-addr", ":0"],
      { env: { ORBIT_GRPC_ADVERTISE_ADDR: "grpc://orbit-0:7234" } },
    );
    assert.equal(out.code, 2, out.stderr);
    assert.equal(
      out.stderr.trim(),
      'error: --grpc-advertise-addr must be host:port such as orbit-0.orbit.internal:7234 (the address gRPC clients dial: no scheme, a port from 1 to 65535), got "grpc://orbit-0:7234"',
    );
  },
});
