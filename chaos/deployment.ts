/**
 * The system under test for one chaos run: the servers of the chosen mode, the proxy clients
 * and workers reach them through, and the logging workers. Every process is started with
 * `Deno.execPath()` and signalled by PID, so SIGKILL, SIGSTOP and SIGTERM reach the real
 * process.
 *
 * - `single-sqlite` / `single-pg`: one server, restarted on the same address;
 * - `standby`: N servers with `--cluster` (one leader, the others standby);
 * - `shared`: N servers with `--cluster --cluster-mode shared` and `--log-level debug`: their
 *   `shared: appended` lines (one per run an owned commit wrote) go to `appends-<node>.log` in
 *   the run's directory, not to memory, for the checker's one-writer-per-epoch rule;
 * - `attach`: no server; the entry is a deployment the user runs (`--attach URL`), and only
 *   the workers and their link are this run's.
 *
 * In the cluster modes clients and workers go through the round-robin ready proxy
 * (tests/support/ready_proxy.ts, HAProxy's role); workers always go through a fault proxy
 * (chaos/fault_proxy.ts) in front of that entry, so worker↔server links can be faulted too.
 * In shared mode each server also advertises (`--advertise-addr`) a fault proxy of its own in
 * front of it, which the SDK workers spread their slots over (`spreadOverNodes`): a worker-link
 * fault hits the entry's proxy and every server's at once.
 */
import { type ServerProcess, startServer } from "../tests/support/server.ts";
import { type ReadyProxy, startReadyProxy } from "../tests/support/ready_proxy.ts";
import { fanOut, type FaultProxy, startFaultProxy } from "./fault_proxy.ts";

const ROOT = new URL("../", import.meta.url).pathname;

export type Mode = "single-sqlite" | "single-pg" | "standby" | "shared";
export const MODES: readonly Mode[] = ["single-sqlite", "single-pg", "standby", "shared"];

/** A line of lib/store/postgres.ts's shared-mode append log. */
const APPEND_MARK = " shared: appended ";

/** Server timings of the run (seconds): short, so faults past them happen often. */
export const SESSION_TIMEOUT_S = 2;
export const NODE_TIMEOUT_S = 3;

export interface ServerNode {
  readonly id: string;
  proc: ServerProcess | null;
  paused: boolean;
  /** Every log line of every process this node ran as. */
  readonly logs: string[];
  /** Shared mode: the fault proxy this server advertises (workers' direct link to it). */
  link: FaultProxy | null;
  /** Processes started for this node id. */
  starts: number;
  /** Shared mode: the file its processes' `shared: appended` lines go to. */
  readonly appendLog: string | null;
}

export interface WorkerNode {
  readonly id: string;
  /** `ts`: chaos/worker.ts (every task); `py`: chaos/worker.py (the Python side's five). */
  readonly runtime: "ts" | "py";
  readonly logFile: string;
  child: Deno.ChildProcess | null;
  paused: boolean;
}

const workerChildren = new Set<Deno.ChildProcess>();
globalThis.addEventListener("unload", () => {
  for (const c of workerChildren) {
    try {
      c.kill("SIGKILL");
    } catch { /* gone */ }
  }
});

export class Deployment {
  readonly nodes: ServerNode[] = [];
  readonly workers: WorkerNode[] = [];
  #lb: ReadyProxy | null = null;
  #workerLink: FaultProxy | null = null;
  #singleAddr: string | null = null;

  constructor(
    readonly mode: Mode | "attach",
    /** The database URL the servers use (through the DB fault proxy in PostgreSQL modes). */
    readonly serverDb: string,
    readonly dir: string,
    readonly servers: number,
    readonly workerCount: number,
    readonly pythonWorkers = 0,
    /** Attach mode: the user's deployment (its base URL) and its bearer token. */
    readonly attach: { url: string; token: string | null } | null = null,
    /** The servers' `--cache-executions`, or null for their default. */
    readonly cacheExecutions: number | null = null,
  ) {}

  get clustered(): boolean {
    return this.mode === "standby" || this.mode === "shared";
  }

