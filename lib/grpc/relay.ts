/**
 * The gRPC listener's front: a TCP (or TLS) relay in this process, in front of the `node:http2`
 * server that `@grpc/grpc-js` runs on a loopback port, that drops the GOAWAY frames clients send.
 *
 * Why: Deno 2.9.6's `node:http2` (native nghttp2 bindings) aborts the whole process when a
 * client's GOAWAY arrives after some streams, with `free(): invalid pointer` or nghttp2's
 * assertion `stream->closed_next == NULL` in find_stream_on_goaway_func. A client sends one when
 * it closes its channel (grpc-js `close()`, idle channels), so every such client would end the
 * server. Measured (grpc-js server with one trivial method, a grpc-js client making 1,000 calls
 * one after another and then `close()`): straight onto node:http2, 3 aborts in 3 runs; through
 * this relay passing GOAWAY on, 2 in 3; through this relay, 0 in 3 (tests/grpc_relay_test.ts
 * does it on the ORBIT server). Without the GOAWAY the server sees the connection end, which it
 * handles: a client that exits without close(), 0 aborts in 6.
 *
 * The client-to-server byte stream is parsed into HTTP/2 frames (after the 24-byte preface):
 * 9-byte headers, lengths below 2^24, so one connection buffers at most one frame. Anything that
 * does not start with the HTTP/2 preface is passed on as it is, for the server to refuse.
 */
import { log } from "../log.ts";

const PREFACE = new TextEncoder().encode("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
const GOAWAY = 0x7;

/** The client-to-server half: every frame but GOAWAY. */
export class FrameFilter {
  #buf = new Uint8Array(0);
  #preface = true;
  #raw = false;
  dropped = 0;

  /** The bytes to send on for `chunk` (may be empty, while a frame is incomplete). */
  push(chunk: Uint8Array): Uint8Array {
    if (this.#raw) return chunk;
    const buf = this.#buf.length ? concat(this.#buf, chunk) : chunk;
    const out: Uint8Array[] = [];
    let at = 0;
    if (this.#preface) {
      if (buf.length < PREFACE.length) {
        if (!PREFACE.subarray(0, buf.length).every((b, i) => buf[i] === b)) return this.#pass(buf);
        this.#buf = buf.slice();
        return new Uint8Array(0);
      }
      if (!PREFACE.every((b, i) => buf[i] === b)) return this.#pass(buf);
      this.#preface = false;
      at = PREFACE.length;
      out.push(buf.subarray(0, at));
    }
    let start = at;
    while (buf.length - at >= 9) {
      const len = (buf[at]! << 16) | (buf[at + 1]! << 8) | buf[at + 2]!;
      if (buf.length - at < 9 + len) break;
      if (buf[at + 3] === GOAWAY) {
        if (at > start) out.push(buf.subarray(start, at));
        this.dropped++;
        start = at + 9 + len;
      }
      at += 9 + len;
    }
    if (at > start) out.push(buf.subarray(start, at));
    this.#buf = buf.slice(at);
    return out.length === 1 ? out[0]! : concat(...out);
  }

  #pass(buf: Uint8Array): Uint8Array {
    this.#raw = true;
    this.#buf = new Uint8Array(0);
    return buf;
  }
}

function concat(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let i = 0;
  for (const p of parts) {
    out.set(p, i);
    i += p.length;
  }
  return out;
}

/** One client connection relayed to the loopback server until either side ends. */
async function relay(conn: Deno.Conn, upstreamPort: number): Promise<void> {
  let up: Deno.TcpConn;
  try {
    up = await Deno.connect({ hostname: "127.0.0.1", port: upstreamPort });
  } catch (e) {
    log.server.warn("gRPC relay cannot reach its server", { error: (e as Error).message });
    conn.close();
    return;
  }
  up.setNoDelay(true);
  const filter = new FrameFilter();
  const down = up.readable.pipeTo(conn.writable).catch(() => {});
  const writer = up.writable.getWriter();
  try {
    for await (const chunk of conn.readable) {
      const out = filter.push(chunk);
      if (out.length) await writer.write(out);
    }
  } catch {
    // The client's side broke: end the server's.
  }
  try {
    await writer.close();
  } catch { /* already gone */ }
  await down;
  try {
    up.close();
  } catch { /* closed */ }
}

export interface Relay {
  readonly port: number;
  close(): void;
}

/** Listens on hostname:port (TLS with `tls`) and relays each connection to `upstreamPort`. */
export function startRelay(
  o: { hostname: string; port: number; tls: { cert: string; key: string } | null },
  upstreamPort: number,
): Relay {
  const listener = o.tls
    ? Deno.listenTls({
      hostname: o.hostname,
      port: o.port,
      cert: o.tls.cert,
      key: o.tls.key,
      alpnProtocols: ["h2"],
    })
    : Deno.listen({ hostname: o.hostname, port: o.port });
  (async () => {
    try {
      for await (const conn of listener) {
        if (!o.tls) (conn as Deno.TcpConn).setNoDelay(true);
        relay(conn, upstreamPort).catch(() => {});
      }
    } catch {
      // Closed.
    }
  })();
  return {
    port: (listener.addr as Deno.NetAddr).port,
    close: () => {
      try {
        listener.close();
      } catch { /* closed */ }
    },
  };
}
