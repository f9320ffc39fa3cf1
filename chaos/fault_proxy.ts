/**
 * A TCP fault proxy on loopback, put between the servers and PostgreSQL (and between the
 * workers and the servers) by the chaos runner. It forwards bytes both ways and, on command:
 *
 * - `delay(ms)`: holds every chunk `ms` before forwarding it (order is kept per direction);
 * - `drop()`: closes every open connection at once (both sides see a reset or EOF);
 * - `blackhole()`: keeps connections open but forwards nothing and accepts new connections
 *   without connecting them, as a network partition looks to a client; `heal()` then closes
 *   every connection that lost bytes (its protocol stream is no longer whole);
 * - `heal()`: back to plain forwarding.
 *
 * ```ts
 * const p = startFaultProxy({ hostname: "127.0.0.1", port: 5432 });
 * p.blackhole();
 * p.heal();
 * await p.close();
 * ```
 */
export interface FaultProxy {
  readonly port: number;
  /** The number of connections open now. */
  readonly open: number;
  /** The number of connections accepted since it started. */
  readonly accepted: number;
  delay(ms: number): void;
  drop(): number;
  blackhole(): void;
  heal(): void;
  /** Points new connections at another target (a restarted server on a new port). */
  retarget(target: { hostname: string; port: number }): void;
  close(): Promise<void>;
}

interface Link {
  client: Deno.Conn;
  server: Deno.Conn | null;
  /** Bytes were discarded: the stream is broken and must be closed on heal. */
  tainted: boolean;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function closeQuietly(c: Deno.Conn | null): void {
  try {
    c?.close();
  } catch { /* closed */ }
}

export function startFaultProxy(target: { hostname: string; port: number }): FaultProxy {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  const links = new Set<Link>();
  let to = target;
  let delayMs = 0;
  let holed = false;
  let closed = false;
  let accepted = 0;

  const end = (l: Link) => {
    links.delete(l);
    closeQuietly(l.client);
    closeQuietly(l.server);
  };

  /** Copies src to dst chunk by chunk, applying the current fault to each chunk. */
  const pump = async (l: Link, src: Deno.Conn, dst: () => Deno.Conn | null) => {
    const buf = new Uint8Array(64 * 1024);
    try {
      for (;;) {
        const n = await src.read(buf);
        if (n === null) break;
        const chunk = buf.slice(0, n);
        if (delayMs > 0) await sleep(delayMs);
        const out = dst();
        if (holed || out === null) {
          l.tainted = true;
          continue;
        }
        let off = 0;
        while (off < chunk.length) off += await out.write(chunk.subarray(off));
      }
    } catch { /* reset or closed */ }
    end(l);
  };

  const connect = async (l: Link) => {
    // A black-holed connection waits (unconnected) until the hole heals or it is dropped.
    while (holed && links.has(l)) await sleep(50);
    if (!links.has(l)) return;
    try {
      l.server = await Deno.connect(to);
    } catch {
      end(l);
      return;
    }
    if (!links.has(l)) {
      closeQuietly(l.server);
      return;
    }
    void pump(l, l.server, () => l.client);
    void pump(l, l.client, () => l.server);
  };

  const serving = (async () => {
    try {
      for await (const client of listener) {
        const l: Link = { client, server: null, tainted: false };
        links.add(l);
        accepted++;
        // The client's first bytes wait in the socket until the link is connected.
        void connect(l);
      }
    } catch { /* listener closed */ }
  })();

  return {
    port,
    get open() {
      return links.size;
    },
    get accepted() {
      return accepted;
    },
    delay(ms) {
      delayMs = ms;
    },
    drop() {
      const n = links.size;
      for (const l of [...links]) end(l);
      return n;
    },
    blackhole() {
      holed = true;
    },
    heal() {
      holed = false;
      delayMs = 0;
      for (const l of [...links]) if (l.tainted) end(l);
    },
    retarget(t) {
      to = t;
    },
    async close() {
      if (closed) return;
      closed = true;
      holed = false;
      listener.close();
      for (const l of [...links]) end(l);
      await serving;
    },
  };
}

/**
 * One fault over several proxies at once (the worker links of a shared cluster: the entry's and
 * each server's advertised address), read when used so that proxies added later are included.
 */
export function fanOut(proxies: () => FaultProxy[]): FaultProxy {
  const all = () => proxies();
  return {
    get port() {
      return all()[0]!.port;
    },
    get open() {
      return all().reduce((n, p) => n + p.open, 0);
    },
    get accepted() {
      return all().reduce((n, p) => n + p.accepted, 0);
    },
    delay: (ms) => all().forEach((p) => p.delay(ms)),
    drop: () => all().reduce((n, p) => n + p.drop(), 0),
    blackhole: () => all().forEach((p) => p.blackhole()),
    heal: () => all().forEach((p) => p.heal()),
    retarget() {
      throw new Error("fanOut: retarget each proxy on its own");
    },
    close: async () => {
      for (const p of all()) await p.close();
    },
  };
}
