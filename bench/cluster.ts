/**
 * The benchmark's servers: one single server, or N shared-mode servers on one PostgreSQL
 * database behind the round-robin proxy of the end-to-end tests (each new connection to the
 * next server answering 200 on /v1/ready), as on the reference page's throughput table.
 */
import { type ServerProcess, startServer } from "../tests/support/server.ts";
import { isReady, sharedArgs } from "../tests/support/shared_cluster.ts";
import { type ReadyProxy, startReadyProxy } from "../tests/support/ready_proxy.ts";

export interface BenchServers {
  /** Where clients and workers connect (the proxy in shared mode). */
  url: string;
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
  /** Shared mode: behind the round-robin proxy (default), or clients on the first server. */
  proxy?: boolean;
}): Promise<BenchServers> {
  if (o.shared <= 0) {
    const server = await startServer({
      db: o.db,
      args: o.args,
      ...(o.denoArgs ? { denoArgs: o.denoArgs } : {}),
    });
    return { url: server.url, servers: [server], kill: async (s) => void await server.kill(s) };
  }
  o.proxy ??= true;
  const servers = await Promise.all(
    Array.from({ length: o.shared }, async (_, i) => {
      const server = await startServer({
        db: o.db,
        args: sharedArgs(`bench-${i + 1}`, { args: o.args, nodeTimeoutS: 5, sessionTimeoutS: 30 }),
        ...(o.denoArgs ? { denoArgs: o.denoArgs } : {}),
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
    return {
      url: servers[0]!.url,
      servers,
      kill: async (s) => {
        for (const server of servers) await server.kill(s);
      },
    };
  }
  const proxy: ReadyProxy = startReadyProxy(servers.map((s) => s.url));
  await proxy.waitReady(servers.length, 30_000);
  return {
    url: proxy.url,
    servers,
    kill: async (s) => {
      await proxy.close();
      for (const server of servers) await server.kill(s);
    },
  };
}
