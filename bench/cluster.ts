/**
 * The benchmark's servers: one single server, N single servers each on a database of its own
 * (`independent`: no shared state at all, what N servers reach on this host whatever the mode),
 * or N shared-mode servers on one PostgreSQL
 * database behind the round-robin proxy of the end-to-end tests (each new connection to the
 * next server answering 200 on /v1/ready), as on the reference page's throughput table — or,
 * without the proxy, every client and worker on the first server, or (`spread`) spread over the
 * servers as a round-robin balancer would: client i on server i % N, worker process j on server
 * j % N. With `cpuCaps` (`--server-cpus`) each server runs in a CPU cgroup of its own.
 */
import { type ServerProcess, startServer } from "../tests/support/server.ts";
import { isReady, sharedArgs } from "../tests/support/shared_cluster.ts";
import { type ReadyProxy, startReadyProxy } from "../tests/support/ready_proxy.ts";
import { type CpuCaps, type CpuStat, processCgroups } from "./cgroup.ts";

export interface BenchServers {
  /** Where clients and workers connect (the proxy in shared mode). */
  url: string;
  /** The distinct addresses clients and workers use: [proxy], [first server] or every server. */
  urls: string[];
  /** The address of client or worker process `i`: `urls[i % urls.length]`. */
  route(i: number): string;
  /** Every server process. */
  servers: ServerProcess[];
  kill(signal?: Deno.Signal): Promise<void>;
}

export async function startBenchServers(o: {
  db: string;
  args: string[];
  denoArgs?: string[];
  /** 0: a single server (no --cluster); N: N shared servers. */
  shared: number;
  /**
   * Instead: one single server on each of these databases, client i on server i % N, worker
   * process j on server j % N (as `spread`).
   */
  independent?: string[];
  /** Shared mode: behind the round-robin proxy (default), or clients on the first server. */
  proxy?: boolean;
  /** Shared mode without the proxy: client i on server i % N, worker j on server j % N. */
  spread?: boolean;
  /**
   * `--server-cpus`: server i goes into `cpuCaps.groups[i]` right after it is spawned, before
   * it listens (the groups are made, and removed, by the caller).
   */
  cpuCaps?: CpuCaps;
}): Promise<BenchServers> {
  const capped = (i: number) => {
    const group = o.cpuCaps?.groups[i];
    if (o.cpuCaps && !group) throw new Error(`no CPU cgroup for server ${i + 1}`);
    return group ? { onSpawn: (pid: number) => group.add(pid) } : {};
  };
  const result = (url: string, urls: string[], servers: ServerProcess[], proxy?: ReadyProxy) => {
    if (o.cpuCaps) logGroups(servers, o.cpuCaps);
    return {
      url,
      urls,
      route: (i: number) => urls[i % urls.length]!,
      servers,
      kill: async (s?: Deno.Signal) => {
        await proxy?.close();
        for (const server of servers) await server.kill(s);
      },
    };
  };
  if (o.independent) {
    if (o.shared > 0) throw new Error("independent: single servers, not shared ones");
    const servers = await Promise.all(o.independent.map((db, i) =>
      startServer({
        db,
        args: o.args,
        ...(o.denoArgs ? { denoArgs: o.denoArgs } : {}),
        ...capped(i),
      })
    ));
    return result(servers[0]!.url, servers.map((s) => s.url), servers);
  }
  if (o.shared <= 0) {
    const server = await startServer({
      db: o.db,
      args: o.args,
      ...(o.denoArgs ? { denoArgs: o.denoArgs } : {}),
      ...capped(0),
    });
    return result(server.url, [server.url], [server]);
  }
  o.proxy ??= true;
  if (o.spread && o.proxy) throw new Error("spread: the servers without the proxy");
  const servers = await Promise.all(
    Array.from({ length: o.shared }, async (_, i) => {
      const server = await startServer({
        db: o.db,
        args: sharedArgs(`bench-${i + 1}`, { args: o.args, nodeTimeoutS: 5, sessionTimeoutS: 30 }),
        ...(o.denoArgs ? { denoArgs: o.denoArgs } : {}),
        ...capped(i),
      });
      const deadline = Date.now() + 60_000;
      while (!(await isReady(server.url))) {
        if (Date.now() > deadline) {
          await server.kill("SIGKILL");
          throw new Error(`bench-${i + 1} did not become ready:\n${server.logs.join("\n")}`);
        }
        await new Promise((r) => setTimeout(r, 100));
      }
      return server;
    }),
  );
  if (!o.proxy) {
    const urls = o.spread ? servers.map((s) => s.url) : [servers[0]!.url];
    return result(servers[0]!.url, urls, servers);
  }
  const proxy: ReadyProxy = startReadyProxy(servers.map((s) => s.url));
  await proxy.waitReady(servers.length, 30_000);
  return result(proxy.url, [proxy.url], servers, proxy);
}

