/**
 * The conformance driver: runs each scenario of `scenarios.ts` against one SDK's worker
 * program, with real server processes (spawned with `Deno.execPath()`, killed by PID), and
 * observes the outcome through the HTTP API, histories, the server's logs and, where a
 * scenario needs it, a fault-injecting proxy. See README.md.
 */
import assert from "node:assert/strict";
import { api, type ServerProcess, startServer, tempDir, waitFor } from "../support/server.ts";
import { startWorkerProcess, type WorkerEvent, type WorkerProcess } from "./worker_process.ts";
import { type FaultProxy, startFaultProxy } from "./fault_proxy.ts";
import { startGrpcFaultProxy } from "./grpc_fault_proxy.ts";
import { startProxy } from "../support/proxy.ts";
import { startSharedServer } from "../support/shared_cluster.ts";
import type { Sdk } from "./sdks.ts";

/** A history event as the API reads it. */
// deno-lint-ignore no-explicit-any
export type HistoryEvent = { seq: number; type: string; step?: string; [k: string]: any };

/** What a scenario gets: the SDK under test and the processes it starts, all cleaned up. */
export class ScenarioRun {
  readonly servers: ServerProcess[] = [];
  readonly workers: WorkerProcess[] = [];
  readonly proxies: FaultProxy[] = [];
  readonly cleanups: Array<() => Promise<void>> = [];
  #dir: string | null = null;
  #workerCount = 0;
  /** For a gRPC row (sdk.grpc): the gRPC address of each server's and proxy's URL. */
  readonly #grpc = new Map<string, string>();
  /** gRPC proxies still binding (a worker waits for them). */
  readonly #binding: Promise<void>[] = [];

  constructor(readonly sdk: Sdk, readonly command: string[]) {}

  /** A scratch directory of the run. */
  async dir(): Promise<string> {
    return this.#dir ??= await tempDir();
  }

  /**
   * A server on SQLite (a fresh file unless `db` names one) at a free port unless `addr`. For a
   * gRPC row it also listens with `--grpc-addr`: on a free port, or, when `addr` is a former
   * server's, on that server's gRPC port (a server started again is where it was on both).
   */
  async server(o: { args?: string[]; db?: string; addr?: string } = {}): Promise<ServerProcess> {
    const args = [...(o.args ?? [])];
    const again = o.addr ? this.#grpc.get(`http://${o.addr}`) : undefined;
    if (this.sdk.grpc) args.push("--grpc-addr", again ?? "127.0.0.1:0");
    const s = await startServer({
      db: o.db ?? `${await this.dir()}/orbit-${this.servers.length}.db`,
      args,
      ...(o.addr ? { addr: o.addr } : {}),
    });
    this.servers.push(s);
    if (this.sdk.grpc) await this.#learnGrpc(s);
    return s;
  }

