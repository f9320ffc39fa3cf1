/**
 * The worker slots' HTTP/1.1 client (`http1.ts`) against a real `Deno.serve` (keep-alive, a
 * chunked answer, a large body, UTF-8) and against a scripted TCP server that answers exactly
 * the bytes a test gives it, a few at a time: interim `1xx` answers, chunk extensions and
 * trailers, a body that ends with the connection, `connection: close`, an idle connection the
 * server closed (sent again once, on a new connection), an answer cut off half-way (not sent
 * again), an abort, a refused connection.
 */
import assert from "node:assert/strict";
import { type ByteConn, ConnectionClosed, Http1Pool } from "./http1.ts";
import { type HttpRequest, Transport } from "./http.ts";
import { OrbitApiError, OrbitConnectionError } from "./errors.ts";

const connect = Deno.connect.bind(Deno);

function request(
  url: string,
  method = "GET",
  body?: string,
  signal?: AbortSignal,
): HttpRequest {
  const headers: Record<string, string> = {};
  if (body !== undefined) headers["content-type"] = "application/json";
  return {
    method,
    url,
    headers,
    ...(body === undefined ? {} : { body }),
    signal: signal ?? new AbortController().signal,
  };
}

Deno.test("http1: keep-alive against Deno.serve — one connection, bodies both ways, chunked, 1 MB", async () => {
  const ports: number[] = [];
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    async (req, info) => {
      ports.push(info.remoteAddr.port);
      const path = new URL(req.url).pathname + new URL(req.url).search;
      if (path === "/chunked") {
        const enc = new TextEncoder();
        return new Response(
          new ReadableStream({
            start(c) {
              c.enqueue(enc.encode('{"parts":'));
              c.enqueue(enc.encode('["a","b"]}'));
              c.close();
            },
          }),
        );
      }
      if (path === "/empty") return new Response(null, { status: 204 });
      const text = await req.text();
      return Response.json({ method: req.method, path, length: text.length, echo: text });
    },
  );
  const base = `http://127.0.0.1:${server.addr.port}`;
  const pool = new Http1Pool(base, { connect });
  try {
    const a = await pool.exchange(request(`${base}/v1/x?wait=1`));
    assert.equal(a.status, 200);
    assert.deepEqual(JSON.parse(a.text), {
      method: "GET",
      path: "/v1/x?wait=1",
      length: 0,
      echo: "",
    });

    const body = JSON.stringify({ name: "zoë ✓ 日本", n: 1 });
    const b = await pool.exchange(request(`${base}/post`, "POST", body));
    assert.equal(JSON.parse(b.text).echo, body, "UTF-8 both ways, content-length in bytes");

    const c = await pool.exchange(request(`${base}/chunked`));
    assert.deepEqual(JSON.parse(c.text), { parts: ["a", "b"] });

    const d = await pool.exchange(request(`${base}/empty`));
    assert.equal(d.status, 204);
    assert.equal(d.text, "");

    const big = JSON.stringify({ data: "x".repeat(1 << 20) });
    const e = await pool.exchange(request(`${base}/big`, "POST", big));
    const echoed = JSON.parse(e.text);
    assert.equal(echoed.length, big.length);
    assert.equal(echoed.echo, big);
    // The connection goes on after an answer larger than its buffer.
    const f = await pool.exchange(request(`${base}/after-big`, "POST", '{"small":true}'));
    assert.equal(JSON.parse(f.text).echo, '{"small":true}');

    assert.equal(ports.length, 6);
    assert.equal(new Set(ports).size, 1, `one kept-alive connection, not ${new Set(ports).size}`);
  } finally {
    pool.close();
    await server.shutdown();
  }
});

type Line = string | { text: string; close: true } | "close" | "hang";

/** An HTTP/1.1 answer with a content-length. */
function answer(status: string, body: string, headers = ""): string {
  return `HTTP/1.1 ${status}\r\n${headers}Content-Length: ${
    new TextEncoder().encode(body).length
  }\r\n\r\n${body}`;
}

