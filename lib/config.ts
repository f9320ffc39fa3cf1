/**
 * Server configuration: the flags and `ORBIT_*` variables of SPEC §5 and the reference page,
 * checked with zod into one typed object. Every message names the option and what it needs.
 */
import { z } from "zod";
import { DEFAULT_CACHE_EXECUTIONS } from "./executions/cache.ts";
import { DEFAULT_EXPRESSION_BUDGET } from "./engine/expr.ts";
import { type ChildLimitOptions, DEFAULT_CHILD_LIMITS } from "./steps/children.ts";

export interface ServerConfig {
  db: string;
  dbKind: "sqlite" | "postgres";
  hostname: string;
  port: number;
  /** `--grpc-addr`: where the gRPC binding listens (lib/grpc/server.ts); null: no gRPC. */
  grpcAddr: { hostname: string; port: number } | null;
  /**
   * `--grpc-advertise-addr`: the `host:port` gRPC clients dial for this server, recorded with the
   * cluster (standbys name it in `orbit-leader`); null: derived from `--grpc-addr` once it listens
   * (advertisedGrpcAddr).
   */
  grpcAdvertiseAddr: string | null;
  token: string | null;
  workersFile: string | null;
  tlsCert: string | null;
  tlsKey: string | null;
  sessionTimeoutMs: number;
  maxActiveExecutions: number | null;
  /** Executions held in memory beyond which idle ones leave it (lib/executions/cache.ts). */
  cacheExecutions: number;
  /** `--max-child-depth`, `--max-children-per-execution`, `--max-descendants`. */
  childLimits: ChildLimitOptions;
  httpAllow: string[];
  /** Without a token: Host names served besides IP addresses, localhost and the listen name. */
  allowedHosts: string[];
  ui: boolean;
  logFormat: "text" | "json";
  logLevel: "trace" | "debug" | "info" | "warning" | "error" | "fatal";
  maxBodyBytes: number;
  /** A new connection's time to deliver its first request head (lib/http_server.ts). */
  headerTimeoutMs: number;
  /** How long a connection without a request in progress stays open. */
  idleTimeoutMs: number;
  cluster: boolean;
  clusterMode: "standby" | "shared";
  nodeId: string | null;
  advertiseAddr: string | null;
  nodeTimeoutS: number;
  /** Running time one expression evaluation may take (lib/engine/expr.ts). */
  expressionTimeoutMs: number;
}

export class ConfigError extends Error {
  override name = "ConfigError";
}

const number = (flag: string, min: number) =>
  z.union([z.string(), z.number()]).transform((v, ctx) => {
    const n = typeof v === "number" ? v : Number(v);
    if (!Number.isFinite(n) || n < min || (typeof v === "string" && v.trim() === "")) {
      ctx.addIssue({
        code: "custom",
        message: `${flag} must be a number of at least ${min}, got "${v}"`,
      });
      return z.NEVER;
    }
    return n;
  });

/** `host:port` a client can dial: a host name, an IPv4 address or `[v6]`, and a port 1–65535. */
function dialable(v: string): boolean {
  const m = /^(?:\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?):(\d{1,5})$/
    .exec(v);
  return m !== null && Number(m[1]) >= 1 && Number(m[1]) <= 65535;
}

