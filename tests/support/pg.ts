/**
 * A real PostgreSQL for tests: `initdb` into a fresh temporary directory, a server on a free
 * TCP port of 127.0.0.1 (and a Unix socket inside that directory), trust authentication, fsync
 * on. Each test gets its own database from `createDatabase()`; one server per test process
 * is shared through `sharedPostgres()`.
 *
 * ```ts
 * import { sharedPostgres } from "../tests/support/pg.ts";
 *
 * Deno.test("store commits", async () => {
 *   const pg = await sharedPostgres();
 *   const url = await pg.createDatabase(); // postgres://postgres@127.0.0.1:PORT/orbit_t_…
 *   // … open a store on `url`, close it before the test ends …
 * });
 * ```
 *
 * Lifecycle and failure handling:
 * - The server is started with `pg_ctl start -w` (it daemonizes, so no child process handle
 *   stays open inside a test and Deno's sanitizers stay quiet), then readiness is confirmed by
 *   connecting and running `SELECT 1`, retried until a deadline.
 * - A taken port (another test process won the race for it) fails the start; the start is
 *   retried on a new port.
 * - As root, `initdb` and `postgres` refuse to run, so they run as the `postgres` OS user
 *   through `runuser`, in a directory chowned to it.
 * - `stop()` is a fast shutdown; if the postmaster is still alive after it, it is killed by
 *   PID (SIGQUIT, then SIGKILL), then the directory is removed.
 * - The shared server is stopped synchronously in an `unload` listener. For exits that skip
 *   `unload` (SIGKILL of the test process, a crash) each server has a detached watchdog shell
 *   that polls the test process's PID and, once it is gone, kills the postmaster by PID and
 *   removes the directory. The watchdog ends by itself once the directory is gone.
 */
import postgres from "postgres";
import { openStore } from "../../lib/store/open.ts";

export interface PgServer {
  /** `postgres://postgres@127.0.0.1:PORT/postgres` (the maintenance database). */
  readonly url: string;
  readonly port: number;
  /** PID of the running postmaster (it changes on `restart()`). */
  readonly pid: number;
  /** The temporary directory holding the data directory, the socket and the log. */
  readonly dir: string;
  /** Creates a fresh, uniquely named database and returns its URL. */
  createDatabase(): Promise<string>;
  /** Fast shutdown, then start again on the same port and data directory. */
  restart(): Promise<void>;
  /** Fast shutdown (kill by PID if needed) and removal of the directory. Idempotent. */
  stop(): Promise<void>;
}

const READY_TIMEOUT_MS = 30_000;
const START_ATTEMPTS = 5;

let bin: string | null = null;
let dbCounter = 0;

/** Directory with `initdb`, `pg_ctl` and `postgres`. */
async function binDir(): Promise<string> {
  if (bin) return bin;
  const candidates: string[] = [];
  try {
    const out = await new Deno.Command("pg_config", { args: ["--bindir"], stderr: "null" })
      .output();
    if (out.success) candidates.push(new TextDecoder().decode(out.stdout).trim());
  } catch { /* no pg_config on PATH */ }
  try {
    const versions: string[] = [];
    for await (const e of Deno.readDir("/usr/lib/postgresql")) versions.push(e.name);
    versions.sort((a, b) => Number(b) - Number(a));
    candidates.push(...versions.map((v) => `/usr/lib/postgresql/${v}/bin`));
  } catch { /* not a Debian layout */ }
  candidates.push("/usr/local/bin", "/usr/bin", "/usr/local/pgsql/bin");
  for (const dir of candidates) {
    if (await exists(`${dir}/initdb`) && await exists(`${dir}/pg_ctl`)) return bin = dir;
  }
  throw new Error(
    `Cannot start PostgreSQL for tests: no initdb and pg_ctl found in ${candidates.join(", ")}`,
  );
}

async function exists(path: string): Promise<boolean> {
  try {
    await Deno.stat(path);
    return true;
  } catch {
    return false;
  }
}

function asRoot(): boolean {
  return Deno.uid() === 0;
}

/** Runs a PostgreSQL program, as the `postgres` OS user when we are root. */
function pgCommand(program: string, args: string[]): Deno.Command {
  const cmd = asRoot() ? "runuser" : program;
  const fullArgs = asRoot() ? ["-u", "postgres", "--", program, ...args] : args;
  return new Deno.Command(cmd, { args: fullArgs, stdin: "null", stdout: "piped", stderr: "piped" });
}

async function run(program: string, args: string[]): Promise<Deno.CommandOutput> {
  return await pgCommand(program, args).output();
}

function text(out: Deno.CommandOutput): string {
  const dec = new TextDecoder();
  return (dec.decode(out.stdout) + dec.decode(out.stderr)).trim();
}