  /** Where clients send requests. */
  get entry(): string {
    if (this.attach) return this.attach.url.replace(/\/+$/, "");
    if (this.#lb) return this.#lb.url;
    return `http://${this.#singleAddr}`;
  }

  /** The fault proxies between workers and servers: the entry's and each server's own. */
  get workerLink(): FaultProxy {
    const entry = this.#workerLink!;
    return fanOut(() => [entry, ...this.nodes.flatMap((n) => (n.link ? [n.link] : []))]);
  }

  serverArgs(id: string): string[] {
    // Every mode's flags: the session timeout and, if given, the cache's size.
    const common = [
      "--session-timeout",
      String(SESSION_TIMEOUT_S),
      ...(this.cacheExecutions !== null
        ? ["--cache-executions", String(this.cacheExecutions)]
        : []),
    ];
    if (this.mode === "standby") {
      return ["--cluster", "--node-id", id, "--node-timeout", String(NODE_TIMEOUT_S), ...common];
    }
    if (this.mode === "shared") {
      return [
        "--cluster",
        "--cluster-mode",
        "shared",
        "--node-id",
        id,
        "--node-timeout",
        String(NODE_TIMEOUT_S),
        "--log-level",
        "debug",
        ...common,
      ];
    }
    return common;
  }

  async start(): Promise<void> {
    const n = this.attach ? 0 : this.clustered ? this.servers : 1;
    for (let i = 1; i <= n; i++) {
      this.nodes.push({
        id: `node-${i}`,
        proc: null,
        paused: false,
        logs: [],
        starts: 0,
        appendLog: this.mode === "shared" ? `${this.dir}/appends-node-${i}.log` : null,
        // Pointed at the server once it listens (and again after each restart).
        link: this.mode === "shared" ? startFaultProxy({ hostname: "127.0.0.1", port: 1 }) : null,
      });
    }
    // One at a time: the first becomes the leader in standby mode, which keeps starts quick.
    for (const node of this.nodes) await this.startNode(node);
    if (this.clustered) {
      this.#lb = startReadyProxy(this.nodes.map((x) => x.proc!.url), { queueMs: 5_000 });
      await this.#lb.waitReady(1, 60_000);
    }
    const e = new URL(this.entry);
    const port = Number(e.port || (e.protocol === "https:" ? 443 : 80));
    this.#workerLink = startFaultProxy({ hostname: e.hostname, port });
    for (let i = 1; i <= this.workerCount + this.pythonWorkers; i++) {
      const runtime = i > this.workerCount ? "py" : "ts";
      const w: WorkerNode = {
        id: runtime === "py" ? `py-worker-${i - this.workerCount}` : `worker-${i}`,
        runtime,
        logFile: `${this.dir}/worker-${i}.log`,
        child: null,
        paused: false,
      };
      this.workers.push(w);
      this.startWorker(w);
    }
  }

  async startNode(node: ServerNode): Promise<void> {
    // Append lines are many (one per commit and run): gathered, then written to the node's file.
    let appends = "";
    const flushAppends = () => {
      if (appends === "" || !node.appendLog) return;
      Deno.writeTextFileSync(node.appendLog, appends, { append: true });
      appends = "";
    };
    const onLine = (line: string) => {
      if (!node.appendLog || !line.includes(APPEND_MARK)) return true;
      appends += line + "\n";
      return false;
    };
    const advertise = node.link ? ["--advertise-addr", `http://127.0.0.1:${node.link.port}`] : [];
    const proc = await startServer({
      db: this.serverDb,
      args: [...this.serverArgs(node.id), ...advertise],
      ...(this.#singleAddr ? { addr: this.#singleAddr } : {}),
      onLine,
    });
    node.starts++;
    node.paused = false;
    // Log lines of the process go to the node's list too (the leader-term check reads them).
    const seen = proc.logs.length;
    node.logs.push(...proc.logs.slice(0, seen));
    const copy = () => {
      while (copied < proc.logs.length) node.logs.push(proc.logs[copied++]!);
      flushAppends();
    };
    let copied = seen;
    const timer = setInterval(copy, 200);
    proc.status.finally(() => {
      clearInterval(timer);
      copy();
    });
    node.proc = proc;
    const url = new URL(proc.url);
    node.link?.retarget({ hostname: url.hostname, port: Number(url.port) });
    if (!this.clustered) this.#singleAddr = url.host;
    this.#lb?.setBackends(this.nodes.filter((x) => x.proc).map((x) => x.proc!.url));
  }

  /** Signals a server; for SIGKILL and SIGTERM waits until it is gone. */
  async signalNode(node: ServerNode, signal: Deno.Signal): Promise<void> {
    const proc = node.proc;
    if (!proc) return;
    if (signal === "SIGSTOP") {
      Deno.kill(proc.pid, "SIGSTOP");
      node.paused = true;
      return;
    }
    if (signal === "SIGCONT") {
      try {
        Deno.kill(proc.pid, "SIGCONT");
      } catch { /* gone */ }
      node.paused = false;
      return;
    }
    if (node.paused) {
      try {
        Deno.kill(proc.pid, "SIGCONT");
      } catch { /* gone */ }
      node.paused = false;
    }
    // A graceful stop gets 30 s, then SIGKILL.
    const guard = setTimeout(() => {
      try {
        Deno.kill(proc.pid, "SIGKILL");
      } catch { /* gone */ }
    }, 30_000);
    try {
      await proc.kill(signal);
    } finally {
      clearTimeout(guard);
    }
    node.proc = null;
  }

  startWorker(w: WorkerNode): void {
    const scheme = new URL(this.entry).protocol;
    const flags = [
      "--server",
      `${scheme}//127.0.0.1:${this.#workerLink!.port}`,
      "--log",
      w.logFile,
      "--worker-id",
      w.id,
      // Attach mode: the deployment's own addresses are not behind this run's fault proxies.
      ...(this.attach ? ["--no-spread"] : []),
    ];
    const py = w.runtime === "py";
    const child = new Deno.Command(py ? "python3" : Deno.execPath(), {
      args: py
        ? [`${ROOT}chaos/worker.py`, ...flags]
        : ["run", "-A", `${ROOT}chaos/worker.ts`, ...flags],
      // The token by environment, not argument: other users of the machine can read arguments.
      env: { NO_COLOR: "1", ...(this.attach?.token ? { ORBIT_TOKEN: this.attach.token } : {}) },
      stdin: "null",
      stdout: "null",
      stderr: "null",
    }).spawn();
    workerChildren.add(child);
    child.status.finally(() => workerChildren.delete(child));
    w.child = child;
    w.paused = false;
  }

  async signalWorker(w: WorkerNode, signal: Deno.Signal): Promise<void> {
    const child = w.child;
    if (!child) return;
    if (signal === "SIGSTOP" || signal === "SIGCONT") {
      try {
        child.kill(signal);
      } catch { /* gone */ }
      w.paused = signal === "SIGSTOP";
      return;
    }
    if (w.paused) child.kill("SIGCONT");
    w.paused = false;
    const guard = setTimeout(() => {
      try {
        child.kill("SIGKILL");
      } catch { /* gone */ }
    }, 20_000);
    try {
      child.kill(signal);
    } catch { /* gone */ }
    await child.status;
    clearTimeout(guard);
    w.child = null;
  }

  /** Every `shared: appended` line the servers logged, with its node id (shared mode). */
  async appendLines(): Promise<{ node: string; line: string }[]> {
    const out: { node: string; line: string }[] = [];
    for (const n of this.nodes) {
      if (!n.appendLog) continue;
      let text = "";
      try {
        text = await Deno.readTextFile(n.appendLog);
      } catch { /* it never appended */ }
      for (const line of text.split("\n")) if (line) out.push({ node: n.id, line });
    }
    return out;
  }

  /** True when the entry serves (some server answers 200 on /v1/ready through it). */
  async ready(): Promise<boolean> {
    try {
      const r = await fetch(`${this.entry}/v1/ready`, { signal: AbortSignal.timeout(2_000) });
      await r.body?.cancel();
      return r.status === 200;
    } catch {
      return false;
    }
  }

  /** Connections the workers opened, per link: `entry` and, in shared mode, each server's. */
  workerConnections(): Record<string, number> {
    const out: Record<string, number> = { entry: this.#workerLink?.accepted ?? 0 };
    for (const n of this.nodes) if (n.link) out[n.id] = n.link.accepted;
    return out;
  }

  /** Every log line of every server, with its node id. */
  serverLogs(): { node: string; line: string }[] {
    return this.nodes.flatMap((n) => n.logs.map((line) => ({ node: n.id, line })));
  }

  /** Kills everything this deployment started, by PID. */
  async close(): Promise<void> {
    for (const w of this.workers) {
      if (!w.child) continue;
      try {
        w.child.kill("SIGKILL");
      } catch { /* gone */ }
      await w.child.status;
      w.child = null;
    }
    await this.#workerLink?.close();
    for (const n of this.nodes) await n.link?.close();
    await this.#lb?.close();
    for (const n of this.nodes) {
      if (!n.proc) continue;
      try {
        Deno.kill(n.proc.pid, "SIGCONT");
      } catch { /* gone */ }
      await n.proc.kill("SIGKILL");
      n.proc = null;
    }
  }
}
