/**
 * `orbit`: the one binary. `orbit server …` runs the runtime; the other subcommands are the
 * client CLI (SPEC §7). This is the only module that reads `Deno.env`, parses flags and calls
 * `Deno.serve`.
 */
import { Command, Option } from "commander";
import { ConfigError, parseServerConfig, type ServerConfig } from "./lib/config.ts";
import { log, setupLogging } from "./lib/log.ts";
import { Runtime } from "./lib/runtime.ts";
import { openStore } from "./lib/store/open.ts";
import { createApp } from "./routes/app.ts";
import { RUNTIME_VERSION } from "./lib/version.ts";
import { registerClientCommands } from "./lib/cli/commands.ts";

function fail(message: string): never {
  console.error(`error: ${message}`);
  Deno.exit(2);
}

async function runServer(cfg: ServerConfig): Promise<void> {
  setupLogging(cfg.logFormat, cfg.logLevel);
  if (cfg.cluster) {
    fail("--cluster is not available in this version yet; run a single server");
  }
  if (cfg.workersFile) {
    fail("--workers-file is not available in this version yet");
  }
  let tls: { cert: string; key: string } | null = null;
  if (cfg.tlsCert && cfg.tlsKey) {
    try {
      tls = {
        cert: await Deno.readTextFile(cfg.tlsCert),
        key: await Deno.readTextFile(cfg.tlsKey),
      };
    } catch (e) {
      fail(`cannot read --tls-cert/--tls-key: ${(e as Error).message}`);
    }
  }
  if (!cfg.token) {
    log.server.warn("no --token given: every client that can reach the address may use the API");
  }
  let store;
  try {
    store = await openStore(cfg.db);
  } catch (e) {
    fail(
      `cannot open database ${cfg.dbKind === "postgres" ? "(PostgreSQL)" : cfg.db}: ${
        (e as Error).message
      }`,
    );
  }
  const rt = new Runtime(store, {
    sessionTimeoutMs: cfg.sessionTimeoutMs,
    maxActiveExecutions: cfg.maxActiveExecutions,
  });
  await rt.start();
  const app = createApp(rt, { token: cfg.token, maxBodyBytes: cfg.maxBodyBytes, ui: cfg.ui });
  const server = Deno.serve({
    hostname: cfg.hostname,
    port: cfg.port,
    ...(tls ?? {}),
    onListen: ({ hostname, port }) => {
      const host = hostname.includes(":") ? `[${hostname}]` : hostname;
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
  }, app.fetch);

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.server.info("shutting down; finishing in-flight appends", { signal });
    // Release long polls and waits first, so the listener can drain quickly.
    rt.workers.stop();
    rt.executions.stop();
    await server.shutdown();
    await rt.stop();
    log.server.info("stopped");
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
    new Option("--http-allow <patterns>", "hosts the HTTP adapter may call (comma-separated)").env(
      "ORBIT_HTTP_ALLOW",
    ),
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

if (import.meta.main) {
  await program.parseAsync(Deno.args, { from: "user" });
}
