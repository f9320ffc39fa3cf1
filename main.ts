#!/usr/bin/env -S deno run -A --unstable-no-legacy-abort
/**
 * `orbit`: the one binary. `orbit server …` runs the runtime; the other subcommands are the
 * client CLI (SPEC §7). This is the only module that reads `Deno.env`, parses flags and starts
 * the HTTP server (lib/http_server.ts).
 */
import { Command, Option } from "commander";
import {
  advertisedAddr,
  advertisedGrpcAddr,
  ConfigError,
  parseServerConfig,
  type ServerConfig,
} from "./lib/config.ts";
import { log, setupLogging } from "./lib/log.ts";
import { Runtime, type RuntimeOptions } from "./lib/runtime.ts";
import { openStore } from "./lib/store/open.ts";
import type { Store } from "./lib/store/store.ts";
import { StandbyNode } from "./cluster/standby_node.ts";
import { SharedNode } from "./cluster/shared/node.ts";
import { createApp } from "./routes/app.ts";
import { serveHttp } from "./lib/http_server.ts";
import type { GrpcServer } from "./lib/grpc/server.ts";
import { hostPolicy } from "./routes/browsers.ts";
import { RUNTIME_VERSION } from "./lib/version.ts";
import { registerClientCommands } from "./cli/commands.ts";
import { parseWorkersFile, type WorkersFile } from "./lib/workers/identities.ts";
import { settledBy } from "./lib/with_timeout.ts";
import { configureExpressions, DEFAULT_EXPRESSION_BUDGET } from "./lib/engine/expr.ts";
import { EXPRESSION_WORKER_NAME, WorkerSandbox } from "./lib/expressions/sandbox.ts";
import { runExpressionWorker } from "./lib/expressions/worker.ts";

/**
 * How long a graceful stop (SIGTERM, Ctrl+C) waits for in-flight requests and appends before it
 * goes on without them. Shared mode: the reference page has a stopping server's executions taken
 * over "within about a second", and the others take over only once it has left. Otherwise a
 * stuck request only delays the exit.
 */
const STOP_GRACE_MS = { shared: 1_000, other: 10_000 };

/** `--node-id` default: $HOSTNAME, then /etc/hostname. */
function hostName(): string {
  const env = Deno.env.get("HOSTNAME");
  if (env) return env;
  try {
    return Deno.readTextFileSync("/etc/hostname").trim() || Deno.hostname();
  } catch {
    return Deno.hostname();
  }
}

function fail(message: string): never {
  console.error(`error: ${message}`);
  Deno.exit(2);
}

async function readOrFail(path: string, flag: string): Promise<string> {
  try {
    return await Deno.readTextFile(path);
  } catch (e) {
    fail(`cannot read ${flag} ${path}: ${(e as Error).message}`);
  }
}

/** The workers file, checked before anything else starts (routes/worker_auth.ts uses it). */
async function loadWorkersFile(path: string, clientToken: string | null): Promise<WorkersFile> {
  const text = await readOrFail(path, "--workers-file");
  try {
    return parseWorkersFile(text, path, { clientToken });
  } catch (e) {
    if (e instanceof ConfigError) fail(e.message);
    throw e;
  }
}

