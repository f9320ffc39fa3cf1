/**
 * The round-robin proxy of the reference page's shared-mode end-to-end setup ("a round-robin
 * proxy that sends each new connection to the next server answering 200 on /v1/ready"), in the
 * role HAProxy plays in `deploy/haproxy-shared.cfg`:
 *
 * - a TCP proxy on 127.0.0.1:<free port>; each NEW client connection goes to the next backend,
 *   in round-robin order over the backend list, whose last health check answered 200;
 * - every backend is checked on its own loop, `GET /v1/ready` every `intervalMs` (250 ms) with a
 *   `timeoutMs` deadline, on a fresh connection each time (a paused server times out, a killed
 *   one refuses); a backend is marked down after `fall` failed checks in a row and up again
 *   after `rise` good ones;
 * - when a backend is marked down, the connections open to it are closed (HAProxy's
 *   `on-marked-down shutdown-sessions`), so keep-alive clients reconnect through the proxy;
 * - a connect that fails is retried on the next ready backend (`retry-on conn-failure`); a client
 *   that arrives while no backend is ready waits up to `queueMs` for one, then is closed.
 *
 * ```ts
 * const proxy = startReadyProxy([a.url, b.url, c.url]);
 * await proxy.waitReady(3);
 * await fetch(`${proxy.url}/v1/health`);
 * await proxy.close();
 * ```
 */

export interface ReadyProxyOptions {
  /** Health-check period per backend (default 250 ms). */
  intervalMs?: number;
  /** Deadline of one health check (default 1000 ms). */
  timeoutMs?: number;
  /** Failed checks in a row that mark a backend down (default 2, as `fall 2`). */
  fall?: number;
  /** Good checks in a row that mark a backend up (default 1). */
  rise?: number;
  /** How long a new client waits for a ready backend before it is closed (default 2000 ms). */
  queueMs?: number;
}

export interface ReadyProxy {
  /** `http://127.0.0.1:<port>` */
  readonly url: string;
  readonly port: number;
  /** The backend base URLs, in round-robin order. */
  readonly backends: string[];
  /** Replaces the backend list (a restarted server listens on a new port). */
  setBackends(backends: string[]): void;
  /** The backends currently marked up, in list order. */
  ready(): string[];
  /** Open client connections per backend. */
  connections(): Record<string, number>;
  /** Waits until at least `n` backends are marked up. */
  waitReady(n?: number, timeoutMs?: number): Promise<void>;
  /** Stops listening, closes every connection and stops the health checks. */
  close(): Promise<void>;
}