/**
 * A TCP server that reads one request (head and content-length body) at a time and writes the
 * script's next line for it, `step` bytes at a time: a string (the connection stays open),
 * `{text, close}` (written, then the connection closed), `"close"` (closed without a word),
 * `"hang"` (never answered).
 */
function scripted(script: Line[], step = 3) {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const requests: Array<{ conn: number; head: string; body: string }> = [];
  const waiters = new Set<() => void>();
  let conns = 0;
  let next = 0;
  const open = new Set<Deno.Conn>();
  const serve = async (conn: Deno.Conn, id: number) => {
    const dec = new TextDecoder();
    let buf = "";
    const chunk = new Uint8Array(65536);
    const close = () => {
      open.delete(conn);
      try {
        conn.close();
      } catch { /* closed */ }
    };
    try {
      for (;;) {
        let end;
        while ((end = buf.indexOf("\r\n\r\n")) < 0) {
          const n = await conn.read(chunk);
          if (n === null) return close();
          buf += dec.decode(chunk.subarray(0, n));
        }
        const head = buf.slice(0, end);
        const length = Number(/content-length: (\d+)/i.exec(head)?.[1] ?? 0);
        while (buf.length < end + 4 + length) {
          const n = await conn.read(chunk);
          if (n === null) return close();
          buf += dec.decode(chunk.subarray(0, n));
        }
        requests.push({ conn: id, head, body: buf.slice(end + 4, end + 4 + length) });
        for (const w of [...waiters]) w();
        buf = buf.slice(end + 4 + length);
        const line = script[next++] ?? "close";
        if (line === "hang") return;
        if (line === "close") return close();
        const text = typeof line === "string" ? line : line.text;
        const bytes = new TextEncoder().encode(text);
        for (let i = 0; i < bytes.length; i += step) await conn.write(bytes.subarray(i, i + step));
        if (typeof line !== "string") return close();
      }
    } catch {
      close(); // reset by the client
    }
  };
  const accepting = (async () => {
    try {
      for await (const conn of listener) {
        open.add(conn);
        serve(conn, ++conns);
      }
    } catch { /* listener closed */ }
  })();
  return {
    base: `http://127.0.0.1:${(listener.addr as Deno.NetAddr).port}`,
    requests,
    get connections() {
      return conns;
    },
    /** Resolves once `n` requests have been read. */
    requested(n: number): Promise<void> {
      return new Promise((resolve) => {
        const check = () => {
          if (requests.length < n) return;
          waiters.delete(check);
          resolve();
        };
        waiters.add(check);
        check();
      });
    },
    async stop() {
      listener.close();
      for (const c of open) {
        try {
          c.close();
        } catch { /* closed */ }
      }
      await accepting;
    },
  };
}

Deno.test("http1: 1xx skipped, chunk extensions and trailers, bytes arriving a few at a time", async () => {
  const s = scripted([
    'HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n4;ext=1\r\n{"a"\r\n3\r\n:1}\r\n0\r\nX-Trailer: yes\r\n\r\n',
    answer("201 Created", "{}"),
  ]);
  const pool = new Http1Pool(s.base, { connect });
  try {
    const a = await pool.exchange(request(`${s.base}/one`, "POST", '{"x":1}'));
    assert.equal(a.status, 200);
    assert.equal(a.statusText, "OK");
    assert.equal(a.text, '{"a":1}');
    const b = await pool.exchange(request(`${s.base}/two`));
    assert.equal(b.status, 201);
    assert.equal(b.text, "{}");
    assert.equal(s.connections, 1, "kept alive after a chunked answer");
    assert.match(s.requests[0]!.head, /^POST \/one HTTP\/1\.1\r\n/);
    assert.match(s.requests[0]!.head, /\r\nhost: 127\.0\.0\.1:\d+\r\n/);
    assert.match(s.requests[0]!.head, /\r\ncontent-length: 7(\r\n|$)/);
    assert.equal(s.requests[0]!.body, '{"x":1}');
  } finally {
    pool.close();
    await s.stop();
  }
});