async function runServer(cfg: ServerConfig): Promise<void> {
  setupLogging(cfg.logFormat, cfg.logLevel);
  const workers = cfg.workersFile ? await loadWorkersFile(cfg.workersFile, cfg.token) : null;
  let tls: { cert: string; key: string } | null = null;
  if (cfg.tlsCert && cfg.tlsKey) {
    tls = {
      cert: await readOrFail(cfg.tlsCert, "--tls-cert"),
      key: await readOrFail(cfg.tlsKey, "--tls-key"),
    };
    // Parsed the way Deno.serve parses them, before the database opens: a file that is not a
    // PEM certificate or key, or a key of another certificate, is one line, not a stack trace.
    try {
      Deno.createHttpClient(tls).close();
    } catch (e) {
      fail(
        `cannot use --tls-cert ${cfg.tlsCert} with --tls-key ${cfg.tlsKey}: ${
          (e as Error).message
        }`,
      );
    }
  }
  // User expressions run in worker threads with a hard deadline, never in this thread.
  const budget = { ...DEFAULT_EXPRESSION_BUDGET, timeoutMs: cfg.expressionTimeoutMs };
  const sandbox = new WorkerSandbox({
    budget,
    onTerminated: (text, ms) =>
      log.engine.warn("an expression ran past its deadline; its worker was stopped", {
        expression: text.slice(0, 120),
        ms: Math.round(ms),
      }),
  });
  configureExpressions({ budget, sandbox });
  const hosts = cfg.token ? null : hostPolicy(cfg.hostname, cfg.advertiseAddr, cfg.allowedHosts);
  if (hosts) {
    log.server.warn(
      "no --token given: every client that can reach the address may use the API; requests for another Host (DNS rebinding) and from other sites' web pages (Origin) are refused",
      {
        allowed_hosts: hosts.any
          ? "*"
          : ["IP addresses", "localhost", ...hosts.names, ...hosts.domains].join(","),
      },
    );
  } else if (cfg.allowedHosts.length > 0) {
    log.server.info("--allowed-hosts is not used with --token: every Host is served");
  }
  const open = async (term: number | null) => {
    try {
      return await openStore(cfg.db, term === null ? {} : { fence: () => term });
    } catch (e) {
      if (term !== null) throw e;
      fail(
        `cannot open database ${cfg.dbKind === "postgres" ? "(PostgreSQL)" : cfg.db}: ${
          (e as Error).message
        }`,
      );
    }
  };
  const runtime = (
    store: Store,
    readOnly: boolean,
    cluster: StandbyNode | SharedNode | null,
    shared: RuntimeOptions["shared"] = null,
  ) =>
    new Runtime(store, {
      sessionTimeoutMs: cfg.sessionTimeoutMs,
      maxActiveExecutions: cfg.maxActiveExecutions,
      cacheExecutions: cfg.cacheExecutions,
      childLimits: cfg.childLimits,
      httpAllow: cfg.httpAllow,
      cluster,
      readOnly,
      shared,
    });
  const appOptions = {
    token: cfg.token,
    maxBodyBytes: cfg.maxBodyBytes,
    ui: cfg.ui,
    workers,
    hosts,
  };
  if (workers) {
    log.server.info("workers file loaded", { path: workers.path, workers: workers.workers.length });
  }

  // Standby mode is a strategy over the same runtime: cluster/standby_node.ts swaps a fenced leader
  // runtime in on election and out on step-down; a single server has one runtime.
  let node: StandbyNode | null = null;
  let sharedNode: SharedNode | null = null;
  let single: Runtime | null = null;
  let handler: (req: Request, info: Deno.ServeHandlerInfo) => Response | Promise<Response>;
  if (cfg.cluster && cfg.clusterMode === "shared") {
    // Shared mode: every server active; a strategy over the same runtime (cluster/shared/node.ts).
    const n: SharedNode = sharedNode = new SharedNode({
      url: cfg.db,
      nodeId: cfg.nodeId ?? hostName(),
      nodeTimeoutMs: cfg.nodeTimeoutS * 1000,
      sessionTimeoutMs: cfg.sessionTimeoutMs,
      runtime: (store, shared) => runtime(store, false, n, shared),
      app: (rt) => createApp(rt, appOptions),
      onFatal: (message) => {
        console.error(`error: ${message}`);
        Deno.exit(1);
      },
    });
    try {
      await n.open();
    } catch (e) {
      await n.abort();
      fail(`cannot open database (PostgreSQL): ${(e as Error).message}`);
    }
    handler = n.fetch;
  } else if (cfg.cluster) {
    const n: StandbyNode = node = new StandbyNode({
      url: cfg.db,
      nodeId: cfg.nodeId ?? hostName(),
      openStore: (term) => open(term),
      runtime: (store, readOnly) => runtime(store, readOnly, n),
      app: (rt) => createApp(rt, { ...appOptions, gate: n }),
    });
    await n.open();
    handler = n.fetch;
  } else {
    single = runtime(await open(null), false, null);
    await single.start();
    handler = createApp(single, appOptions).fetch;
  }
  /** This server's advertised addresses (`--advertise-addr`, `--grpc-advertise-addr`). */
  let advertise: string | null = null;
  let grpcAdvertise: string | null = null;
  const server = serveHttp({
    hostname: cfg.hostname,
    port: cfg.port,
    tls,
    headerTimeoutMs: cfg.headerTimeoutMs,
    idleTimeoutMs: cfg.idleTimeoutMs,
    onListen: ({ hostname, port }) => {
      advertise = cfg.advertiseAddr ?? advertisedAddr(hostname, port, tls !== null);
      const host = hostname.includes(":") ? `[${hostname}]` : hostname;
      // The reference page's order: the cluster mode line, then the listening line.
      if (node) {
        log.cluster.info("cluster mode: standby until elected", {
          node_id: node.nodeId,
          advertise_addr: advertise,
        });
      }
      if (sharedNode) {
        log.shared.info("cluster mode: shared (every server active)", {
          node_id: sharedNode.nodeId,
          advertise_addr: advertise,
          node_timeout_ms: cfg.nodeTimeoutS * 1000,
        });
      }
      log.server.info("ORBIT runtime listening", {
        addr: `${host}:${port}`,
        tls: tls !== null,
        ui: cfg.ui,
      });
    },
    onError: (e) => {
      log.server.error("request failed", { error: (e as Error).message });
      return new Response(
        JSON.stringify({ error: { code: "INTERNAL", message: "internal error" } }),
        {
          status: 500,
          headers: { "content-type": "application/json" },
        },
      );
    },
  }, handler);

  // The gRPC binding: the same handler behind it (lib/grpc/server.ts), off without --grpc-addr.
  let grpcServer: GrpcServer | null = null;
  if (cfg.grpcAddr) {
    try {
      // Loaded only here: @grpc/grpc-js and protobufjs take half a second to load.
      const { startGrpcServer } = await import("./lib/grpc/server.ts");
      grpcServer = await startGrpcServer({
        ...cfg.grpcAddr,
        handler,
        gate: node,
        tls,
        maxBodyBytes: cfg.maxBodyBytes,
      });
    } catch (e) {
      fail(`cannot listen on --grpc-addr: ${(e as Error).message}`);
    }
    grpcAdvertise = cfg.grpcAdvertiseAddr ??
      advertisedGrpcAddr(cfg.grpcAddr.hostname, grpcServer.port);
    log.server.info("ORBIT gRPC listening", {
      addr: `${cfg.grpcAddr.hostname}:${grpcServer.port}`,
      tls: tls !== null,
      ...(cfg.cluster ? { advertise_addr: grpcAdvertise } : {}),
    });
  }

  // The cluster is joined once both listeners are bound: the leader record (standby mode) and
  // the node row (shared mode) carry both advertised addresses.
  const addrs = { http: advertise, grpc: grpcAdvertise };
  node?.start(addrs);
  if (sharedNode) {
    const n = sharedNode;
    n.start(addrs).catch(async (e) => {
      console.error(`error: ${(e as Error).message}`);
      await n.abort();
      Deno.exit(2);
    });
  }

  if (!server.timeouts) {
    log.server.warn(
      "this Deno has no per-connection HTTP server: --header-timeout and --idle-timeout are not enforced",
    );
  }

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.server.info("shutting down; finishing in-flight appends", { signal });
    // In-flight requests and appends get a bounded time (STOP_GRACE_MS): one stuck on the
    // database, or waiting for another server's reply, must not hold the stop (in shared mode
    // the node heartbeats until it leaves, so its executions would wait that long).
    const grace = sharedNode ? STOP_GRACE_MS.shared : STOP_GRACE_MS.other;
    const deadline = Date.now() + grace;
    // Release long polls and waits first, so the listener can drain quickly.
    const rt = node?.runtime ?? sharedNode?.runtime ?? single!;
    rt.workers.stop();
    rt.executions.stop();
    if (!await settledBy(Promise.all([server.shutdown(), grpcServer?.shutdown()]), deadline)) {
      log.server.warn("requests still in flight after the grace period; stopping without them", {
        grace_ms: grace,
      });
    }
    if (node) await node.stop();
    else if (sharedNode) await sharedNode.stop(deadline);
    else await single!.stop();
    log.server.info("stopped");
    sandbox.close();
    Deno.exit(0);
  };
  Deno.addSignalListener("SIGTERM", () => stop("SIGTERM"));
  Deno.addSignalListener("SIGINT", () => stop("SIGINT"));
  await server.finished;
}

