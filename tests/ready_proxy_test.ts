/**
 * The shared-mode test proxy (tests/support/ready_proxy.ts) against tiny backends whose
 * /v1/ready is flipped by the test: round robin per new connection over the ready ones, a
 * backend answering 503 (or not at all) skipped, connections to a backend marked down closed,
 * the backend list replaced, a client queued through a moment with no ready backend.
 */
import assert from "node:assert/strict";
import { startReadyProxy } from "./support/ready_proxy.ts";
import { waitFor } from "./support/server.ts";

interface Backend {
  name: string;
  url: string;
  ready: boolean;
  /** While set, /v1/ready answers only when it resolves. */
  hang?: Promise<void>;
  server: Deno.HttpServer<Deno.NetAddr>;
}

function backend(name: string): Backend {
  const b = { name, ready: true } as Backend;
  b.server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, (req) => {
    const path = new URL(req.url).pathname;
    if (path === "/v1/ready") {
      if (b.hang) return b.hang.then(() => new Response(null, { status: 503 }));
      return Response.json({ ready: b.ready }, { status: b.ready ? 200 : 503 });
    }
    return new Response(name);
  });
  b.url = `http://127.0.0.1:${b.server.addr.port}`;
  return b;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** One HTTP/1.1 request on a new connection (`Connection: close`): the body, or null. */
async function getOnce(port: number, path = "/whoami"): Promise<string | null> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  try {
    await conn.write(
      encoder.encode(`GET ${path} HTTP/1.1\r\nhost: test\r\nconnection: close\r\n\r\n`),
    );
    let text = "";
    const buf = new Uint8Array(4096);
    for (;;) {
      const n = await conn.read(buf).catch(() => null);
      if (n === null) break;
      text += decoder.decode(buf.subarray(0, n));
    }
    const at = text.indexOf("\r\n\r\n");
    return at < 0 ? null : text.slice(at + 4);
  } finally {
    try {
      conn.close();
    } catch { /* closed by the peer */ }
  }
}

/** A keep-alive connection: sends a request, reads one response (up to the body's name). */
class KeepAlive {
  private constructor(readonly conn: Deno.Conn) {}
  static async open(port: number): Promise<KeepAlive> {
    return new KeepAlive(await Deno.connect({ hostname: "127.0.0.1", port }));
  }
  async get(path = "/whoami"): Promise<string | null> {
    await this.conn.write(encoder.encode(`GET ${path} HTTP/1.1\r\nhost: test\r\n\r\n`));
    const buf = new Uint8Array(4096);
    const n = await this.conn.read(buf).catch(() => null);
    if (n === null) return null;
    const text = decoder.decode(buf.subarray(0, n));
    return text.slice(text.indexOf("\r\n\r\n") + 4);
  }
  /** Resolves true once the proxy closes the connection. */
  async closedByPeer(): Promise<boolean> {
    const n = await this.conn.read(new Uint8Array(16)).catch(() => null);
    return n === null;
  }
  close(): void {
    try {
      this.conn.close();
    } catch { /* closed */ }
  }
}

async function withBackends(
  names: string[],
  fn: (bs: Backend[]) => Promise<void>,
): Promise<void> {
  const bs = names.map(backend);
  try {
    await fn(bs);
  } finally {
    for (const b of bs) await b.server.shutdown().catch(() => {});
  }
}

Deno.test("ready proxy: each new connection goes to the next ready backend in turn", async () => {
  await withBackends(["a", "b", "c"], async (bs) => {
    const proxy = startReadyProxy(bs.map((b) => b.url));
    try {
      assert.match(proxy.url, /^http:\/\/127\.0\.0\.1:\d+$/);
      assert.equal(proxy.url, `http://127.0.0.1:${proxy.port}`);
      assert.deepEqual(proxy.backends, bs.map((b) => b.url));
      await proxy.waitReady(3, 10_000);
      const seen: (string | null)[] = [];
      for (let i = 0; i < 6; i++) seen.push(await getOnce(proxy.port));
      // Round robin: every backend twice, never the same one twice in a row.
      assert.deepEqual([...seen].sort(), ["a", "a", "b", "b", "c", "c"]);
      for (let i = 1; i < seen.length; i++) assert.notEqual(seen[i], seen[i - 1], `${seen}`);
      assert.deepEqual(seen.slice(3), seen.slice(0, 3));
    } finally {
      await proxy.close();
    }
  });
});