interface Backend {
  url: string;
  hostname: string;
  port: number;
  up: boolean;
  goodInRow: number;
  badInRow: number;
  /** Both sockets of every client connection proxied to this backend. */
  conns: Set<Deno.Conn>;
  /** Set when the backend leaves the list: ends its check loop. */
  removed: boolean;
  loop: Promise<void>;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

function closeQuietly(c: Deno.Conn): void {
  try {
    c.close();
  } catch { /* already closed */ }
}

/**
 * Copies one direction of a proxied connection until its end, then half-closes the other side
 * (the peer sees the end as if connected directly); an error on either socket closes both.
 * Plain reads and writes through one buffer: `readable.pipeTo(writable)` cost about 75 µs of
 * CPU more per proxied HTTP request (Deno 2.9, small requests), which the benchmark's shared
 * runs pay on the same cores as the servers.
 */
async function pump(from: Deno.Conn, to: Deno.Conn): Promise<void> {
  const buf = new Uint8Array(64 * 1024);
  try {
    for (;;) {
      const n = await from.read(buf);
      if (n === null) break;
      for (let off = 0; off < n;) off += await to.write(buf.subarray(off, n));
    }
  } catch {
    closeQuietly(from);
    closeQuietly(to);
    return;
  }
  try {
    await to.closeWrite();
  } catch { /* closed already */ }
}

export function startReadyProxy(initial: string[], o: ReadyProxyOptions = {}): ReadyProxy {
  const intervalMs = o.intervalMs ?? 250;
  const timeoutMs = o.timeoutMs ?? 1000;
  const fall = o.fall ?? 2;
  const rise = o.rise ?? 1;
  const queueMs = o.queueMs ?? 2000;

  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  // No pooling: every check opens its own connection, as a load balancer's check does.
  const client = Deno.createHttpClient({ poolMaxIdlePerHost: 0 });
  let list: Backend[] = [];
  let next = 0;
  let closed = false;
  const waiters = new Set<() => void>();
  const loops = new Set<Promise<void>>();
  const wake = () => {
    for (const w of [...waiters]) w();
  };

  const markDown = (b: Backend) => {
    b.up = false;
    for (const c of b.conns) closeQuietly(c);
    b.conns.clear();
  };

  const checkOnce = async (b: Backend): Promise<boolean> => {
    try {
      const r = await fetch(`${b.url}/v1/ready`, {
        client,
        signal: AbortSignal.timeout(timeoutMs),
      });
      await r.body?.cancel();
      return r.status === 200;
    } catch {
      return false;
    }
  };

  const checkLoop = async (b: Backend) => {
    while (!closed && !b.removed) {
      const ok = await checkOnce(b);
      if (closed || b.removed) break;
      if (ok) {
        b.badInRow = 0;
        if (!b.up && ++b.goodInRow >= rise) {
          b.up = true;
          wake();
        }
      } else {
        b.goodInRow = 0;
        if (b.up && ++b.badInRow >= fall) markDown(b);
      }
      await sleep(intervalMs);
    }
  };

  const makeBackend = (url: string): Backend => {
    const u = new URL(url);
    const b: Backend = {
      url,
      hostname: u.hostname,
      port: Number(u.port || (u.protocol === "https:" ? 443 : 80)),
      up: false,
      goodInRow: 0,
      badInRow: 0,
      conns: new Set(),
      removed: false,
      loop: Promise.resolve(),
    };
    b.loop = checkLoop(b);
    loops.add(b.loop);
    b.loop.finally(() => loops.delete(b.loop));
    return b;
  };

  const setBackends = (urls: string[]) => {
    const keep = new Map(list.map((b) => [b.url, b]));
    const nextList = urls.map((u) => keep.get(u) ?? makeBackend(u));
    for (const b of list) {
      if (!urls.includes(b.url)) {
        b.removed = true;
        markDown(b);
      }
    }
    list = nextList;
    wake();
  };
  setBackends(initial);

  /** The next ready backend in round-robin order after the last one chosen, skipping `tried`. */
  const pick = (tried: Set<Backend>): Backend | null => {
    for (let i = 0; i < list.length; i++) {
      const b = list[(next + i) % list.length]!;
      if (b.up && !tried.has(b)) {
        next = (next + i + 1) % list.length;
        return b;
      }
    }
    return null;
  };

  const waitForAnyUp = (ms: number) =>
    new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(t);
        waiters.delete(check);
        resolve();
      };
      const check = () => {
        if (closed || list.some((b) => b.up)) done();
      };
      const t = setTimeout(done, ms);
      waiters.add(check);
      check();
    });

  const handle = async (conn: Deno.Conn) => {
    const tried = new Set<Backend>();
    const deadline = Date.now() + queueMs;
    for (;;) {
      if (closed) return closeQuietly(conn);
      const b = pick(tried);
      if (!b) {
        // Every ready backend refused, or none is ready: wait for one (a failover) or give up.
        if (Date.now() >= deadline) return closeQuietly(conn);
        if (tried.size > 0) {
          tried.clear();
          await sleep(50);
        } else {
          await waitForAnyUp(Math.min(250, deadline - Date.now()));
        }
        continue;
      }
      tried.add(b);
      let upstream: Deno.Conn;
      try {
        upstream = await Deno.connect({ hostname: b.hostname, port: b.port });
      } catch {
        continue; // retry-on conn-failure: the next ready backend
      }
      if (closed || !b.up) {
        closeQuietly(upstream);
        continue;
      }
      b.conns.add(conn);
      b.conns.add(upstream);
      await Promise.all([pump(conn, upstream), pump(upstream, conn)]);
      b.conns.delete(conn);
      b.conns.delete(upstream);
      closeQuietly(conn);
      closeQuietly(upstream);
      return;
    }
  };

  const handlers = new Set<Promise<void>>();
  const accepting = (async () => {
    try {
      for await (const conn of listener) {
        const h = handle(conn).catch(() => closeQuietly(conn));
        handlers.add(h);
        h.finally(() => handlers.delete(h));
      }
    } catch { /* the listener was closed */ }
  })();

  return {
    url: `http://127.0.0.1:${port}`,
    port,
    get backends() {
      return list.map((b) => b.url);
    },
    setBackends,
    ready: () => list.filter((b) => b.up).map((b) => b.url),
    connections: () => Object.fromEntries(list.map((b) => [b.url, Math.floor(b.conns.size / 2)])),
    waitReady: async (n = list.length, ms = 60_000) => {
      const end = Date.now() + ms;
      while (list.filter((b) => b.up).length < n) {
        if (Date.now() > end) {
          throw new Error(
            `the proxy found ${list.filter((b) => b.up).length} of ${n} backends ready: ` +
              list.map((b) => `${b.url} ${b.up ? "up" : "down"}`).join(", "),
          );
        }
        await sleep(50);
      }
    },
    close: async () => {
      if (closed) return;
      closed = true;
      wake();
      try {
        listener.close();
      } catch { /* closed */ }
      for (const b of list) {
        b.removed = true;
        markDown(b);
      }
      await accepting;
      await Promise.allSettled([...handlers]);
      await Promise.allSettled([...loops]);
      client.close();
    },
  };
}