const raw = z.object({
  db: z.string().min(1, "--db must not be empty"),
  addr: z.string(),
  grpcAddr: z.string().optional(),
  grpcAdvertiseAddr: z.string().refine(dialable, {
    error: (issue) =>
      `--grpc-advertise-addr must be host:port such as orbit-0.orbit.internal:7234 (the address gRPC clients dial: no scheme, a port from 1 to 65535), got "${issue.input}"`,
  }).optional(),
  token: z.string().optional(),
  workersFile: z.string().optional(),
  tlsCert: z.string().optional(),
  tlsKey: z.string().optional(),
  sessionTimeout: number("--session-timeout", 1),
  maxActiveExecutions: number("--max-active-executions", 1).optional(),
  cacheExecutions: number("--cache-executions", 0).optional(),
  maxChildDepth: number("--max-child-depth", 0).optional(),
  maxChildrenPerExecution: number("--max-children-per-execution", 0).optional(),
  maxDescendants: number("--max-descendants", 0).optional(),
  httpAllow: z.union([z.string(), z.array(z.string())]).optional(),
  allowedHosts: z.union([z.string(), z.array(z.string())]).optional(),
  ui: z.boolean().default(true),
  logFormat: z.enum(["text", "json"], { message: "--log-format must be text or json" }),
  logLevel: z.enum(["trace", "debug", "info", "warn", "warning", "error", "fatal"], {
    message: "--log-level must be one of trace, debug, info, warn, error, fatal",
  }),
  maxBodyBytes: number("--max-body-bytes", 1024),
  headerTimeout: number("--header-timeout", 0.1),
  idleTimeout: number("--idle-timeout", 0.1),
  cluster: z.union([z.boolean(), z.string()]).optional(),
  clusterMode: z.enum(["standby", "shared"], {
    message: "--cluster-mode must be standby or shared",
  }),
  nodeId: z.string().optional(),
  advertiseAddr: z.string().optional(),
  nodeTimeout: number("--node-timeout", 2),
  expressionTimeoutMs: number("--expression-timeout-ms", 1).optional(),
});

/** A wildcard listen address: it names no host a client could reach. */
function wildcard(hostname: string): boolean {
  return ["0.0.0.0", "::", "[::]"].includes(hostname);
}

/**
 * `--advertise-addr`'s default: `http(s)://<host:port>` of where HTTP listens, none for a wildcard
 * address.
 */
export function advertisedAddr(hostname: string, port: number, tls: boolean): string | null {
  const host = hostname.includes(":") ? `[${hostname}]` : hostname;
  return wildcard(hostname) ? null : `${tls ? "https" : "http"}://${host}:${port}`;
}

/**
 * `--grpc-advertise-addr`'s default: `<host:port>` of where gRPC listens (`--grpc-addr`, its
 * port once bound), none for a wildcard address.
 */
export function advertisedGrpcAddr(hostname: string, port: number): string | null {
  const host = hostname.includes(":") ? `[${hostname}]` : hostname;
  return wildcard(hostname) ? null : `${host}:${port}`;
}

/** Splits `host:port` (`[v6]:port` too); a bare `:port` listens on 127.0.0.1. */
export function parseAddr(addr: string, flag = "--addr"): { hostname: string; port: number } {
  const m = addr.match(/^(?:\[([0-9a-fA-F:.]+)\]|([A-Za-z0-9.-]*)):(\d{1,5})$/);
  const port = m ? Number(m[3]) : NaN;
  if (!m || port > 65535) {
    throw new ConfigError(`${flag} must be host:port such as 127.0.0.1:7233, got "${addr}"`);
  }
  return { hostname: m[1] ?? (m[2] || "127.0.0.1"), port };
}

function truthy(v: boolean | string | undefined): boolean {
  if (typeof v === "boolean") return v;
  if (v === undefined) return false;
  return ["1", "true", "yes", "on"].includes(v.toLowerCase());
}