Deno.test("ready proxy: a backend answering 503 on /v1/ready is skipped, then taken back", async () => {
  await withBackends(["a", "b"], async ([a, b]) => {
    const proxy = startReadyProxy([a!.url, b!.url]);
    try {
      await proxy.waitReady(2, 10_000);
      b!.ready = false;
      await waitFor(() => proxy.ready().length === 1, "b to be marked down", 10_000);
      assert.deepEqual(proxy.ready(), [a!.url]);
      for (let i = 0; i < 4; i++) assert.equal(await getOnce(proxy.port), "a");
      b!.ready = true;
      await proxy.waitReady(2, 10_000);
      const seen = new Set<string | null>();
      for (let i = 0; i < 4; i++) seen.add(await getOnce(proxy.port));
      assert.deepEqual([...seen].sort(), ["a", "b"]);
    } finally {
      await proxy.close();
    }
  });
});

Deno.test("ready proxy: connections open to a backend marked down are closed", async () => {
  await withBackends(["a"], async ([a]) => {
    const proxy = startReadyProxy([a!.url]);
    await proxy.waitReady(1, 10_000);
    const c = await KeepAlive.open(proxy.port);
    try {
      assert.equal(await c.get(), "a");
      assert.equal(await c.get(), "a", "the connection is kept alive");
      assert.equal(proxy.connections()[a!.url], 1);
      a!.ready = false;
      assert.equal(await c.closedByPeer(), true, "the proxy closed the client's connection");
      assert.deepEqual(proxy.ready(), []);
      assert.equal(proxy.connections()[a!.url], 0);
    } finally {
      c.close();
      await proxy.close();
    }
  });
});

Deno.test("ready proxy: a backend that is gone is skipped; setBackends replaces the list", async () => {
  await withBackends(["a", "b", "c"], async ([a, b, c]) => {
    const proxy = startReadyProxy([a!.url, b!.url]);
    try {
      await proxy.waitReady(2, 10_000);
      await b!.server.shutdown();
      await waitFor(() => proxy.ready().length === 1, "the stopped backend to be marked down");
      for (let i = 0; i < 3; i++) assert.equal(await getOnce(proxy.port), "a");

      proxy.setBackends([a!.url, c!.url]);
      assert.deepEqual(proxy.backends, [a!.url, c!.url]);
      await proxy.waitReady(2, 10_000);
      const seen = [];
      for (let i = 0; i < 4; i++) seen.push(await getOnce(proxy.port));
      assert.deepEqual(seen.sort(), ["a", "a", "c", "c"]);
    } finally {
      await proxy.close();
    }
  });
});

Deno.test("ready proxy: a client arriving while no backend is ready waits for one", async () => {
  await withBackends(["a"], async ([a]) => {
    a!.ready = false;
    const proxy = startReadyProxy([a!.url], { queueMs: 5_000 });
    try {
      const answer = getOnce(proxy.port);
      await new Promise((r) => setTimeout(r, 300));
      a!.ready = true;
      assert.equal(await answer, "a");
    } finally {
      await proxy.close();
    }
  });
});

Deno.test("ready proxy: with no ready backend a client is closed after the queue time", async () => {
  await withBackends(["a"], async ([a]) => {
    a!.ready = false;
    const proxy = startReadyProxy([a!.url], { queueMs: 300 });
    try {
      const started = Date.now();
      assert.equal(await getOnce(proxy.port), null);
      assert.ok(Date.now() - started >= 250, "held for the queue time");
    } finally {
      await proxy.close();
    }
  });
});

Deno.test("ready proxy: a backend that stops answering (a paused server) is marked down", async () => {
  await withBackends(["a", "b"], async ([a, b]) => {
    const proxy = startReadyProxy([a!.url, b!.url], { timeoutMs: 300 });
    let resume = () => {};
    try {
      await proxy.waitReady(2, 10_000);
      const c = await KeepAlive.open(proxy.port);
      const first = await c.get();
      const paused = first === "a" ? a! : b!;
      // From now on its /v1/ready never answers, as a SIGSTOPped server's does.
      paused.hang = new Promise<void>((r) => resume = r);
      assert.equal(await c.closedByPeer(), true, "the connection to the paused one is closed");
      c.close();
      assert.deepEqual(proxy.ready(), [(first === "a" ? b! : a!).url]);
      for (let i = 0; i < 3; i++) assert.notEqual(await getOnce(proxy.port), paused.name);
    } finally {
      resume();
      await proxy.close();
    }
  });
});
