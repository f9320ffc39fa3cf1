/**
 * HTTP/1.1 over a bare TCP connection, for what `fetch` will not send (another `Host`, a body
 * with no content-type) or not do (keep a connection silent, send half a request).
 */
const enc = new TextEncoder();
const dec = new TextDecoder();

export interface RawAnswer {
  status: number;
  headers: Record<string, string>;
  text: string;
  // deno-lint-ignore no-explicit-any
  json: any;
}

/** Writes all of `bytes`. */
export async function writeAll(conn: Deno.Conn, bytes: Uint8Array | string): Promise<void> {
  const b = typeof bytes === "string" ? enc.encode(bytes) : bytes;
  for (let off = 0; off < b.length;) off += await conn.write(b.subarray(off));
}

/**
 * Reads one answer (a `content-length` body) from `conn`; null when the server closed the
 * connection first.
 */
export async function readAnswer(conn: Deno.Conn): Promise<RawAnswer | null> {
  let buf = new Uint8Array(0);
  const chunk = new Uint8Array(65_536);
  for (;;) {
    const text = dec.decode(buf);
    const end = text.indexOf("\r\n\r\n");
    if (end >= 0) {
      const lines = text.slice(0, end).split("\r\n");
      const headers: Record<string, string> = {};
      for (const l of lines.slice(1)) {
        const i = l.indexOf(":");
        headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim();
      }
      const headBytes = enc.encode(text.slice(0, end + 4)).length;
      const length = Number(headers["content-length"] ?? "0");
      if (buf.length >= headBytes + length) {
        const body = dec.decode(buf.subarray(headBytes, headBytes + length));
        let json: unknown = null;
        try {
          json = JSON.parse(body);
        } catch { /* not JSON */ }
        return { status: Number(lines[0]!.split(" ")[1]), headers, text: body, json };
      }
    }
    const n = await conn.read(chunk).catch(() => null);
    if (n === null) return null;
    const grown = new Uint8Array(buf.length + n);
    grown.set(buf);
    grown.set(chunk.subarray(0, n), buf.length);
    buf = grown;
  }
}

export interface RawRequest {
  method?: string;
  path: string;
  /** Every header, `Host` included (none is added). */
  headers?: Record<string, string>;
  body?: string | Uint8Array;
}

/** One request on a fresh connection (`connection: close`), and its answer. */
export async function rawRequest(url: string, r: RawRequest): Promise<RawAnswer> {
  const u = new URL(url);
  const conn = await Deno.connect({ hostname: u.hostname, port: Number(u.port) });
  try {
    const body = typeof r.body === "string" ? enc.encode(r.body) : r.body;
    const headers: Record<string, string> = { connection: "close", ...(r.headers ?? {}) };
    if (body && !headers["transfer-encoding"]) headers["content-length"] ??= String(body.length);
    const head = `${r.method ?? "GET"} ${r.path} HTTP/1.1\r\n` +
      Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join("") + "\r\n";
    await writeAll(conn, head);
    if (body) await writeAll(conn, body);
    const a = await readAnswer(conn);
    if (!a) throw new Error(`${r.method ?? "GET"} ${r.path}: the server closed without answering`);
    return a;
  } finally {
    try {
      conn.close();
    } catch { /* closed */ }
  }
}
