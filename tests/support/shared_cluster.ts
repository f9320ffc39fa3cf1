/**
 * Shared-mode clusters for end-to-end tests (reference page, "Shared mode (several active
 * servers)"): N real `orbit server --cluster --cluster-mode shared` processes on one PostgreSQL
 * database, each spawned with `Deno.execPath()` on a free port, with the page's timings
 * (`--node-timeout 3 --session-timeout 3`), node ids `node-1`, `node-2`, …, the round-robin
 * proxy of the page's setup in front (tests/support/ready_proxy.ts), and the TypeScript order
 * worker pointed at the proxy.
 *
 * ```ts
 * const db = await (await sharedPostgres()).createDatabase();
 * const c = await startSharedCluster({ db, nodes: 3 });
 * try {
 *   await c.lb.post("/v1/workflows", ORDER_WORKFLOW);
 *   c.startWorker({ ORDER_CHARGE_DELAY_MS: "3000" });
 *   await c.node("node-2").kill(); // SIGKILL
 * } finally {
 *   await c.close(); // workers, proxy and every server, by PID
 * }
 * ```
 *
 * A node keeps its id across restarts (`restart()` starts a new process under the same
 * `--node-id`, which is how the page's "restart under the same node id" is driven); its `url`
 * changes with the new port, and the proxy's backend list follows.
 */
import assert from "node:assert/strict";
import { api, type ServerProcess, startServer, waitFor } from "./server.ts";
import { type ReadyProxy, startReadyProxy } from "./ready_proxy.ts";
import { startOrderWorker, type WorkerProcess } from "./orders.ts";

const ROOT = new URL("../../", import.meta.url).pathname;

/** The page's timings for the SharedCluster suite. */
export const NODE_TIMEOUT_S = 3;
export const SESSION_TIMEOUT_S = 3;

/** A node of /v1/health's `nodes` list. */
export interface NodeView {
  node_id: string;
  addr: string | null;
  live: boolean;
  heartbeat_age_ms: number;
  owned_executions: number;
}

/** /v1/health of a shared server (the page's fields). */
export interface SharedHealth {
  status: string;
  role: string;
  node_id: string | null;
  term: number | null;
  leader: unknown;
  active_executions: number;
  worker_sessions: number;
  owned_executions: number;
  tasks_claimed: number;
  nodes: NodeView[];
  [k: string]: unknown;
}

export interface NodeProcessOptions {
  /** Seconds (default the page's 3). */
  nodeTimeoutS?: number;
  sessionTimeoutS?: number;
  /** More server flags (`--token`, `--max-active-executions`, …). */
  args?: string[];
  env?: Record<string, string>;
  /** How long to wait for /v1/ready 200 (default 60 s: a loaded two-core machine). */
  readyTimeoutMs?: number;
}

/** The page's command line for one shared server (the address is added by startServer). */
export function sharedArgs(id: string, o: NodeProcessOptions = {}): string[] {
  return [
    "--cluster",
    "--cluster-mode",
    "shared",
    "--node-id",
    id,
    "--node-timeout",
    String(o.nodeTimeoutS ?? NODE_TIMEOUT_S),
    "--session-timeout",
    String(o.sessionTimeoutS ?? SESSION_TIMEOUT_S),
    ...(o.args ?? []),
  ];
}

export async function isReady(url: string): Promise<boolean> {
  try {
    const r = await fetch(`${url}/v1/ready`, { signal: AbortSignal.timeout(2_000) });
    await r.body?.cancel();
    return r.status === 200;
  } catch {
    return false;
  }
}

/**
 * Starts one shared server and waits until it answers 200 on /v1/ready (it registered and
 * resumed what it owned). Rejects with its logs if it exits or does not become ready in time.
 */
export async function startSharedServer(
  db: string,
  id: string,
  o: NodeProcessOptions = {},
): Promise<ServerProcess> {
  const proc = await startServer({ db, args: sharedArgs(id, o), ...(o.env ? { env: o.env } : {}) });
  let exited = false;
  proc.status.then(() => exited = true);
  try {
    await waitFor(
      async () => {
        if (exited) throw new Error(`${id} exited`);
        return await isReady(proc.url);
      },
      `${id} to answer 200 on /v1/ready`,
      o.readyTimeoutMs ?? 60_000,
      100,
    );
    if (exited) throw new Error(`${id} exited`);
  } catch (e) {
    await proc.kill("SIGKILL");
    throw new Error(`${(e as Error).message}; its logs:\n${proc.logs.join("\n")}`);
  }
  return proc;
}

/** One server of the cluster under a fixed node id, across restarts. */
export class NodeProcess {
  /** Earlier processes of this node id (before `restart()`), oldest first. */
  readonly previous: ServerProcess[] = [];
  #paused = false;