Deno.test("http1: a body that ends with its connection, and connection: close, are not reused", async () => {
  const s = scripted([
    { text: "HTTP/1.0 200 OK\r\n\r\nuntil the end", close: true },
    answer("200 OK", "first", "Connection: close\r\n"),
    answer("200 OK", "second"),
  ]);
  const pool = new Http1Pool(s.base, { connect });
  try {
    assert.equal((await pool.exchange(request(`${s.base}/a`))).text, "until the end");
    assert.equal((await pool.exchange(request(`${s.base}/b`))).text, "first");
    assert.equal((await pool.exchange(request(`${s.base}/c`))).text, "second");
    assert.deepEqual(s.requests.map((r) => r.conn), [1, 2, 3], "a new connection each time");
  } finally {
    pool.close();
    await s.stop();
  }
});

Deno.test("http1: an idle connection the server closed — the request goes once more, on a new one", async () => {
  const s = scripted([{ text: answer("200 OK", "one"), close: true }, answer("200 OK", "two")]);
  const pool = new Http1Pool(s.base, { connect });
  try {
    assert.equal((await pool.exchange(request(`${s.base}/a`))).text, "one");
    await s.requested(1);
    const two = await pool.exchange(request(`${s.base}/b`, "POST", '{"n":2}'));
    assert.equal(two.text, "two");
    assert.deepEqual(
      s.requests.map((r) => [r.conn, r.body]),
      [[1, ""], [2, '{"n":2}']],
      "the second request reached the server once, on the second connection",
    );
  } finally {
    pool.close();
    await s.stop();
  }
});

Deno.test("http1: an answer cut off, or a new connection closed, fails and is not sent again", async () => {
  const s = scripted([
    answer("200 OK", "ok"),
    { text: "HTTP/1.1 200 OK\r\nContent-Le", close: true },
    "close",
  ]);
  const pool = new Http1Pool(s.base, { connect });
  try {
    assert.equal((await pool.exchange(request(`${s.base}/a`))).text, "ok");
    const cut = await pool.exchange(request(`${s.base}/b`)).catch((e) => e);
    assert.ok(cut instanceof ConnectionClosed, String(cut));
    assert.equal(cut.answered, true);
    const closed = await pool.exchange(request(`${s.base}/c`)).catch((e) => e);
    assert.ok(closed instanceof ConnectionClosed, String(closed));
    assert.equal(closed.answered, false);
    assert.deepEqual(s.requests.map((r) => r.conn), [1, 1, 2], "each request sent once");
  } finally {
    pool.close();
    await s.stop();
  }
});

Deno.test("http1: an abort ends the request at once; the next one opens a new connection", async () => {
  const s = scripted(["hang", answer("200 OK", "after")]);
  const pool = new Http1Pool(s.base, { connect });
  try {
    const controller = new AbortController();
    const pending = pool.exchange(request(`${s.base}/a`, "GET", undefined, controller.signal));
    await s.requested(1);
    const reason = new Error("given up");
    controller.abort(reason);
    await assert.rejects(pending, (e) => e === reason);
    assert.equal((await pool.exchange(request(`${s.base}/b`))).text, "after");
    assert.deepEqual(s.requests.map((r) => r.conn), [1, 2]);
  } finally {
    pool.close();
    await s.stop();
  }
});

