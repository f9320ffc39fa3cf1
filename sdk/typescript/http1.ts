/**
 * HTTP/1.1 over a plain TCP connection, for the worker's slots on Deno: one request at a time
 * per connection, kept alive between requests. Deno's `fetch` spends about 100 µs of CPU per
 * request of a worker's size (its client runs on other threads, with a hop each way); this
 * client about 25 µs, and answers sooner, which shortens every slot's cycle (a result sent, the
 * next task back). It speaks what the runtime and the proxies in front of it answer:
 * `content-length` or `chunked` bodies, a body that ends with the connection, `1xx` interim
 * answers skipped, `connection: close` honoured. `http:` only: `https:` stays on `fetch`.
 *
 * A request on a kept-alive connection that the server closed in the meantime (an idle timeout
 * of a proxy) is sent once more on a new connection, as browsers do, when not a byte of its
 * answer came back. Worker requests may be sent twice: a result already applied is answered
 * `{"accepted": false}`, a second poll is a poll.
 *
 * ```ts ignore
 * import { Http1Pool } from "./http1.ts";
 * const pool = new Http1Pool("http://127.0.0.1:7233", { connect: Deno.connect });
 * const answer = await pool.exchange({
 *   method: "GET", url: "http://127.0.0.1:7233/v1/health", headers: {}, signal: new AbortController().signal,
 * });
 * console.log(answer.status, answer.text);
 * pool.close();
 * ```
 *
 * @module
 */

import type { Exchange, HttpAnswer, HttpRequest } from "./http.ts";

/** The part of a TCP connection this client uses (`Deno.Conn` has it). */
export interface ByteConn {
  read(p: Uint8Array): Promise<number | null>;
  write(p: Uint8Array): Promise<number>;
  close(): void;
  setNoDelay?(noDelay?: boolean): void;
}

/** Opens a TCP connection (`Deno.connect`). */
export type Connect = (options: { hostname: string; port: number }) => Promise<ByteConn>;

/** `Deno.connect`, where the code runs on Deno. */
export function denoConnect(): Connect | undefined {
  const deno = (globalThis as { Deno?: { connect?: Connect } }).Deno;
  return typeof deno?.connect === "function" ? deno.connect.bind(deno) : undefined;
}

/**
 * A pool for `server` where this client can serve it: on Deno (`Deno.connect`) and for an
 * `http:` server; `null` elsewhere (the caller keeps `fetch`).
 */
export function http1PoolFor(
  server: string,
  options: Omit<Http1PoolOptions, "connect"> = {},
): Http1Pool | null {
  const connect = /^http:/i.test(server) ? denoConnect() : undefined;
  return connect ? new Http1Pool(server, { ...options, connect }) : null;
}

/** The connection ended or broke before the whole answer came; `answered` once a byte did. */
export class ConnectionClosed extends Error {
  constructor(readonly answered: boolean, message: string) {
    super(message);
    this.name = "ConnectionClosed";
  }
}

const CR = 13;
const LF = 10;
/** An answer's head (status line and headers) may not be larger. */
const MAX_HEAD = 64 * 1024;
const encoder = new TextEncoder();
const utf8 = new TextDecoder();
const latin1 = new TextDecoder("latin1");

/** One TCP connection and the bytes read from it but not used yet. */
class Conn {
  readonly #conn: ByteConn;
  #buf = new Uint8Array(16 * 1024);
  #start = 0;
  #end = 0;
  /** A byte of the current answer has been read. */
  answered = false;
  closed = false;

  constructor(conn: ByteConn) {
    this.#conn = conn;
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    try {
      this.#conn.close();
    } catch { /* already closed */ }
  }

  async write(bytes: Uint8Array): Promise<void> {
    for (let off = 0; off < bytes.length;) off += await this.#conn.write(bytes.subarray(off));
  }