export function parseServerConfig(input: Record<string, unknown>): ServerConfig {
  const r = raw.safeParse(input);
  if (!r.success) throw new ConfigError(r.error.issues.map((i) => i.message).join("; "));
  const o = r.data;
  const { hostname, port } = parseAddr(o.addr);
  const dbKind = /^postgres(ql)?:\/\//.test(o.db) ? "postgres" : "sqlite";
  const cluster = truthy(o.cluster);
  if (cluster && dbKind !== "postgres") {
    throw new ConfigError(
      "--cluster requires a PostgreSQL database (--db postgres://...): the servers share it for leader election and history",
    );
  }
  if (o.clusterMode === "shared" && !cluster) {
    throw new ConfigError(
      "--cluster-mode shared requires --cluster (every server of the cluster takes part)",
    );
  }
  for (
    const [flag, v] of [
      ["--node-id", o.nodeId],
      ["--advertise-addr", o.advertiseAddr],
      ["--grpc-advertise-addr", o.grpcAdvertiseAddr],
    ] as const
  ) {
    if (v !== undefined && !cluster) throw new ConfigError(`${flag} requires --cluster`);
  }
  if (o.grpcAdvertiseAddr !== undefined && !o.grpcAddr) {
    throw new ConfigError(
      "--grpc-advertise-addr requires --grpc-addr (it is where this server's gRPC binding is reached)",
    );
  }
  if ((o.tlsCert === undefined) !== (o.tlsKey === undefined)) {
    throw new ConfigError("--tls-cert and --tls-key must be given together");
  }
  if (o.maxActiveExecutions !== undefined && !Number.isInteger(o.maxActiveExecutions)) {
    throw new ConfigError("--max-active-executions must be a whole number");
  }
  if (o.cacheExecutions !== undefined && !Number.isInteger(o.cacheExecutions)) {
    throw new ConfigError("--cache-executions must be a whole number");
  }
  for (
    const [flag, v] of [
      ["--max-child-depth", o.maxChildDepth],
      ["--max-children-per-execution", o.maxChildrenPerExecution],
      ["--max-descendants", o.maxDescendants],
    ] as const
  ) {
    if (v !== undefined && !Number.isInteger(v)) {
      throw new ConfigError(`${flag} must be a whole number`);
    }
  }
  const list = (v: string | string[] | undefined) =>
    (Array.isArray(v) ? v : v ? [v] : []).flatMap((s) => s.split(",")).map((s) => s.trim())
      .filter(Boolean);
  const allow = list(o.httpAllow);
  const allowedHosts = list(o.allowedHosts);
  for (const h of allowedHosts) {
    if (h !== "*" && !/^\.?[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?\.?$/.test(h)) {
      throw new ConfigError(
        `--allowed-hosts takes host names (orbit.example.com), .domains (.example.com, the domain and every name under it) or *, without a port or scheme; got "${h}"`,
      );
    }
  }
  const level = o.logLevel === "warn" ? "warning" : o.logLevel;
  return {
    db: o.db,
    dbKind,
    hostname,
    port,
    grpcAddr: o.grpcAddr ? parseAddr(o.grpcAddr, "--grpc-addr") : null,
    grpcAdvertiseAddr: o.grpcAdvertiseAddr ?? null,
    token: o.token && o.token !== "" ? o.token : null,
    workersFile: o.workersFile ?? null,
    tlsCert: o.tlsCert ?? null,
    tlsKey: o.tlsKey ?? null,
    sessionTimeoutMs: Math.round(o.sessionTimeout * 1000),
    maxActiveExecutions: o.maxActiveExecutions ?? null,
    cacheExecutions: o.cacheExecutions ?? DEFAULT_CACHE_EXECUTIONS,
    childLimits: {
      maxDepth: o.maxChildDepth ?? DEFAULT_CHILD_LIMITS.maxDepth,
      maxChildren: o.maxChildrenPerExecution ?? DEFAULT_CHILD_LIMITS.maxChildren,
      maxDescendants: o.maxDescendants ?? DEFAULT_CHILD_LIMITS.maxDescendants,
    },
    httpAllow: allow,
    allowedHosts,
    ui: o.ui,
    logFormat: o.logFormat,
    logLevel: level,
    maxBodyBytes: Math.round(o.maxBodyBytes),
    headerTimeoutMs: Math.round(o.headerTimeout * 1000),
    idleTimeoutMs: Math.round(o.idleTimeout * 1000),
    cluster,
    clusterMode: o.clusterMode,
    nodeId: o.nodeId ?? null,
    advertiseAddr: o.advertiseAddr ?? null,
    nodeTimeoutS: o.nodeTimeout,
    expressionTimeoutMs: Math.round(
      o.expressionTimeoutMs ?? DEFAULT_EXPRESSION_BUDGET.timeoutMs,
    ),
  };
}