/** Logs (stderr) each server's group and its /proc/<pid>/cgroup; throws if one is not in it. */
function logGroups(servers: ServerProcess[], caps: CpuCaps): void {
  servers.forEach((s, i) => {
    const group = caps.groups[i]!;
    if (!group.procs().includes(s.pid)) {
      throw new Error(`server ${i + 1} (pid ${s.pid}) is not in its CPU cgroup ${group.path}`);
    }
    console.error(
      `  server ${
        i + 1
      } (pid ${s.pid}) in ${group.path}, ${caps.describe()}; /proc/${s.pid}/cgroup: ${
        processCgroups(s.pid)
      }`,
    );
  });
}

/** User + system CPU seconds of a process (`/proc/<pid>/stat` utime + stime, all its threads). */
function procCpuSeconds(pid: number): number {
  try {
    const f = Deno.readTextFileSync(`/proc/${pid}/stat`).split(") ")[1]!.split(" ");
    return (Number(f[11]) + Number(f[12])) / 100;
  } catch {
    return NaN;
  }
}

/** One server's share of a measured window. */
export interface ServerShare {
  pid: number;
  cpu_ms_per_order: number;
  /**
   * With a cap: periods the group was throttled in, of the periods it ran in, and for how long
   * (cgroup v1 sums the throttled time over the CPUs: it can exceed the window).
   */
  throttled_periods: number | null;
  periods: number | null;
  throttled_ms: number | null;
  /** HTTP requests the server answered per order (how evenly the load is spread). */
  requests_per_order: number;
}

/** orbit_http_requests_total of a server, summed over its labels. */
async function requestsTotal(url: string): Promise<number> {
  try {
    const text = await (await fetch(`${url}/v1/metrics`)).text();
    return [...text.matchAll(/^orbit_http_requests_total(?:\{[^}]*\})? (\S+)$/gm)]
      .reduce((n, m) => n + Number(m[1]), 0);
  } catch {
    return NaN;
  }
}

/**
 * Each server's CPU per order over a window (from /proc, as the bench's server total), and with
 * a cap how often its group was throttled (its cgroup's cpu.stat).
 */
export async function serverShares(servers: ServerProcess[], caps: CpuCaps | null) {
  const read = async () => {
    // CPU first (at the window's edge), then the requests over HTTP.
    const cpu = servers.map((s, i) => ({
      cpu: procCpuSeconds(s.pid),
      stat: caps?.groups[i]?.stat() ?? null as CpuStat | null,
    }));
    const requests = await Promise.all(servers.map((s) => requestsTotal(s.url)));
    return cpu.map((c, i) => ({ ...c, requests: requests[i]! }));
  };
  const start = await read();
  return {
    async finish(orders: number): Promise<ServerShare[]> {
      return (await read()).map((end, i) => {
        const s0 = start[i]!;
        const round = (x: number) => Math.round(x * 100) / 100;
        return {
          pid: servers[i]!.pid,
          cpu_ms_per_order: round(((end.cpu - s0.cpu) * 1000) / orders),
          throttled_periods: end.stat && s0.stat
            ? end.stat.nrThrottled - s0.stat.nrThrottled
            : null,
          periods: end.stat && s0.stat ? end.stat.nrPeriods - s0.stat.nrPeriods : null,
          throttled_ms: end.stat && s0.stat
            ? Math.round((end.stat.throttledUs - s0.stat.throttledUs) / 1000)
            : null,
          requests_per_order: round((end.requests - s0.requests) / orders),
        };
      });
    },
  };
}

/** "server 1 3.1 ms, 2.7 requests (throttled in 80 of 95 periods)" for each server. */
export function describeShares(shares: ServerShare[]): string {
  return shares.map((s, i) =>
    `server ${i + 1} ${s.cpu_ms_per_order} ms, ${s.requests_per_order} requests${
      s.periods !== null ? ` (throttled in ${s.throttled_periods} of ${s.periods} periods)` : ""
    }`
  ).join(", ");
}