  /** Reads more bytes into the buffer; false at the end of the stream. */
  async #fill(): Promise<boolean> {
    if (this.#start === this.#end) this.#start = this.#end = 0;
    if (this.#end === this.#buf.length) {
      const used = this.#end - this.#start;
      if (used * 2 > this.#buf.length) {
        const next = new Uint8Array(this.#buf.length * 2);
        next.set(this.#buf.subarray(this.#start, this.#end));
        this.#buf = next;
      } else {
        this.#buf.copyWithin(0, this.#start, this.#end);
      }
      this.#start = 0;
      this.#end = used;
    }
    const n = await this.#conn.read(this.#buf.subarray(this.#end));
    if (n === null) return false;
    if (n > 0) this.answered = true;
    this.#end += n;
    return true;
  }

  /** Waits until `n` unread bytes are buffered. */
  async #need(n: number): Promise<void> {
    while (this.#end - this.#start < n) {
      if (!(await this.#fill())) {
        throw new ConnectionClosed(this.answered, "connection closed before the whole answer");
      }
    }
  }

  /** Takes `n` buffered bytes (a copy: the buffer is reused). */
  async take(n: number): Promise<Uint8Array> {
    await this.#need(n);
    const out = this.#buf.slice(this.#start, this.#start + n);
    this.#start += n;
    // A large answer grew the buffer: a kept-alive connection does not hold on to it.
    if (this.#start === this.#end && this.#buf.length > MAX_HEAD) {
      this.#buf = new Uint8Array(16 * 1024);
      this.#start = this.#end = 0;
    }
    return out;
  }

  /** Takes the bytes up to `CRLF` (or, with `blank`, up to `CRLF CRLF`), without them. */
  async line(blank: boolean, limit: number): Promise<Uint8Array> {
    const len = blank ? 4 : 2;
    let scanned = 0; // bytes after #start where no match begins (#fill may move the buffer)
    for (;;) {
      const buf = this.#buf;
      for (let i = this.#start + scanned; i + len <= this.#end; i++) {
        if (
          buf[i] === CR && buf[i + 1] === LF && (!blank || (buf[i + 2] === CR && buf[i + 3] === LF))
        ) {
          const out = buf.slice(this.#start, i);
          this.#start = i + len;
          return out;
        }
      }
      scanned = Math.max(0, this.#end - this.#start - len + 1);
      if (this.#end - this.#start > limit) throw new Error("the answer's head is too large");
      if (!(await this.#fill())) {
        throw new ConnectionClosed(this.answered, "connection closed before the answer");
      }
    }
  }

  /** Every byte until the server closes the connection. */
  async rest(): Promise<Uint8Array> {
    while (await this.#fill()) { /* read on */ }
    const out = this.#buf.slice(this.#start, this.#end);
    this.#start = this.#end;
    return out;
  }
}

function concat(parts: Uint8Array[]): Uint8Array {
  if (parts.length === 1) return parts[0]!;
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let off = 0;
  for (const p of parts) {
    out.set(p, off);
    off += p.length;
  }
  return out;
}

interface Head {
  minor: number;
  status: number;
  statusText: string;
  headers: Map<string, string>;
}

function parseHead(bytes: Uint8Array): Head {
  const lines = latin1.decode(bytes).split("\r\n");
  const m = /^HTTP\/1\.(\d) (\d{3})(?: (.*))?$/.exec(lines[0] ?? "");
  if (!m) {
    throw new Error(`not an HTTP/1.x answer: ${JSON.stringify((lines[0] ?? "").slice(0, 80))}`);
  }
  const headers = new Map<string, string>();
  for (let i = 1; i < lines.length; i++) {
    const line = lines[i]!;
    const colon = line.indexOf(":");
    if (colon <= 0) continue;
    const name = line.slice(0, colon).trim().toLowerCase();
    const value = line.slice(colon + 1).trim();
    const had = headers.get(name);
    headers.set(name, had === undefined ? value : `${had}, ${value}`);
  }
  return { minor: Number(m[1]), status: Number(m[2]), statusText: m[3] ?? "", headers };
}

/** Reads one answer (skipping interim `1xx` ones); `keepAlive` when the connection may be reused. */
async function readAnswer(
  conn: Conn,
  method: string,
): Promise<{ answer: HttpAnswer; keepAlive: boolean }> {
  let head: Head;
  do head = parseHead(await conn.line(true, MAX_HEAD)); while (head.status < 200);
  const { headers } = head;
  const connection = (headers.get("connection") ?? "").toLowerCase();
  let keepAlive = head.minor >= 1
    ? !/\bclose\b/.test(connection)
    : /\bkeep-alive\b/.test(connection);
  let body: Uint8Array;
  if (method === "HEAD" || head.status === 204 || head.status === 304) {
    body = new Uint8Array(0);
  } else if (/\bchunked\b/i.test(headers.get("transfer-encoding") ?? "")) {
    const parts: Uint8Array[] = [];
    for (;;) {
      const sizeLine = latin1.decode(await conn.line(false, 1024));
      const size = parseInt(sizeLine.split(";")[0]!.trim(), 16);
      if (!Number.isFinite(size) || size < 0) {
        throw new Error(`bad chunk size ${JSON.stringify(sizeLine)}`);
      }
      if (size === 0) {
        while ((await conn.line(false, MAX_HEAD)).length > 0) { /* trailer fields: ignored */ }
        break;
      }
      parts.push(await conn.take(size));
      if ((await conn.line(false, 2)).length !== 0) throw new Error("bad chunk: no CRLF after it");
    }
    body = concat(parts);
  } else if (headers.has("content-length")) {
    const length = Number(headers.get("content-length")!.split(",")[0]);
    if (!Number.isSafeInteger(length) || length < 0) throw new Error("bad content-length");
    body = await conn.take(length);
  } else {
    body = await conn.rest();
    keepAlive = false;
  }
  return {
    answer: { status: head.status, statusText: head.statusText, text: utf8.decode(body) },
    keepAlive,
  };
}

/** Options of an {@link Http1Pool}. */
export interface Http1PoolOptions {
  /** Opens a TCP connection (`Deno.connect`). */
  connect: Connect;
  /** Idle connections kept for the next requests (default 1: a worker slot's one connection). */
  maxIdle?: number;
  /**
   * An idle connection older than this is closed instead of used (default: none), so that a
   * request seldom meets a connection a server or proxy closed for being idle.
   */
  idleMs?: number;
  /**
   * Which requests are sent again on a new connection when a kept-alive one turns out closed
   * before a byte of the answer (default `"all"`, for the worker's requests, which may all be
   * repeated; `"idempotent"`: GET, HEAD, PUT, DELETE and OPTIONS only).
   */
  resend?: "all" | "idempotent";
  /** The clock of `idleMs` (default `Date.now`). */
  now?: () => number;
}

const IDEMPOTENT = new Set(["GET", "HEAD", "PUT", "DELETE", "OPTIONS"]);

/** Kept-alive HTTP/1.1 connections to one server (`http:` only). */
export class Http1Pool {
  readonly #hostname: string;
  readonly #port: number;
  readonly #host: string;
  readonly #origin: string;
  readonly #connect: Connect;
  readonly #maxIdle: number;
  readonly #idleMs: number;
  readonly #resendAll: boolean;
  readonly #now: () => number;
  /** Idle connections, the most recently used last, with when they went idle. */
  readonly #idle: Array<{ conn: Conn; since: number }> = [];
  #closed = false;

  constructor(server: string, options: Http1PoolOptions) {
    const url = new URL(server);
    if (url.protocol !== "http:") throw new TypeError(`Http1Pool: http: only, not ${url.protocol}`);
    this.#hostname = url.hostname.replace(/^\[(.*)\]$/, "$1");
    this.#port = Number(url.port || 80);
    this.#host = url.host;
    this.#origin = url.origin;
    this.#connect = options.connect;
    this.#maxIdle = Math.max(0, options.maxIdle ?? 1);
    this.#idleMs = options.idleMs ?? Infinity;
    this.#resendAll = (options.resend ?? "all") === "all";
    this.#now = options.now ?? Date.now;
  }

  /** Closes the idle connections; requests in flight end with their connections. */
  close(): void {
    this.#closed = true;
    for (const { conn } of this.#idle.splice(0)) conn.close();
  }

  /** Idle connections now (for tests). */
  get idle(): number {
    return this.#idle.length;
  }

  /**
   * The idle connection `prefer` when it is one (and not older than `idleMs`), else the most
   * recently used idle connection not older than `idleMs`; older ones are closed.
   */
  #takeIdle(prefer?: unknown): Conn | null {
    const now = this.#now();
    if (prefer instanceof Conn) {
      const i = this.#idle.findIndex((e) => e.conn === prefer);
      if (i >= 0 && now - this.#idle[i]!.since <= this.#idleMs) {
        return this.#idle.splice(i, 1)[0]!.conn;
      }
    }
    for (let e = this.#idle.pop(); e; e = this.#idle.pop()) {
      if (now - e.since <= this.#idleMs) return e.conn;
      e.conn.close();
    }
    return null;
  }

  /** Sends one request and reads its answer. See the module documentation. */
  readonly exchange: Exchange = async (req: HttpRequest): Promise<HttpAnswer> => {
    const { signal } = req;
    if (signal.aborted) throw signal.reason;
    const target = req.url.startsWith(this.#origin)
      ? req.url.slice(this.#origin.length) || "/"
      : (() => {
        const u = new URL(req.url);
        return u.pathname + u.search;
      })();
    const body = req.body === undefined ? undefined : encoder.encode(req.body);
    let head = `${req.method} ${target} HTTP/1.1\r\nhost: ${this.#host}\r\n`;
    for (const name in req.headers) {
      const value = req.headers[name]!;
      if (/[\r\n]/.test(name + value)) throw new TypeError(`invalid header ${name}: a line break`);
      head += `${name}: ${value}\r\n`;
    }
    if (body) head += `content-length: ${body.length}\r\n`;
    const headBytes = encoder.encode(head + "\r\n");
    const bytes = body ? concat([headBytes, body]) : headBytes;
    const resend = this.#resendAll || IDEMPOTENT.has(req.method);

    for (let attempt = 0;; attempt++) {
      const reused = this.#takeIdle(req.affinity?.conn);
      const conn = reused ?? new Conn(await this.#open(signal));
      if (req.affinity) req.affinity.conn = conn;
      const onAbort = () => conn.close();
      signal.addEventListener("abort", onAbort, { once: true });
      try {
        if (signal.aborted) throw signal.reason;
        conn.answered = false;
        // The answer is read while the request is written: a server may answer early (413 for
        // a body over its limit) and close without reading the rest.
        let written = false;
        const writing = conn.write(bytes).then(() => {
          written = true;
          return null;
        }, (e: unknown) => e);
        let read;
        try {
          read = await readAnswer(conn, req.method);
        } catch (err) {
          const failedWrite = await writing;
          throw failedWrite && !conn.answered ? failedWrite : err;
        }
        const reuse = read.keepAlive && written && !this.#closed && !conn.closed &&
          this.#idle.length < this.#maxIdle;
        if (reuse) this.#idle.push({ conn, since: this.#now() });
        else conn.close();
        return read.answer;
      } catch (err) {
        conn.close();
        if (signal.aborted) throw signal.reason;
        // A kept-alive connection the server had closed: the request never reached it.
        const stale = resend && reused !== null && attempt === 0 && !conn.answered &&
          (err instanceof ConnectionClosed || isReset(err));
        if (!stale) throw err;
      } finally {
        signal.removeEventListener("abort", onAbort);
      }
    }
  };

  /** A new connection; an abort ends the wait at once (the connection, if it comes, is closed). */
  #open(signal: AbortSignal): Promise<ByteConn> {
    const opening = this.#connect({ hostname: this.#hostname, port: this.#port }).then((conn) => {
      try {
        conn.setNoDelay?.(true);
      } catch { /* not a TCP socket option here */ }
      return conn;
    });
    return new Promise((resolve, reject) => {
      const onAbort = () => reject(signal.reason); // the connection is closed when it comes
      signal.addEventListener("abort", onAbort, { once: true });
      opening.then((conn) => {
        signal.removeEventListener("abort", onAbort);
        if (!signal.aborted) return resolve(conn);
        try {
          conn.close();
        } catch { /* closed */ }
      }, (err) => {
        signal.removeEventListener("abort", onAbort);
        reject(err);
      });
    });
  }
}

/** A write or read on a connection the peer had reset or closed. */
function isReset(err: unknown): boolean {
  const name = (err as { name?: string })?.name ?? "";
  return name === "ConnectionReset" || name === "BrokenPipe" || name === "ConnectionAborted";
}