  async #learnGrpc(s: ServerProcess): Promise<void> {
    const line = await s.waitForLog(/ORBIT gRPC listening addr=/);
    this.#grpc.set(s.url, line.match(/addr=(\S+)/)![1]!);
  }

  /** A shared-mode server on `db` (tests/support/shared_cluster.ts); `--grpc-addr` for gRPC. */
  async sharedServer(db: string, id: string): Promise<ServerProcess> {
    const grpc = this.sdk.grpc ? { args: ["--grpc-addr", "127.0.0.1:0"] } : {};
    const s = await startSharedServer(db, id, grpc);
    this.servers.push(s);
    if (this.sdk.grpc) await this.#learnGrpc(s);
    return s;
  }

  /**
   * A round-robin balancer over `nodes` (tests/support/proxy.ts: connection by connection),
   * once every node is ready behind it: `url` for the API, `workerUrl` for the worker — for a
   * gRPC row a balancer of gRPC calls over the nodes' `--grpc-addr` (grpc_fault_proxy.ts).
   */
  async balancer(nodes: ServerProcess[]): Promise<{ url: string; workerUrl: string }> {
    const lb = startProxy(() => nodes.map((n) => n.url), 100);
    this.cleanups.push(() => lb.close());
    await waitFor(() => lb.ready().length === nodes.length, "every server ready behind the proxy");
    if (!this.sdk.grpc) return { url: lb.url, workerUrl: lb.url };
    const g = startGrpcFaultProxy(nodes.map((n) => this.#grpc.get(n.url)!), "pass", 0);
    this.proxies.push(g);
    this.#grpc.set(g.url, g.addr);
    await g.ready;
    return { url: lb.url, workerUrl: g.url };
  }

  /**
   * The SDK's conformance worker against `server`, with the suite's environment
   * (`CONFORMANCE_*`, `ORBIT_TOKEN`); answers once it printed `ready`, unless `ready: false`.
   */
  async worker(
    server: string,
    env: Record<string, string> = {},
    o: { ready?: boolean } = {},
  ): Promise<WorkerProcess> {
    const name = `${this.sdk.name}-worker-${++this.#workerCount}`;
    const grpc: Record<string, string> = {};
    if (this.sdk.grpc) {
      await Promise.all(this.#binding);
      const addr = this.#grpc.get(server);
      if (!addr) throw new Error(`no gRPC address for ${server} (not a server of this run)`);
      grpc.CONFORMANCE_GRPC_ADDR = addr;
    }
    const w = startWorkerProcess(name, this.command, server, {
      CONFORMANCE_WORKER_ID: `conformance-${this.sdk.name}`,
      ...grpc,
      ...env,
    });
    this.workers.push(w);
    if (o.ready !== false) await w.waitForEvent((e) => e.event === "ready", "ready", 60_000);
    return w;
  }

  /**
   * A fault proxy in front of `target` (fault_proxy.ts); for a gRPC row, a gRPC one in front of
   * the server's gRPC address (grpc_fault_proxy.ts), with the same records and faults.
   */
  proxy(target: string, mode: "pass" | "5xx" = "pass", port = 0): FaultProxy {
    let p: FaultProxy;
    if (this.sdk.grpc) {
      const addr = this.#grpc.get(target);
      if (!addr) throw new Error(`no gRPC address for ${target} (not a server of this run)`);
      const g = startGrpcFaultProxy(addr, mode, port);
      this.#grpc.set(g.url, g.addr);
      this.#binding.push(g.ready);
      p = g;
    } else p = startFaultProxy(target, mode, port);
    this.proxies.push(p);
    return p;
  }

  /** Kills every worker and server by PID and closes the proxies. */
  async cleanup(): Promise<void> {
    for (const w of this.workers) {
      if (w.exitCode() === null) {
        w.signal("SIGCONT");
        await w.kill("SIGKILL");
      }
    }
    for (const p of this.proxies) await p.close();
    for (const s of this.servers) await s.kill("SIGKILL");
    for (const c of this.cleanups) await c();
    if (this.#dir) await Deno.remove(this.#dir, { recursive: true }).catch(() => {});
  }

  /** Everything the processes said, for a failure message. */
  transcript(): string {
    const parts = this.workers.map((w) => `--- ${w.name} (pid ${w.pid})\n${w.tail(60)}`);
    for (const [i, s] of this.servers.entries()) {
      parts.push(`--- server ${i} (pid ${s.pid})\n${s.logs.slice(-40).join("\n")}`);
    }
    return parts.join("\n");
  }
}

// ---- what scenarios share ------------------------------------------------------------

/** A one-step workflow (`s`) of `task`, returning its output; `step` adds to the step. */
export function oneStep(name: string, task: string, step: Record<string, unknown> = {}) {
  return {
    ir: "orbit-ir/1",
    name,
    version: "1.0.0",
    steps: [
      { id: "s", task, contract: "1", input: "{% $input %}", ...step },
      { id: "done", return: "{% $steps.s %}" },
    ],
  };
}

export async function deploy(url: string, doc: unknown): Promise<void> {
  const r = await api(url).post("/v1/workflows", doc);
  assert.ok(r.status === 200 || r.status === 201, `deploy: ${r.status} ${JSON.stringify(r.body)}`);
}

export async function start(url: string, workflow: string, id: string, input: unknown) {
  const r = await api(url).post("/v1/executions", { workflow, execution_id: id, input });
  assert.equal(r.status, 201, `start ${id}: ${JSON.stringify(r.body)}`);
  return r.body;
}

/** Waits until the execution is terminal and answers it. */
export async function finished(url: string, id: string, timeoutS = 30) {
  const end = Date.now() + timeoutS * 1000;
  for (;;) {
    const left = Math.max(1, Math.ceil((end - Date.now()) / 1000));
    const r = await api(url).get(`/v1/executions/${id}/wait?timeout_s=${left}`);
    if (r.status === 200 && r.body.status !== "running") return r.body;
    if (Date.now() >= end) {
      throw new Error(`execution ${id} still ${r.body?.status ?? r.status} after ${timeoutS}s`);
    }
  }
}

export async function history(url: string, id: string): Promise<HistoryEvent[]> {
  const events: HistoryEvent[] = [];
  let after = 0;
  for (;;) {
    const r = await api(url).get(`/v1/executions/${id}/history?after_seq=${after}`);
    assert.equal(r.status, 200, JSON.stringify(r.body));
    events.push(...r.body.events);
    if (r.body.next_after_seq == null || r.body.events.length === 0) return events;
    after = r.body.next_after_seq;
  }
}

/** The types of the step's events, in order. */
export function stepTypes(events: HistoryEvent[], step = "s"): string[] {
  return events.filter((e) => e.step === step).map((e) => e.type);
}

/** The registered sessions (`GET /v1/workers`). */
export async function sessions(
  url: string,
  token?: string,
): Promise<Array<Record<string, unknown>>> {
  const r = await api(url, token).get("/v1/workers");
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return Array.isArray(r.body) ? r.body : r.body.workers;
}

/** The `executing` events of one execution. */
export function executing(w: WorkerProcess, executionId: string): WorkerEvent[] {
  return w.events.filter((e) => e.event === "executing" && e.execution_id === executionId);
}

export { waitFor };

/**
 * Holds a fault for a fixed time: the stimulus a scenario applies (nothing listens, the
 * worker must keep retrying), not a wait for a condition.
 */
export function holdFault(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

// ---- the runner ----------------------------------------------------------------------

/** One scenario of the suite (scenarios.ts). */
export interface Scenario {
  id: string;
  title: string;
  /** Needs PostgreSQL (initdb); skipped, loudly, where it is not installed. */
  postgres?: boolean;
  run(r: ScenarioRun): Promise<void>;
}

/** Runs one scenario against one SDK; a failure carries every process's last lines. */
export async function runScenario(sdk: Sdk, command: string[], s: Scenario): Promise<void> {
  const r = new ScenarioRun(sdk, command);
  try {
    await s.run(r);
  } catch (err) {
    const e = err as Error;
    e.message = `[${sdk.name}] ${s.id}: ${e.message}\n${r.transcript()}`;
    throw e;
  } finally {
    await r.cleanup();
  }
}