async function postgresIds(): Promise<{ uid: number; gid: number }> {
  const passwd = await Deno.readTextFile("/etc/passwd");
  const line = passwd.split("\n").find((l) => l.startsWith("postgres:"));
  const [, , uid, gid] = line?.split(":") ?? [];
  if (!uid || !gid) {
    throw new Error("Cannot start PostgreSQL for tests as root: there is no `postgres` OS user");
  }
  return { uid: Number(uid), gid: Number(gid) };
}

function freePort(): number {
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (l.addr as Deno.NetAddr).port;
  l.close();
  return port;
}

function alive(pid: number): boolean {
  try {
    Deno.statSync(`/proc/${pid}`);
    // A zombie has exited; only its parent's wait is pending.
    const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
    return !/^\d+ \(.*\) Z/.test(stat);
  } catch {
    return false;
  }
}

function readPid(dataDir: string): number | null {
  try {
    const first = Deno.readTextFileSync(`${dataDir}/postmaster.pid`).split("\n")[0];
    const pid = Number(first);
    return Number.isInteger(pid) && pid > 0 ? pid : null;
  } catch {
    return null;
  }
}

/** Connects with `SELECT 1` until it works or the deadline passes. */
async function waitReady(url: string, deadline: number, isRunning: () => boolean): Promise<void> {
  let last: unknown = null;
  while (Date.now() < deadline) {
    if (!isRunning()) throw new Error(`PostgreSQL exited while starting: ${String(last)}`);
    const sql = postgres(url, { max: 1, connect_timeout: 2, onnotice: () => {} });
    try {
      await sql`SELECT 1`;
      return;
    } catch (e) {
      last = e;
    } finally {
      await sql.end({ timeout: 1 });
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`PostgreSQL did not accept connections in time: ${String(last)}`);
}

/** A detached shell that cleans up after this process if it dies without `unload`. */
async function startWatchdog(dir: string): Promise<void> {
  const data = `${dir}/data`;
  const script = `while [ -d '${dir}' ] && kill -0 ${Deno.pid} 2>/dev/null; do sleep 1; done
if [ -d '${dir}' ]; then
  pid=$(head -n 1 '${data}/postmaster.pid' 2>/dev/null)
  if [ -n "$pid" ]; then kill -QUIT "$pid" 2>/dev/null; sleep 2; kill -KILL "$pid" 2>/dev/null; fi
  rm -rf '${dir}'
fi`;
  // setsid -f forks and returns at once, so no child handle stays open in the caller.
  await new Deno.Command("setsid", {
    args: ["-f", "sh", "-c", script],
    stdin: "null",
    stdout: "null",
    stderr: "null",
  }).output();
}

class Server implements PgServer {
  pid = 0;
  #stopped = false;

  constructor(readonly dir: string, readonly port: number, readonly binDir: string) {}

  get url(): string {
    return this.urlFor("postgres");
  }

  urlFor(db: string): string {
    return `postgres://postgres@127.0.0.1:${this.port}/${db}`;
  }

  get dataDir(): string {
    return `${this.dir}/data`;
  }

  async start(): Promise<void> {
    const opts = [
      `-p ${this.port}`,
      `-k ${this.dir}/sock`,
      "-c listen_addresses=127.0.0.1",
      "-c max_connections=300",
      "-c fsync=on",
      // More server settings for a benchmark, e.g. `-c shared_preload_libraries=pg_stat_statements`.
      Deno.env.get("ORBIT_TEST_PG_OPTIONS") ?? "",
    ].join(" ");
    const out = await run(`${this.binDir}/pg_ctl`, [
      "start",
      "-D",
      this.dataDir,
      "-l",
      `${this.dir}/log/postgres.log`,
      "-o",
      opts,
      "-w",
      "-t",
      "60",
    ]);
    const pid = readPid(this.dataDir);
    if (!out.success || pid === null) {
      let log = "";
      try {
        log = await Deno.readTextFile(`${this.dir}/log/postgres.log`);
      } catch { /* no log yet */ }
      throw new Error(`pg_ctl start failed: ${text(out)}\n${log.slice(-2000)}`);
    }
    this.pid = pid;
    await waitReady(this.url, Date.now() + READY_TIMEOUT_MS, () => alive(pid));
  }

  async createDatabase(): Promise<string> {
    const rand = crypto.randomUUID().slice(0, 8);
    const name = `orbit_t_${Deno.pid}_${++dbCounter}_${rand}`;
    const sql = postgres(this.url, { max: 1, onnotice: () => {} });
    try {
      await sql.unsafe(`CREATE DATABASE "${name}"`);
    } finally {
      await sql.end({ timeout: 5 });
    }
    return this.urlFor(name);
  }

  async restart(): Promise<void> {
    await this.shutdown();
    // The port was free a moment ago; if another process grabbed it, wait and try again.
    for (let attempt = 1;; attempt++) {
      try {
        return await this.start();
      } catch (e) {
        if (attempt === START_ATTEMPTS) throw e;
        await this.shutdown().catch(() => {});
        await new Promise((r) => setTimeout(r, 200 * attempt));
      }
    }
  }

  /** Fast shutdown, then by PID if the postmaster outlives it. */
  async shutdown(): Promise<void> {
    const pid = readPid(this.dataDir) ?? this.pid;
    await run(`${this.binDir}/pg_ctl`, [
      "stop",
      "-D",
      this.dataDir,
      "-m",
      "fast",
      "-w",
      "-t",
      "30",
    ]);
    if (pid && alive(pid)) {
      killQuietly(pid, "SIGQUIT");
      const deadline = Date.now() + 5_000;
      while (alive(pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      if (alive(pid)) killQuietly(pid, "SIGKILL");
    }
  }

  async stop(): Promise<void> {
    if (this.#stopped) return;
    this.#stopped = true;
    try {
      await this.shutdown();
    } finally {
      await Deno.remove(this.dir, { recursive: true }).catch(() => {});
    }
  }

  /** For `unload`: no awaiting there, so everything is synchronous. */
  stopSync(): void {
    if (this.#stopped) return;
    this.#stopped = true;
    const pid = readPid(this.dataDir) ?? this.pid;
    try {
      pgCommand(`${this.binDir}/pg_ctl`, [
        "stop",
        "-D",
        this.dataDir,
        "-m",
        "fast",
        "-w",
        "-t",
        "30",
      ])
        .outputSync();
    } catch { /* fall through to the kill */ }
    if (pid && alive(pid)) killQuietly(pid, "SIGKILL");
    try {
      Deno.removeSync(this.dir, { recursive: true });
    } catch { /* already gone */ }
  }
}

function killQuietly(pid: number, signal: Deno.Signal): void {
  try {
    Deno.kill(pid, signal);
  } catch { /* already exited */ }
}

/** Initializes a new cluster in a fresh temporary directory and starts it. */
export async function startPostgres(): Promise<PgServer> {
  const dir = await Deno.makeTempDir({ prefix: "orbit-pg-" });
  try {
    await Deno.mkdir(`${dir}/sock`);
    await Deno.mkdir(`${dir}/log`);
    if (asRoot()) {
      const { uid, gid } = await postgresIds();
      for (const p of [dir, `${dir}/sock`, `${dir}/log`]) await Deno.chown(p, uid, gid);
    }
    const binaries = await binDir();
    const init = await run(`${binaries}/initdb`, [
      "-D",
      `${dir}/data`,
      "-A",
      "trust",
      "-U",
      "postgres",
      "-E",
      "UTF8",
      "--locale=C",
    ]);
    if (!init.success) throw new Error(`initdb failed: ${text(init)}`);
    await startWatchdog(dir);
    let last: unknown = null;
    for (let attempt = 0; attempt < START_ATTEMPTS; attempt++) {
      const server = new Server(dir, freePort(), binaries);
      try {
        await server.start();
        return server;
      } catch (e) {
        // Most likely another process took the port between our probe and the bind.
        last = e;
        await server.shutdown().catch(() => {});
      }
    }
    throw last;
  } catch (e) {
    await Deno.remove(dir, { recursive: true }).catch(() => {});
    throw e;
  }
}

let shared: Promise<PgServer> | null = null;
let sharedServer: Server | null = null;

/**
 * The server shared by every test of this process: started on first use, stopped at exit
 * (or by `stopSharedPostgres()`). Tests take their own database with `createDatabase()`.
 */
export function sharedPostgres(): Promise<PgServer> {
  if (!shared) {
    shared = startPostgres().then((s) => {
      sharedServer = s as Server;
      globalThis.addEventListener("unload", () => sharedServer?.stopSync());
      return s;
    });
    // A failed start may be retried by the next caller.
    shared.catch(() => shared = null);
  }
  return shared;
}

/** A fresh database on the shared server with ORBIT's migrations applied (the store's own). */
export async function migratedDatabase(): Promise<string> {
  const url = await (await sharedPostgres()).createDatabase();
  await (await openStore(url)).close();
  return url;
}

/** Stops the shared server now (it is also stopped when the process exits). */
export async function stopSharedPostgres(): Promise<void> {
  const s = shared;
  shared = null;
  sharedServer = null;
  if (s) await (await s.catch(() => null))?.stop();
}

/**
 * Locks `table` (ACCESS EXCLUSIVE) from a session of its own for `ms`: resolves once the lock
 * is held, with `released`, which resolves when it is gone and the session closed.
 */
export async function lockTable(
  url: string,
  table: string,
  ms: number,
): Promise<{ released: Promise<void> }> {
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  let locked!: () => void;
  const isLocked = new Promise<void>((r) => locked = r);
  const held = sql.begin(async (tx) => {
    await tx.unsafe(`LOCK TABLE ${table} IN ACCESS EXCLUSIVE MODE`);
    locked();
    await tx.unsafe(`SELECT pg_sleep(${ms / 1000})`);
  });
  const released = held.then(() => {}).finally(() => sql.end({ timeout: 1 }));
  await Promise.race([isLocked, released]);
  return { released };
}