Deno.test("http1 in a Transport: API errors, timeouts and a refused connection as the SDK's errors", async () => {
  const s = scripted([
    answer(
      "404 Not Found",
      JSON.stringify({ error: { code: "UNKNOWN_SESSION", message: "no such session" } }),
    ),
    "hang",
  ]);
  const pool = new Http1Pool(s.base, { connect });
  const t = new Transport({ server: s.base, token: "secret" }, pool.exchange);
  try {
    const e = await t.post("/v1/workers/poll", { session_id: "s" }).catch((x) => x);
    assert.ok(e instanceof OrbitApiError, String(e));
    assert.equal(e.status, 404);
    assert.equal(e.code, "UNKNOWN_SESSION");
    assert.match(s.requests[0]!.head, /\r\nauthorization: Bearer secret(\r\n|$)/);

    const slow = await t.get("/v1/slow", { timeoutMs: 50 }).catch((x) => x);
    assert.ok(slow instanceof OrbitConnectionError, String(slow));
    assert.match(slow.message, /timed out after 0\.1s|timed out after 0s/);
  } finally {
    pool.close();
    await s.stop();
  }
  const gone = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (gone.addr as Deno.NetAddr).port;
  gone.close();
  const refusedPool = new Http1Pool(`http://127.0.0.1:${port}`, { connect });
  const refused = await new Transport({ server: `http://127.0.0.1:${port}` }, refusedPool.exchange)
    .get("/v1/health").catch((x) => x);
  assert.ok(refused instanceof OrbitConnectionError, String(refused));
  assert.match(refused.message, /refused/i);
});

Deno.test("http1: an answer sent before the request's body was read (413) still comes back", async () => {
  let finish!: () => void;
  const finished = new Promise<void>((r) => (finish = r));
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const served = (async () => {
    const conn = await listener.accept();
    const buf = new Uint8Array(1024);
    let head = "";
    while (!head.includes("\r\n\r\n")) {
      const n = await conn.read(buf);
      if (n === null) break;
      head += new TextDecoder().decode(buf.subarray(0, n));
    }
    const body = JSON.stringify({ error: { code: "BODY_TOO_LARGE", message: "over 1 MB" } });
    await conn.write(
      new TextEncoder().encode(
        `HTTP/1.1 413 Payload Too Large\r\nconnection: close\r\ncontent-length: ${body.length}\r\n\r\n${body}`,
      ),
    );
    // Reads nothing more: a client that wrote the whole body before reading would wait here
    // for ever (the 8 MB do not fit in the sockets' buffers).
    await finished;
    conn.close();
  })();
  const base = `http://127.0.0.1:${(listener.addr as Deno.NetAddr).port}`;
  const pool = new Http1Pool(base, { connect });
  try {
    const t = new Transport({ server: base }, pool.exchange);
    const e = await t.post("/v1/tasks/complete", { output: "x".repeat(8 << 20) }, {
      timeoutMs: 10_000, // a regression fails here instead of hanging
    }).catch((x) => x);
    assert.ok(e instanceof OrbitApiError, String(e));
    assert.equal(e.status, 413);
    assert.equal(e.code, "BODY_TOO_LARGE");
  } finally {
    finish();
    pool.close();
    listener.close();
    await served;
  }
});

Deno.test("http1: resend 'idempotent' sends a GET again on a closed idle connection, never a POST", async () => {
  const s = scripted([
    { text: answer("200 OK", "one"), close: true },
    answer("200 OK", "get again"),
    { text: answer("200 OK", "three"), close: true },
  ]);
  const pool = new Http1Pool(s.base, { connect, resend: "idempotent" });
  try {
    assert.equal((await pool.exchange(request(`${s.base}/a`))).text, "one");
    await s.requested(1);
    assert.equal((await pool.exchange(request(`${s.base}/b`))).text, "get again");
    assert.equal((await pool.exchange(request(`${s.base}/c`))).text, "three");
    await s.requested(3);
    const post = await pool.exchange(request(`${s.base}/d`, "POST", '{"start":1}')).catch((e) => e);
    assert.ok(post instanceof ConnectionClosed || post?.name === "BrokenPipe", String(post));
    assert.equal(s.requests.length, 3, "the POST was not sent again");
  } finally {
    pool.close();
    await s.stop();
  }
});

