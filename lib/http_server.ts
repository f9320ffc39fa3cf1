/**
 * The HTTP server, with the timeouts `Deno.serve` does not have (denoland/deno#3515): without
 * them a connection that never sends a request, sends its request head a byte a minute, or stays
 * open between requests holds its socket and file descriptor for as long as its client likes.
 *
 * - Header timeout: a new connection has `headerTimeoutMs` to deliver its first request's head
 *   (a TLS handshake included). A silent connection, or one whose head crawls, is closed.
 * - Idle timeout: a connection with no request in progress is closed `idleTimeoutMs` after its
 *   last request ended (a kept-alive connection left open, or a crawling head on one).
 *
 * Over TLS a connection that never completes its handshake stays open: Deno 2.9 does not close
 * the socket of a TLS connection closed before its handshake (`Deno.listenTls`, `conn.close()`;
 * measured). Put a TLS-terminating proxy in front where that matters.
 *
 * A request in progress is never cut, however long it takes: long polls (`wait_s` ≤ 60) and
 * waits (`timeout_s` ≤ 300) keep their connection silent while they wait. A request is in
 * progress from the moment its head has arrived until its handler has returned the response
 * (the body is sent after; answers are small JSON).
 *
 * Connections are accepted here (`Deno.listen`, `Deno.listenTls` with h2 and http/1.1 offered,
 * as `Deno.serve` does) and each is served by Deno's own HTTP server for one connection
 * (`serveHttpOnConnection`, what `Deno.serve` builds on; not a public API), so that the
 * watchdog can close it. Measured alternatives: `node:http` has `headersTimeout` and
 * `keepAliveTimeout` and honours them under Deno, but costs about three times the CPU per
 * request of `Deno.serve`; a relay in front of `Deno.serve` costs more still. Where the running
 * Deno lacks the per-connection server, `Deno.serve` serves without timeouts and `timeouts`
 * says so (main.ts logs it).
 *
 * One timer checks every connection a few times per timeout; nothing runs per byte, and per
 * request only a counter moves.
 */
import { log } from "./log.ts";

export interface HttpServerOptions {
  hostname: string;
  port: number;
  tls: { cert: string; key: string } | null;
  headerTimeoutMs: number;
  idleTimeoutMs: number;
  onListen: (addr: Deno.NetAddr) => void;
  onError: (error: unknown) => Response | Promise<Response>;
}

export type Handler = (
  req: Request,
  info: Deno.ServeHandlerInfo,
) => Response | Promise<Response>;

export interface HttpServer {
  readonly addr: Deno.NetAddr;
  /** Resolves once the server has stopped and every connection has ended. */
  readonly finished: Promise<void>;
  /** Whether the timeouts are enforced (false: this Deno has no per-connection server). */
  readonly timeouts: boolean;
  /** Stops accepting; ends each connection once its requests in progress are answered. */
  shutdown(): Promise<void>;
  /** Connections open now (tests). */
  connections(): number;
}

type ServeOnConnection = (
  conn: Deno.Conn,
  signal: AbortSignal,
  handler: Handler,
  onError: (error: unknown) => Response | Promise<Response>,
  onListen: () => void,
) => { finished: Promise<void>; shutdown(): Promise<void> };

/** Deno's server for one connection, where this Deno has it. */
function serveOnConnection(): ServeOnConnection | null {
  const deno = Deno as unknown as Record<symbol, unknown> & { internal?: symbol };
  const internals = deno.internal ? deno[deno.internal] as Record<string, unknown> : undefined;
  const fn = internals?.serveHttpOnConnection;
  return typeof fn === "function" ? fn as ServeOnConnection : null;
}

interface Connection {
  readonly close: AbortController;
  server: { finished: Promise<void>; shutdown(): Promise<void> } | null;
  /** Settles when the connection has ended, however it ended. */
  ended: Promise<void>;
  /** Requests whose handler has not returned yet. */
  inFlight: number;
  /** Whether a request has begun on it (then the idle timeout applies, not the header one). */
  served: boolean;
  /** When it was accepted, or when its last request ended. */
  since: number;
}

