/**
 * Real server processes for end-to-end tests: spawned with `Deno.execPath()` (never the npm
 * wrapper, so a SIGKILL reaches the real process), on a free port (`--addr 127.0.0.1:0`, the
 * port read from the listening log line), killed by PID.
 */
const ROOT = new URL("../../", import.meta.url).pathname;
export const MAIN = `${ROOT}main.ts`;
/**
 * The V8 flags every documented way of running the server passes (`deno task start`, `deno task
 * compile`, the Dockerfile, the Kubernetes manifests; tests/v8_flags_test.ts keeps them equal),
 * so tests and benchmarks run the server as it is deployed.
 */
export const SERVER_V8_FLAGS = "--v8-flags=--max-semi-space-size=8,--heap-growing-percent=50";

export interface ServerProcess {
  url: string;
  pid: number;
  /** Every log line so far. */
  logs: string[];
  waitForLog(re: RegExp, timeoutMs?: number): Promise<string>;
  kill(signal?: Deno.Signal): Promise<Deno.CommandStatus>;
  status: Promise<Deno.CommandStatus>;
}

export interface ServerOptions {
  db: string;
  args?: string[];
  env?: Record<string, string>;
  /** Script to run instead of main.ts (the bundle, for instance). */
  entry?: string;
  /** Extra flags for `deno run` (e.g. `--cpu-prof`). */
  denoArgs?: string[];
  /** Listen address (default 127.0.0.1:0, a free port). */
  addr?: string;
  /** Wait for this log line before returning (default: the listening line). */
  readyLine?: RegExp;
  /** Working directory of the server (default: this process's). */
  cwd?: string;
  /** Sees every line first; a line it answers `false` for is not kept in `logs`. */
  onLine?: (line: string) => boolean;
  /** Called with the PID right after the spawn, before the server listens (a CPU cgroup). */
  onSpawn?: (pid: number) => void;
}

const running = new Set<Deno.ChildProcess>();

export async function startServer(o: ServerOptions): Promise<ServerProcess> {
  const args = [
    "run",
    "-A",
    SERVER_V8_FLAGS,
    ...(o.denoArgs ?? []),
    o.entry ?? MAIN,
    "server",
    "--db",
    o.db,
    "--addr",
    o.addr ?? "127.0.0.1:0",
    ...(o.args ?? []),
  ];
  const child = new Deno.Command(Deno.execPath(), {
    args,
    env: { NO_COLOR: "1", ...(o.env ?? {}) },
    ...(o.cwd ? { cwd: o.cwd } : {}),
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  running.add(child);
  if (o.onSpawn) {
    try {
      o.onSpawn(child.pid);
    } catch (e) {
      try {
        child.kill("SIGKILL");
      } catch { /* gone */ }
      await child.status;
      running.delete(child);
      throw e;
    }
  }
  const logs: string[] = [];
  const watchers = new Set<() => void>();
  const pump = async (stream: ReadableStream<Uint8Array>) => {
    let buf = "";
    for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
      buf += chunk;
      let i;
      while ((i = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        if (o.onLine?.(line) === false) continue;
        logs.push(line);
        if (Deno.env.get("ORBIT_TEST_LOGS")) console.error(`[server ${child.pid}] ${line}`);
        for (const w of [...watchers]) w();
      }
    }
    if (buf) logs.push(buf);
    for (const w of [...watchers]) w();
  };
  const pumps = Promise.all([pump(child.stdout), pump(child.stderr)]);
  const status = child.status.then(async (s) => {
    running.delete(child);
    await pumps;
    return s;
  });
  let exited = false;
  status.then(() => {
    exited = true;
    for (const w of [...watchers]) w();
  });

  const waitForLog = (re: RegExp, timeoutMs = 20_000) =>
    new Promise<string>((resolve, reject) => {
      const check = () => {
        const hit = logs.find((l) => re.test(l));
        if (hit !== undefined) {
          done();
          resolve(hit);
        } else if (exited) {
          done();
          reject(new Error(`server exited before logging ${re}:\n${logs.join("\n")}`));
        }
      };
      const timer = setTimeout(() => {
        done();
        reject(new Error(`timed out waiting for ${re}; logs:\n${logs.join("\n")}`));
      }, timeoutMs);
      const done = () => {
        clearTimeout(timer);
        watchers.delete(check);
      };
      watchers.add(check);
      check();
    });

  const listening = await waitForLog(/ORBIT runtime listening addr=/);
  const m = listening.match(/addr=(\S+) tls=(\w+)/)!;
  const scheme = m[2] === "true" ? "https" : "http";
  if (o.readyLine) await waitForLog(o.readyLine);
  return {
    url: `${scheme}://${m[1]}`,
    pid: child.pid,
    logs,
    waitForLog,
    status,
    kill: async (signal: Deno.Signal = "SIGTERM") => {
      try {
        child.kill(signal);
      } catch { /* already gone */ }
      return await status;
    },
  };
}

/** Kills every server this process started that is still running (test teardown). */
export async function killAllServers(): Promise<void> {
  for (const c of [...running]) {
    try {
      c.kill("SIGKILL");
    } catch { /* gone */ }
    await c.status;
  }
}

/** Kills every child on exit, and on SIGTERM/SIGINT (which skip "unload"), so none is orphaned. */
export function killOnExit(children: Set<Deno.ChildProcess>): void {
  const killAll = () => {
    for (const c of children) {
      try {
        c.kill("SIGKILL");
      } catch { /* gone */ }
    }
  };
  globalThis.addEventListener("unload", killAll);
  for (const sig of ["SIGTERM", "SIGINT"] as const) {
    try {
      Deno.addSignalListener(sig, () => {
        killAll();
        Deno.exit(130);
      });
    } catch { /* signals unsupported here */ }
  }
}

killOnExit(running);

/** Polls `fn` until it returns a truthy value (a condition, not a sleep). */
export async function waitFor<T>(
  fn: () => Promise<T> | T,
  what: string,
  timeoutMs = 30_000,
  everyMs = 50,
): Promise<NonNullable<T>> {
  const end = Date.now() + timeoutMs;
  let last: unknown;
  while (Date.now() < end) {
    try {
      const v = await fn();
      if (v) return v as NonNullable<T>;
    } catch (e) {
      last = e;
    }
    await new Promise((r) => setTimeout(r, everyMs));
  }
  throw new Error(`timed out waiting for ${what}${last ? `: ${(last as Error).message}` : ""}`);
}

/** A small JSON client for tests. */
export function api(base: string, token?: string) {
  const call = async (method: string, path: string, body?: unknown) => {
    const r = await fetch(base + path, {
      method,
      headers: {
        ...(body !== undefined ? { "content-type": "application/json" } : {}),
        ...(token ? { authorization: `Bearer ${token}` } : {}),
      },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    const text = await r.text();
    let json: unknown = null;
    try {
      json = text ? JSON.parse(text) : null;
    } catch {
      json = text;
    }
    // deno-lint-ignore no-explicit-any
    return { status: r.status, body: json as any, headers: r.headers };
  };
  return {
    get: (p: string) => call("GET", p),
    post: (p: string, b: unknown = {}) => call("POST", p, b),
    call,
  };
}

export async function tempDir(): Promise<string> {
  return await Deno.makeTempDir({ prefix: "orbit-test-" });
}
