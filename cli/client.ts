/**
 * The client CLI's plumbing (cli/commands.ts): the context every subcommand runs with, the
 * options they share, error printing and exit codes, and argument parsers.
 */
import { type Command, type CommanderError, InvalidArgumentError, Option } from "commander";
import { ApiError, DEFAULT_SERVER, normalizeServer, OrbitHttp, UnreachableError } from "./http.ts";
import { CliError, EXIT, str, usageError } from "./output.ts";

export interface Ctx {
  http: OrbitHttp;
  json: boolean;
}

export type Json = Record<string, unknown>;

export function out(line: string): void {
  console.log(line);
}

export function err(line: string): void {
  console.error(line);
}

export function printJson(v: unknown): void {
  out(JSON.stringify(v));
}

/** Commander's own errors (unknown option, missing argument, bad value) are usage errors. */
export function commanderExit(e: CommanderError): never {
  Deno.exit(e.exitCode === 0 ? EXIT.OK : EXIT.USAGE);
}

export function printApiError(e: ApiError, context?: string): void {
  err(`error: ${e.code}: ${e.message}${context ? ` (${context})` : ""}`);
  const problems = e.details.problems;
  if (Array.isArray(problems)) {
    for (const p of problems) {
      if (p && typeof p === "object") {
        const { path, message } = p as { path?: unknown; message?: unknown };
        err(`  ${str(path)}: ${str(message)}`);
      }
    }
  }
  if (e.status === 401) err("  (pass --token or set ORBIT_TOKEN)");
}

/** Prints an error and answers its exit code. */
export function report(e: unknown, json: boolean): number {
  if (e instanceof CliError) {
    err(`error: ${e.code ? `${e.code}: ` : ""}${e.message}`);
    for (const l of e.lines) err(`  ${l}`);
    return e.exitCode;
  }
  if (e instanceof ApiError) {
    if (json && e.body !== null && typeof e.body === "object") printJson(e.body);
    printApiError(e);
    return EXIT.FAILED;
  }
  if (e instanceof UnreachableError) {
    err(`error: ${e.message}`);
    return EXIT.UNREACHABLE;
  }
  err(`error: ${(e as Error)?.message ?? String(e)}`);
  return EXIT.FAILED;
}

export interface ClientOptions {
  server: string;
  token?: string;
  json?: boolean;
  grpc?: string;
  [key: string]: unknown;
}

/** `--grpc`'s requests: a fetch over the gRPC binding, and the gRPC address a URL stands for. */
interface GrpcTransport {
  fetch: typeof fetch;
  /** The gRPC address the requests to `url` go to. */
  addrOf(url: string): string;
  /** How `addrOf(url)` was found, for the redirect note. */
  howOf(url: string): string;
  close(): void;
}

/**
 * `--grpc host:port`: the requests go over the gRPC binding (lib/grpc/fetch.ts, loaded on the
 * first request: @grpc/grpc-js takes half a second to load); `close` ends its channels.
 *
 * OrbitHttp (cli/http.ts) follows NOT_LEADER by the leader's HTTP address (`x-orbit-leader`,
 * from the binding's `orbit-leader-http`); the request it repeats there goes to the leader's gRPC
 * address, which the standby names in `orbit-leader` (grpcFetch's `x-orbit-leader-grpc`) when
 * the leader recorded one (`--grpc-advertise-addr`, by default its `--grpc-addr`). A leader
 * without one (no gRPC address it could advertise, or a version before it recorded one) is
 * reached at its host on `--grpc`'s port: one gRPC port on every server, each on its own host.
 */
function grpcTransport(server: string, addr: string): GrpcTransport {
  const fetches = new Map<string, Promise<typeof fetch & { close(): void }>>();
  const origin = new URL(server).origin;
  const port = /:(\d+)$/.exec(addr)?.[1];
  /** A leader's gRPC address by the origin of its HTTP address, as standbys named them. */
  const leaders = new Map<string, string>();
  const addrOf = (url: string) => {
    const u = new URL(url);
    if (u.origin === origin) return addr;
    return leaders.get(u.origin) ?? (port ? `${u.hostname}:${port}` : addr);
  };
  const howOf = (url: string) =>
    leaders.has(new URL(url).origin) ? "its gRPC address" : "on --grpc's port";
  return {
    addrOf,
    howOf,
    fetch: async (input, init) => {
      const to = addrOf(input instanceof Request ? input.url : String(input));
      let f = fetches.get(to);
      if (!f) {
        f = import("../lib/grpc/fetch.ts").then((m) => m.grpcFetch({ addr: to }));
        fetches.set(to, f);
      }
      const res = await (await f)(input, init);
      const http = res.headers.get("x-orbit-leader");
      const grpc = res.headers.get("x-orbit-leader-grpc");
      if (http && grpc) {
        try {
          leaders.set(new URL(normalizeServer(http)).origin, grpc);
        } catch {
          // not a usable URL: OrbitHttp will not follow it either
        }
      }
      return res;
    },
    close: () => {
      for (const f of fetches.values()) void f.then((g) => g.close());
    },
  };
}

