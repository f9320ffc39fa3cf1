/**
 * A fault-injecting HTTP proxy between one worker and one server: it forwards every request
 * and records it (path, status, the JSON bodies of result reports), answers every request
 * with a 5xx while `mode` is `5xx` (503 NOT_LEADER first, then 500 STORAGE_ERROR, a 502 that is
 * not JSON and 503 NOT_LEADER in turn), and can be closed and opened again on the same port
 * (connection refused in between).
 */

export type ProxyMode = "pass" | "5xx";

/** One request the proxy saw. */
export interface ProxyRecord {
  at: number;
  method: string;
  path: string;
  /** The answer's status (0 while it is pending, 599 when the upstream failed). */
  status: number;
  request: Record<string, unknown> | null;
  /** The parsed answer of a result report (`/v1/tasks/*`). */
  response: Record<string, unknown> | null;
  done: boolean;
}

export interface FaultProxy {
  readonly url: string;
  readonly port: number;
  mode: ProxyMode;
  readonly records: ProxyRecord[];
  /** Requests of `path` not answered yet (long polls held). */
  open(path: string): number;
  waitFor(what: string, cond: () => boolean, timeoutMs?: number): Promise<void>;
  /** Stops listening and ends every request in flight (connection refused from now on). */
  close(): Promise<void>;
  /** Listens again on the same port. */
  reopen(): void;
}

const FAULTS: Array<{ status: number; body: string }> = [
  {
    status: 503,
    body: JSON.stringify({
      error: { code: "NOT_LEADER", message: "this server is a standby", leader_addr: null },
    }),
  },
  {
    status: 500,
    body: JSON.stringify({ error: { code: "STORAGE_ERROR", message: "injected fault" } }),
  },
  { status: 502, body: "<html>bad gateway</html>" },
];

export function startFaultProxy(target: string, mode: ProxyMode = "pass", port = 0): FaultProxy {
  const records: ProxyRecord[] = [];
  const inflight = new Set<AbortController>();
  let faults = 0;
  let server: Deno.HttpServer<Deno.NetAddr> | null = null;

  const handler = async (req: Request): Promise<Response> => {
    const path = new URL(req.url).pathname;
    const text = req.method === "GET" ? "" : await req.text();
    let request: Record<string, unknown> | null = null;
    try {
      request = text ? JSON.parse(text) : null;
    } catch { /* not JSON */ }
    const rec: ProxyRecord = {
      at: Date.now(),
      method: req.method,
      path,
      status: 0,
      request,
      response: null,
      done: false,
    };
    records.push(rec);
    if (proxy.mode === "5xx") {
      const fault = FAULTS[faults++ % FAULTS.length]!;
      rec.status = fault.status;
      rec.done = true;
      const json = fault.body.startsWith("{");
      return new Response(fault.body, {
        status: fault.status,
        headers: {
          "content-type": json ? "application/json" : "text/html",
          ...(fault.status === 503 ? { "retry-after": "1" } : {}),
        },
      });
    }
    const upstream = new AbortController();
    const onAbort = () => upstream.abort();
    req.signal.addEventListener("abort", onAbort, { once: true });
    inflight.add(upstream);
    try {
      const res = await fetch(target + path + new URL(req.url).search, {
        method: req.method,
        headers: req.headers,
        body: text || undefined,
        signal: upstream.signal,
      });
      const body = await res.text();
      rec.status = res.status;
      if (path.startsWith("/v1/tasks/")) {
        try {
          rec.response = JSON.parse(body);
        } catch { /* not JSON */ }
      }
      return new Response(body, {
        status: res.status,
        headers: { "content-type": res.headers.get("content-type") ?? "application/json" },
      });
    } catch {
      rec.status = 599;
      return new Response("upstream failed", { status: 502 });
    } finally {
      rec.done = true;
      inflight.delete(upstream);
      req.signal.removeEventListener("abort", onAbort);
    }
  };

  const listen = (p: number) => {
    server = Deno.serve({ hostname: "127.0.0.1", port: p, onListen: () => {} }, handler);
    return server.addr.port;
  };
  const boundPort = listen(port);

  const proxy: FaultProxy = {
    url: `http://127.0.0.1:${boundPort}`,
    port: boundPort,
    mode,
    records,
    open: (path) => records.filter((r) => r.path === path && !r.done).length,
    waitFor: async (what, cond, timeoutMs = 30_000) => {
      const end = Date.now() + timeoutMs;
      while (!cond()) {
        if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
        await new Promise((r) => setTimeout(r, 20));
      }
    },
    close: async () => {
      const s = server;
      server = null;
      for (const c of inflight) c.abort();
      await s?.shutdown();
    },
    reopen: () => {
      if (!server) listen(boundPort);
    },
  };
  return proxy;
}

/** A port nothing listens on (it was free a moment ago). */
export function freePort(): number {
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (l.addr as Deno.NetAddr).port;
  l.close();
  return port;
}