  constructor(
    readonly id: string,
    readonly db: string,
    public proc: ServerProcess,
    readonly options: NodeProcessOptions,
    private readonly onRestart: () => void,
  ) {}

  get url(): string {
    return this.proc.url;
  }
  get pid(): number {
    return this.proc.pid;
  }
  /** Log lines of the current process. */
  get logs(): string[] {
    return this.proc.logs;
  }
  /** Log lines of every process this node id ran as, oldest first. */
  get allLogs(): string[] {
    return [...this.previous.flatMap((p) => p.logs), ...this.proc.logs];
  }
  get paused(): boolean {
    return this.#paused;
  }
  api() {
    return api(this.proc.url);
  }
  waitForLog(re: RegExp, timeoutMs = 30_000): Promise<string> {
    return this.proc.waitForLog(re, timeoutMs);
  }
  ready(): Promise<boolean> {
    return isReady(this.proc.url);
  }
  async health(): Promise<SharedHealth> {
    const r = await this.api().get("/v1/health");
    if (r.status !== 200) {
      throw new Error(`${this.id} /v1/health: ${r.status} ${JSON.stringify(r.body)}`);
    }
    return r.body as SharedHealth;
  }
  /**
   * The sum of a counter's samples in /v1/metrics (0 when absent); with `labels` (as printed,
   * `{kind="signal"}`), that sample's only.
   */
  async metric(name: string, labels?: string): Promise<number> {
    const text = (await this.api().get("/v1/metrics")).body;
    return metricValue(String(text), name, labels);
  }
  /** SIGKILL; resolves when the process is gone. */
  async kill(): Promise<Deno.CommandStatus> {
    this.#paused = false;
    return await this.proc.kill("SIGKILL");
  }
  /**
   * SIGTERM (a graceful leave); resolves when the process has exited. A process still running
   * after `timeoutMs` is killed (SIGKILL), and the status says so.
   */
  async stop(timeoutMs = 30_000): Promise<Deno.CommandStatus> {
    if (this.#paused) this.resume();
    return await this.#signal("SIGTERM", timeoutMs);
  }
  async #signal(signal: Deno.Signal, timeoutMs: number): Promise<Deno.CommandStatus> {
    const proc = this.proc;
    const guard = setTimeout(() => {
      try {
        Deno.kill(proc.pid, "SIGKILL");
      } catch { /* gone */ }
    }, timeoutMs);
    try {
      return await proc.kill(signal);
    } finally {
      clearTimeout(guard);
    }
  }
  /** SIGSTOP: the process freezes with its sockets open (a stop-the-world pause). */
  pause(): void {
    Deno.kill(this.proc.pid, "SIGSTOP");
    this.#paused = true;
  }
  /** SIGCONT. */
  resume(): void {
    try {
      Deno.kill(this.proc.pid, "SIGCONT");
    } catch { /* gone */ }
    this.#paused = false;
  }
  /**
   * Starts a new process under the same node id (after stopping the current one with `signal`
   * if it still runs) and waits for it to be ready. A restart right after a SIGKILL may wait
   * for the old heartbeat to expire (up to three node timeouts, as the page says).
   */
  async restart(signal: Deno.Signal | null = "SIGTERM", o: NodeProcessOptions = {}): Promise<void> {
    if (signal) {
      if (this.#paused && signal !== "SIGKILL") this.resume();
      await this.#signal(signal, 30_000);
    }
    this.#paused = false;
    const opts = { ...this.options, ...o };
    const next = await startSharedServer(this.db, this.id, opts);
    this.previous.push(this.proc);
    this.proc = next;
    this.onRestart();
  }
}

export function metricValue(text: string, name: string, labels?: string): number {
  let sum = 0;
  const re = new RegExp(`^${name}(\\{[^}]*\\})?\\s+(\\S+)$`, "gm");
  for (const m of text.matchAll(re)) {
    if (labels === undefined || m[1] === labels) sum += Number(m[2]);
  }
  return sum;
}

export interface SharedClusterOptions extends NodeProcessOptions {
  /** The database (a fresh one from `sharedPostgres().createDatabase()`). */
  db: string;
  /** Number of servers (default 3), `node-1` … `node-N`. */
  nodes?: number;
  /** Start the round-robin proxy in front (default true). */
  proxy?: boolean;
  /** Per-node database URL, e.g. one node through a DbLink (default `db` for every node). */
  dbFor?: (id: string) => string;
}

export interface SharedCluster {
  readonly db: string;
  readonly nodes: NodeProcess[];
  /** The round-robin proxy (throws when started with `proxy: false`). */
  readonly proxy: ReadyProxy;
  /** A JSON client on the proxy. */
  readonly lb: ReturnType<typeof api>;
  node(id: string): NodeProcess;
  /** Every node but these. */
  others(...not: NodeProcess[]): NodeProcess[];
  /** Starts the TypeScript order worker against the proxy (stopped by `close()`). */
  startWorker(env?: Record<string, string>): WorkerProcess;
  /** Adds a server `node-<N+1>` (or `id`) to the cluster and the proxy. */
  addNode(id?: string, o?: NodeProcessOptions): Promise<NodeProcess>;
  /** Kills workers, the proxy and every server, by PID. */
  close(): Promise<void>;
}

/** Starts `nodes` shared servers on `db` (in parallel), then the proxy, and waits for both. */
export async function startSharedCluster(o: SharedClusterOptions): Promise<SharedCluster> {
  const count = o.nodes ?? 3;
  const ids = Array.from({ length: count }, (_, i) => `node-${i + 1}`);
  const nodes: NodeProcess[] = [];
  const workers: WorkerProcess[] = [];
  let proxy: ReadyProxy | null = null;
  const syncProxy = () => proxy?.setBackends(nodes.map((n) => n.url));
  const nodeOpts = (): NodeProcessOptions => ({
    ...(o.nodeTimeoutS !== undefined ? { nodeTimeoutS: o.nodeTimeoutS } : {}),
    ...(o.sessionTimeoutS !== undefined ? { sessionTimeoutS: o.sessionTimeoutS } : {}),
    ...(o.args ? { args: o.args } : {}),
    ...(o.env ? { env: o.env } : {}),
    ...(o.readyTimeoutMs !== undefined ? { readyTimeoutMs: o.readyTimeoutMs } : {}),
  });
  const dbOf = (id: string) => o.dbFor?.(id) ?? o.db;

  const started = await Promise.allSettled(
    ids.map((id) => startSharedServer(dbOf(id), id, nodeOpts())),
  );
  const failed = started.find((s) => s.status === "rejected");
  if (failed) {
    for (const s of started) if (s.status === "fulfilled") await s.value.kill("SIGKILL");
    throw (failed as PromiseRejectedResult).reason;
  }
  started.forEach((s, i) => {
    const proc = (s as PromiseFulfilledResult<ServerProcess>).value;
    nodes.push(new NodeProcess(ids[i]!, dbOf(ids[i]!), proc, nodeOpts(), syncProxy));
  });

  if (o.proxy !== false) {
    proxy = startReadyProxy(nodes.map((n) => n.url));
    try {
      await proxy.waitReady(nodes.length, 30_000);
    } catch (e) {
      await proxy.close();
      for (const n of nodes) await n.kill();
      throw e;
    }
  }

  const cluster: SharedCluster = {
    db: o.db,
    nodes,
    get proxy(): ReadyProxy {
      if (!proxy) throw new Error("this cluster was started without a proxy");
      return proxy;
    },
    get lb() {
      return api(cluster.proxy.url);
    },
    node(id) {
      const n = nodes.find((x) => x.id === id);
      if (!n) throw new Error(`no node ${id} (nodes: ${nodes.map((x) => x.id).join(", ")})`);
      return n;
    },
    others: (...not) => nodes.filter((n) => !not.includes(n)),
    startWorker(env = {}) {
      const w = startOrderWorker(cluster.proxy.url, env);
      workers.push(w);
      return w;
    },
    async addNode(id, no = {}) {
      const nid = id ?? `node-${nodes.length + 1}`;
      const proc = await startSharedServer(dbOf(nid), nid, { ...nodeOpts(), ...no });
      const n = new NodeProcess(nid, dbOf(nid), proc, { ...nodeOpts(), ...no }, syncProxy);
      nodes.push(n);
      syncProxy();
      return n;
    },
    async close() {
      for (const w of workers) await w.kill("SIGKILL");
      await proxy?.close();
      for (const n of nodes) await n.kill();
    },
  };
  return cluster;
}

/** Prints a node's log tail, for assertion messages. */
export function tail(n: NodeProcess | ServerProcess, lines = 40): string {
  const logs = n instanceof NodeProcess ? n.allLogs : n.logs;
  const id = n instanceof NodeProcess ? n.id : `pid ${n.pid}`;
  return `--- ${id} (last ${lines} lines) ---\n${logs.slice(-lines).join("\n")}`;
}

/**
 * The first of `nodes` to log a line matching `re` (already logged or later), with the line
 * and the time it was seen; rejects after `timeoutMs` with every node's log tail.
 */
export async function waitForLogOnAny(
  nodes: NodeProcess[],
  re: RegExp,
  timeoutMs = 30_000,
): Promise<{ node: NodeProcess; line: string; at: number }> {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    for (const n of nodes) {
      const line = n.logs.find((l) => re.test(l));
      if (line !== undefined) return { node: n, line, at: Date.now() };
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(
    `no node logged ${re} within ${timeoutMs} ms\n${nodes.map((n) => tail(n)).join("\n")}`,
  );
}

/** Every line matching `re` on any of `nodes`, with the node that logged it. */
export function linesOn(nodes: NodeProcess[], re: RegExp): { node: NodeProcess; line: string }[] {
  return nodes.flatMap((n) => n.logs.filter((l) => re.test(l)).map((line) => ({ node: n, line })));
}

export interface RawServerResult {
  code: number;
  stdout: string;
  stderr: string;
  elapsedMs: number;
  /** True if /v1/ready ever answered 200 while it ran. */
  everReady: boolean;
  /** True if the guard had to kill it. */
  killed: boolean;
}

/**
 * Runs a server to its exit (for starts that must be refused), polling its /v1/ready on a
 * fixed free port meanwhile; a guard kills it after `guardMs`.
 */
export async function runSharedServerToExit(
  db: string,
  id: string,
  o: NodeProcessOptions & { guardMs?: number } = {},
): Promise<RawServerResult> {
  const probe = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (probe.addr as Deno.NetAddr).port;
  probe.close();
  const started = Date.now();
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      `${ROOT}main.ts`,
      "server",
      "--db",
      db,
      "--addr",
      `127.0.0.1:${port}`,
      ...sharedArgs(id, o),
    ],
    env: { NO_COLOR: "1", ...(o.env ?? {}) },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  let exited = false;
  const output = child.output().finally(() => exited = true);
  let killed = false;
  const guard = setTimeout(() => {
    killed = true;
    try {
      child.kill("SIGKILL");
    } catch { /* gone */ }
  }, o.guardMs ?? 60_000);
  let everReady = false;
  while (!exited) {
    if (await isReady(`http://127.0.0.1:${port}`)) everReady = true;
    await new Promise((r) => setTimeout(r, 100));
  }
  const out = await output;
  clearTimeout(guard);
  const dec = new TextDecoder();
  return {
    code: out.code,
    stdout: dec.decode(out.stdout),
    stderr: dec.decode(out.stderr),
    elapsedMs: Date.now() - started,
    everReady,
    killed,
  };
}

/**
 * A TCP link between servers and PostgreSQL that the test can cut ("a node that loses the
 * database"): `cut()` closes every connection through it and refuses new ones until
 * `restore()`.
 */
export interface DbLink {
  /** `db` with its host and port replaced by the link's. */
  readonly url: string;
  readonly cutNow: boolean;
  cut(): void;
  restore(): void;
  close(): Promise<void>;
}

export function startDbLink(db: string): DbLink {
  const target = new URL(db);
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  const conns = new Set<Deno.Conn>();
  let isCut = false;
  const closeAll = () => {
    for (const c of conns) {
      try {
        c.close();
      } catch { /* closed */ }
    }
    conns.clear();
  };
  const serving = (async () => {
    try {
      for await (const client of listener) {
        if (isCut) {
          client.close();
          continue;
        }
        Deno.connect({ hostname: target.hostname, port: Number(target.port || 5432) }).then(
          (server) => {
            if (isCut) {
              client.close();
              server.close();
              return;
            }
            conns.add(client);
            conns.add(server);
            Promise.allSettled([
              client.readable.pipeTo(server.writable),
              server.readable.pipeTo(client.writable),
            ]).then(() => {
              for (const c of [client, server]) {
                conns.delete(c);
                try {
                  c.close();
                } catch { /* closed */ }
              }
            });
          },
          () => client.close(),
        );
      }
    } catch { /* closed */ }
  })();
  const url = new URL(db);
  url.hostname = "127.0.0.1";
  url.port = String(port);
  return {
    url: url.toString(),
    get cutNow() {
      return isCut;
    },
    cut() {
      isCut = true;
      closeAll();
    },
    restore() {
      isCut = false;
    },
    async close() {
      isCut = true;
      listener.close();
      closeAll();
      await serving;
    },
  };
}

/**
 * Schedule occurrences (`<schedule>@<ISO time>` ids): every occurrence between the first and the
 * last was started, or counted as skipped; all are on the `everyMs` grid.
 */
export function assertEveryOccurrence(ids: string[], everyMs: number, skipped: number): void {
  const at = ids.map((id) => Date.parse(id.slice(id.indexOf("@") + 1))).sort((a, b) => a - b);
  for (let i = 1; i < at.length; i++) {
    assert.equal((at[i]! - at[i - 1]!) % everyMs, 0, `occurrences ${at[i - 1]} and ${at[i]}`);
    assert.notEqual(at[i], at[i - 1], `occurrence ${at[i]} started twice`);
  }
  const expected = (at.at(-1)! - at[0]!) / everyMs + 1;
  assert.ok(
    at.length + skipped >= expected,
    `${expected} occurrences between the first and the last; ${at.length} started, ${skipped} skipped`,
  );
}