export function serveHttp(opts: HttpServerOptions, handler: Handler): HttpServer {
  const serveOn = serveOnConnection();
  if (!serveOn) return plainServe(opts, handler);

  const listener: Deno.Listener = opts.tls
    ? Deno.listenTls({
      hostname: opts.hostname,
      port: opts.port,
      cert: opts.tls.cert,
      key: opts.tls.key,
      alpnProtocols: ["h2", "http/1.1"],
    })
    : Deno.listen({ hostname: opts.hostname, port: opts.port });
  const addr = listener.addr as Deno.NetAddr;
  const open = new Set<Connection>();
  let stopping = false;

  const watch = setInterval(() => {
    const now = Date.now();
    for (const c of open) {
      if (c.inFlight > 0) continue;
      const limit = c.served ? opts.idleTimeoutMs : opts.headerTimeoutMs;
      if (now - c.since >= limit) {
        log.server.debug("closing a connection without a request in progress", {
          reason: c.served ? "idle timeout" : "header timeout",
          after_ms: now - c.since,
        });
        open.delete(c);
        c.close.abort();
      }
    }
  }, Math.max(50, Math.min(1000, Math.min(opts.headerTimeoutMs, opts.idleTimeoutMs) / 4)));

  const accept = (conn: Deno.Conn) => {
    const c: Connection = {
      close: new AbortController(),
      server: null,
      ended: Promise.resolve(),
      inFlight: 0,
      served: false,
      since: Date.now(),
    };
    const done = () => {
      c.inFlight--;
      c.since = Date.now();
    };
    const serve: Handler = (req, info) => {
      c.inFlight++;
      c.served = true;
      let answer: Response | Promise<Response>;
      try {
        answer = handler(req, info);
      } catch (e) {
        done();
        throw e;
      }
      if (answer instanceof Promise) answer.then(done, done);
      else done();
      return answer;
    };
    open.add(c);
    const start = async (): Promise<void> => {
      try {
        c.server = serveOn(conn, c.close.signal, serve, opts.onError, () => {});
        await c.server.finished;
      } catch (e) {
        // A connection that broke (a reset, a request hyper refused): its client's business.
        log.server.debug("connection ended with an error", { error: (e as Error).message });
        if (!c.server) {
          try {
            conn.close();
          } catch { /* closed */ }
        }
      } finally {
        open.delete(c);
      }
    };
    c.ended = start();
  };

  const accepting = (async () => {
    while (!stopping) {
      let conn: Deno.Conn;
      try {
        conn = await listener.accept();
      } catch (e) {
        if (stopping || e instanceof Deno.errors.BadResource) return;
        if (e instanceof Deno.errors.Interrupted) return;
        // Out of file descriptors and the like: wait a little, then accept again.
        log.server.warn("accepting a connection failed", { error: (e as Error).message });
        await new Promise((r) => setTimeout(r, 100));
        continue;
      }
      accept(conn);
    }
  })();

  opts.onListen(addr);

  let finishedResolve!: () => void;
  const finished = new Promise<void>((r) => (finishedResolve = r));
  let shutdownPromise: Promise<void> | null = null;
  return {
    addr,
    finished,
    timeouts: true,
    connections: () => open.size,
    shutdown() {
      shutdownPromise ??= (async () => {
        stopping = true;
        try {
          listener.close();
        } catch { /* closed */ }
        await accepting;
        clearInterval(watch);
        await Promise.allSettled(
          [...open].map(async (c) => {
            await c.server?.shutdown();
            await c.ended;
          }),
        );
        finishedResolve();
      })();
      return shutdownPromise;
    },
  };
}

/** Deno.serve, without timeouts: for a Deno without the per-connection server. */
function plainServe(opts: HttpServerOptions, handler: Handler): HttpServer {
  const server = Deno.serve({
    hostname: opts.hostname,
    port: opts.port,
    ...(opts.tls ?? {}),
    onListen: (addr) => opts.onListen(addr as Deno.NetAddr),
    onError: opts.onError,
  }, handler);
  return {
    addr: server.addr,
    finished: server.finished,
    timeouts: false,
    connections: () => -1,
    shutdown: () => server.shutdown(),
  };
}
