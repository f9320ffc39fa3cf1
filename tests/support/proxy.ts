/**
 * A small TCP load balancer for tests, in the role of the reference page's HAProxy: it health-
 * checks `GET /v1/ready` on every backend every `intervalMs`, sends each new connection to a
 * backend that answered 200 (round robin among them), and closes the open connections of a
 * backend that stops answering 200 (HAProxy's `on-marked-down shutdown-sessions`).
 */
export interface Proxy {
  url: string;
  /** The backend each health check found ready, latest first. */
  ready(): string[];
  close(): Promise<void>;
}

export function startProxy(backends: () => string[], intervalMs = 200): Proxy {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  let up: string[] = [];
  let next = 0;
  let closed = false;
  const conns = new Map<string, Set<Deno.Conn>>();

  const check = async () => {
    while (!closed) {
      const results = await Promise.all(
        backends().map(async (b) => {
          try {
            const r = await fetch(`${b}/v1/ready`, { signal: AbortSignal.timeout(500) });
            await r.body?.cancel();
            return r.status === 200 ? b : null;
          } catch {
            return null;
          }
        }),
      );
      const nowUp = results.filter((b): b is string => b !== null);
      for (const b of up) {
        if (!nowUp.includes(b)) {
          for (const c of conns.get(b) ?? []) {
            try {
              c.close();
            } catch { /* closed */ }
          }
          conns.delete(b);
        }
      }
      up = nowUp;
      await new Promise((r) => setTimeout(r, intervalMs));
    }
  };
  const checking = check();

  const serve = async () => {
    for await (const client of listener) {
      const target = up.length > 0 ? up[next++ % up.length]! : null;
      if (!target) {
        client.close();
        continue;
      }
      const u = new URL(target);
      Deno.connect({ hostname: u.hostname, port: Number(u.port) }).then((server) => {
        const set = conns.get(target) ?? new Set();
        conns.set(target, set);
        set.add(client);
        set.add(server);
        const done = () => {
          set.delete(client);
          set.delete(server);
          for (const c of [client, server]) {
            try {
              c.close();
            } catch { /* closed */ }
          }
        };
        Promise.allSettled([
          client.readable.pipeTo(server.writable, { preventClose: false }),
          server.readable.pipeTo(client.writable, { preventClose: false }),
        ]).then(done);
      }, () => client.close());
    }
  };
  const serving = serve().catch(() => {});

  return {
    url: `http://127.0.0.1:${port}`,
    ready: () => up.slice(),
    close: async () => {
      closed = true;
      listener.close();
      for (const set of conns.values()) {
        for (const c of set) {
          try {
            c.close();
          } catch { /* closed */ }
        }
      }
      await checking;
      await serving;
    },
  };
}