const program = new Command("orbit")
  .description("ORBIT durable workflow runtime")
  .version(RUNTIME_VERSION);

program.command("server")
  .description("Run the ORBIT server")
  .addOption(
    new Option("--db <url>", "SQLite file, or postgres://… for PostgreSQL").env("ORBIT_DB").default(
      "orbit.db",
    ),
  )
  .addOption(
    new Option("--addr <host:port>", "address to listen on").env("ORBIT_ADDR").default(
      "127.0.0.1:7233",
    ),
  )
  .addOption(
    new Option("--grpc-addr <host:port>", "address of the gRPC binding (none: no gRPC)").env(
      "ORBIT_GRPC_ADDR",
    ),
  )
  .addOption(
    new Option("--token <token>", "bearer token clients must send (none: open API)").env(
      "ORBIT_TOKEN",
    ),
  )
  .addOption(
    new Option("--workers-file <path>", "worker identities, tokens and tasks").env(
      "ORBIT_WORKERS_FILE",
    ),
  )
  .addOption(new Option("--tls-cert <path>", "TLS certificate (PEM)").env("ORBIT_TLS_CERT"))
  .addOption(new Option("--tls-key <path>", "TLS private key (PEM)").env("ORBIT_TLS_KEY"))
  .addOption(
    new Option(
      "--session-timeout <seconds>",
      "seconds after a worker's last contact before its attempts are redelivered",
    )
      .env("ORBIT_SESSION_TIMEOUT").default("30"),
  )
  .addOption(
    new Option("--max-active-executions <n>", "running executions beyond which starts answer 429")
      .env("ORBIT_MAX_ACTIVE_EXECUTIONS"),
  )
  .addOption(
    new Option(
      "--cache-executions <n>",
      "executions held in memory beyond which idle waiting ones are evicted (default 10000)",
    ).env("ORBIT_CACHE_EXECUTIONS"),
  )
  .addOption(
    new Option("--max-child-depth <n>", "deepest child workflow (a root is depth 0; default 32)")
      .env("ORBIT_MAX_CHILD_DEPTH"),
  )
  .addOption(
    new Option(
      "--max-children-per-execution <n>",
      "child workflows one execution runs at once (default 1000)",
    ).env("ORBIT_MAX_CHILDREN_PER_EXECUTION"),
  )
  .addOption(
    new Option(
      "--max-descendants <n>",
      "running child workflows in one root execution's tree (default 10000)",
    ).env("ORBIT_MAX_DESCENDANTS"),
  )
  .addOption(
    new Option("--http-allow <patterns>", "hosts the HTTP adapter may call (comma-separated)").env(
      "ORBIT_HTTP_ALLOW",
    ),
  )
  .addOption(
    new Option(
      "--allowed-hosts <names>",
      "without --token: Host names served besides IP addresses and localhost (comma-separated; .example.com for a domain, * for any)",
    ).env("ORBIT_ALLOWED_HOSTS"),
  )
  .addOption(new Option("--no-ui", "do not serve the web UI at /"))
  .addOption(
    new Option("--log-format <format>", "text or json").env("ORBIT_LOG_FORMAT").default("text"),
  )
  .addOption(
    new Option("--log-level <level>", "trace, debug, info, warn, error").env("ORBIT_LOG_LEVEL")
      .default("info"),
  )
  .addOption(
    new Option("--max-body-bytes <n>", "largest request body accepted").env("ORBIT_MAX_BODY_BYTES")
      .default("1048576"),
  )
  .addOption(
    new Option(
      "--header-timeout <seconds>",
      "seconds a new connection has to send its first request's head",
    ).env("ORBIT_HEADER_TIMEOUT").default("20"),
  )
  .addOption(
    new Option(
      "--idle-timeout <seconds>",
      "seconds a connection may stay open without a request in progress",
    ).env("ORBIT_IDLE_TIMEOUT").default("65"),
  )
  .addOption(
    new Option("--cluster", "take part in leader election (PostgreSQL only)").env("ORBIT_CLUSTER"),
  )
  .addOption(
    new Option("--cluster-mode <mode>", "standby or shared").env("ORBIT_CLUSTER_MODE").default(
      "standby",
    ),
  )
  .addOption(new Option("--node-id <id>", "this server's name in the cluster").env("ORBIT_NODE_ID"))
  .addOption(
    new Option("--advertise-addr <url>", "URL standbys hand out for this server").env(
      "ORBIT_ADVERTISE_ADDR",
    ),
  )
  .addOption(
    new Option(
      "--grpc-advertise-addr <host:port>",
      "gRPC address standbys hand out for this server (default: from --grpc-addr)",
    ).env("ORBIT_GRPC_ADVERTISE_ADDR"),
  )
  .addOption(
    new Option(
      "--expression-timeout-ms <ms>",
      "running time one expression evaluation may take before it fails with EXPRESSION_LIMIT",
    ).env("ORBIT_EXPRESSION_TIMEOUT_MS").default("1000"),
  )
  .addOption(
    new Option("--node-timeout <seconds>", "shared mode: seconds without heartbeat").env(
      "ORBIT_NODE_TIMEOUT",
    ).default("5"),
  )
  .action(async (opts: Record<string, unknown>) => {
    let cfg: ServerConfig;
    try {
      cfg = parseServerConfig(opts);
    } catch (e) {
      if (e instanceof ConfigError) fail(e.message);
      throw e;
    }
    await runServer(cfg);
  });

registerClientCommands(program);

if ((globalThis as { name?: string }).name === EXPRESSION_WORKER_NAME) {
  // The bundle (and a compiled binary) has no separate worker file: the expression sandbox's
  // workers run this module under their name (lib/expressions/sandbox.ts).
  runExpressionWorker();
} else if (import.meta.main) {
  await program.parseAsync(Deno.args, { from: "user" });
}