function serverOf(opts: ClientOptions): string {
  try {
    return normalizeServer(opts.server);
  } catch (e) {
    throw usageError(`--server ${opts.server}: not a usable URL: ${(e as Error).message}`);
  }
}

export function context(opts: ClientOptions, grpc: GrpcTransport | null = null): Ctx {
  const server = serverOf(opts);
  const http = new OrbitHttp({
    server,
    token: opts.token,
    ...(grpc ? { fetch: grpc.fetch } : {}),
    onRedirect: (from, to) =>
      err(
        grpc
          ? `note: ${grpc.addrOf(from)} is not the leader; repeating the request at ${
            grpc.addrOf(to)
          } (the leader ${to}, ${grpc.howOf(to)})`
          : `note: ${from} is not the leader; repeating the request at ${to}`,
      ),
  });
  return { http, json: opts.json === true };
}

/**
 * Wraps a subcommand: builds the context from its options, runs it, prints any error and
 * exits with the code. Commander calls actions with the declared arguments, then the options,
 * then the command.
 */
export function act(
  fn: (ctx: Ctx, args: unknown[], opts: ClientOptions) => Promise<number | void>,
): (...params: unknown[]) => Promise<void> {
  return async (...params: unknown[]) => {
    const cmd = params.at(-1) as Command;
    const opts = cmd.opts() as ClientOptions;
    let code: number;
    let grpc: GrpcTransport | null = null;
    try {
      grpc = opts.grpc ? grpcTransport(serverOf(opts), opts.grpc) : null;
      code = (await fn(context(opts, grpc), params.slice(0, -2), opts)) ?? EXIT.OK;
    } catch (e) {
      code = report(e, opts.json === true);
    }
    grpc?.close();
    // A closed grpc-js channel still holds the event loop for a while (30 s): exit now.
    if (code !== EXIT.OK || grpc) Deno.exit(code);
  };
}

/** A subcommand with the options every client subcommand shares. */
export function clientCommand(parent: Command, nameAndArgs: string, description: string): Command {
  return parent.command(nameAndArgs)
    .description(description)
    .addOption(
      new Option("--server <url>", "ORBIT server URL").env("ORBIT_SERVER").default(DEFAULT_SERVER),
    )
    .addOption(new Option("--token <token>", "bearer token").env("ORBIT_TOKEN"))
    .addOption(
      new Option("--grpc <host:port>", "send the requests over gRPC (the server's --grpc-addr)")
        .env("ORBIT_GRPC"),
    )
    .option("--json", "print the raw JSON response instead of a table")
    .exitOverride(commanderExit);
}

export function parseSeconds(v: string): number {
  const n = Number(v);
  if (v.trim() === "" || !Number.isFinite(n) || n < 0) {
    throw new InvalidArgumentError("must be a number of seconds (0 or more)");
  }
  return n;
}

export function parseCount(v: string): number {
  if (!/^\d{1,9}$/.test(v.trim())) throw new InvalidArgumentError("must be a non-negative integer");
  return Number(v);
}

/** A JSON argument, or `@FILE` for the JSON in a file. */
export async function parseJsonArg(flag: string, v: string): Promise<unknown> {
  let text = v;
  let where = flag;
  if (v.startsWith("@")) {
    const file = v.slice(1);
    where = `${flag} ${v}`;
    try {
      text = await Deno.readTextFile(file);
    } catch (e) {
      if (e instanceof Deno.errors.NotFound) throw usageError(`${where}: no such file`);
      throw usageError(`${where}: cannot read: ${(e as Error).message}`);
    }
  }
  try {
    return JSON.parse(text);
  } catch (e) {
    throw usageError(`${where} is not valid JSON: ${(e as Error).message}`);
  }
}

export const enc = encodeURIComponent;