Deno.test("http1: idle connections — up to maxIdle kept, none older than idleMs used", async () => {
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    (_req, info) => new Response(String(info.remoteAddr.port)),
  );
  const base = `http://127.0.0.1:${server.addr.port}`;
  let clock = 0;
  const pool = new Http1Pool(base, { connect, maxIdle: 2, idleMs: 1000, now: () => clock });
  try {
    const ports = await Promise.all([1, 2, 3].map(() => pool.exchange(request(`${base}/`))));
    assert.equal(
      new Set(ports.map((a) => a.text)).size,
      3,
      "three requests at once, three connections",
    );
    assert.equal(pool.idle, 2, "two of them kept");
    const again = await pool.exchange(request(`${base}/`));
    assert.ok(ports.some((a) => a.text === again.text), "an idle connection was used");
    clock += 1001;
    const later = await pool.exchange(request(`${base}/`));
    assert.ok(!ports.some((a) => a.text === later.text), "idle too long: a new connection");
    assert.equal(pool.idle, 1);
  } finally {
    pool.close();
    assert.equal(pool.idle, 0);
    await server.shutdown();
  }
});

Deno.test("http1: an abort while connecting ends the request at once; the late connection is closed once", async () => {
  let arrive!: (c: ByteConn) => void;
  let closes = 0;
  const fake: ByteConn = {
    read: () => new Promise(() => {}),
    write: (p) => Promise.resolve(p.length),
    close: () => {
      if (++closes > 1) throw new Error("closed twice");
    },
  };
  const pool = new Http1Pool("http://10.255.255.1:9", {
    connect: () => new Promise((r) => (arrive = r)),
  });
  const controller = new AbortController();
  const pending = pool.exchange(
    request("http://10.255.255.1:9/x", "GET", undefined, controller.signal),
  );
  const reason = new Error("timed out");
  controller.abort(reason);
  await assert.rejects(pending, (e) => e === reason);
  arrive(fake);
  await new Promise((r) => setTimeout(r, 0)); // one macrotask: its arrival's microtasks have run
  assert.equal(closes, 1);
  pool.close();
});

Deno.test("http1: a request with an affinity goes out on the connection the holder names when it is idle", async () => {
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    async (req, info) => {
      const ms = Number(new URL(req.url).searchParams.get("ms") ?? 0);
      if (ms > 0) await new Promise((r) => setTimeout(r, ms));
      return new Response(String(info.remoteAddr.port));
    },
  );
  const base = `http://127.0.0.1:${server.addr.port}`;
  const pool = new Http1Pool(base, { connect, maxIdle: 4 });
  try {
    // Two connections, A (answers first) and B (answers last: the most recently used one).
    const holder: { conn?: unknown } = {};
    const [a, b] = await Promise.all([
      pool.exchange({ ...request(`${base}/?ms=0`), affinity: holder }),
      pool.exchange(request(`${base}/?ms=150`)),
    ]);
    assert.notEqual(a.text, b.text, "two connections");
    assert.ok(holder.conn, "the holder names the connection used");
    assert.equal(pool.idle, 2);
    // Without an affinity, the most recently used idle connection (B); with one, A.
    assert.equal((await pool.exchange(request(`${base}/`))).text, b.text);
    assert.equal((await pool.exchange({ ...request(`${base}/`), affinity: holder })).text, a.text);
    assert.equal((await pool.exchange({ ...request(`${base}/`), affinity: holder })).text, a.text);
    // Its connection busy: any idle one, and the holder then names that one.
    const busy = pool.exchange({ ...request(`${base}/?ms=150`), affinity: { conn: holder.conn } });
    const other = await pool.exchange({ ...request(`${base}/`), affinity: holder });
    assert.equal(other.text, b.text);
    assert.equal((await busy).text, a.text);
    assert.equal((await pool.exchange({ ...request(`${base}/`), affinity: holder })).text, b.text);
  } finally {
    pool.close();
    await server.shutdown();
  }
});
