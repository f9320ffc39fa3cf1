/**
 * The fault proxy of fault_proxy.ts for a worker on the gRPC binding: a `@grpc/grpc-js` server
 * with every unary `orbit.v1` RPC (lib/grpc/methods.ts) that forwards each call, its metadata and
 * its cancellation to the server's `--grpc-addr` and records it as the HTTP proxy does — under
 * the path of the RPC's HTTP route, with the request message as `request` and, for result
 * reports, the response message as `response` — so that the scenarios read both the same.
 *
 * Faults: while `mode` is `5xx`, calls fail in turn UNAVAILABLE with `orbit-error-code:
 * NOT_LEADER` (HTTP's 503), INTERNAL with STORAGE_ERROR (500), and UNAVAILABLE with no ORBIT
 * metadata at all (a balancer's own failure, HTTP's 502 that is not JSON). `close()` stops
 * listening and drops every connection (connection refused from then on); `reopen()` listens on
 * the same port again. Like the server, the grpc-js server listens on loopback behind
 * lib/grpc/relay.ts (Deno's node:http2 aborts on clients' GOAWAY frames).
 */
import * as grpc from "@grpc/grpc-js";
import { Buffer } from "node:buffer";
import { METHODS } from "../../lib/grpc/methods.ts";
import { type Relay, startRelay } from "../../lib/grpc/relay.ts";
import { loadProtos } from "../../lib/grpc/server.ts";
import type { FaultProxy, ProxyMode, ProxyRecord } from "./fault_proxy.ts";

type Pkg = { orbit: { v1: Record<string, grpc.ServiceClientConstructor> } };

function fault(n: number): grpc.StatusObject {
  const md = new grpc.Metadata();
  const api = (code: string, status: number, message: string) => {
    md.set("orbit-error-code", code);
    md.set("orbit-http-status", String(status));
    md.set(
      "orbit-error-bin",
      Buffer.from(JSON.stringify({ error: { code, message, leader_addr: null } })),
    );
  };
  switch (n % 3) {
    case 0:
      api("NOT_LEADER", 503, "this server is a standby");
      md.set("retry-after", "1");
      return { code: grpc.status.UNAVAILABLE, details: "this server is a standby", metadata: md };
    case 1:
      api("STORAGE_ERROR", 500, "injected fault");
      return { code: grpc.status.INTERNAL, details: "injected fault", metadata: md };
    default:
      return { code: grpc.status.UNAVAILABLE, details: "bad gateway", metadata: md };
  }
}

/**
 * A gRPC proxy in front of `target` (host:port) on 127.0.0.1:`port` (a free one when 0, chosen
 * at once: the answer's `url` is usable before `ready` resolves). `url` is `http://` + its
 * address: the name a scenario hands the worker, which the driver maps to the gRPC address.
 * Given several targets it is a balancer of calls: each call goes to the next target in turn
 * (one grpc-js channel is one connection, so a balancer of connections would send a worker's
 * every call to one server).
 */
export function startGrpcFaultProxy(
  target: string | string[],
  mode: ProxyMode,
  port: number,
): FaultProxy & { readonly addr: string; readonly ready: Promise<void> } {
  const pkg = grpc.loadPackageDefinition(loadProtos()) as unknown as Pkg;
  const records: ProxyRecord[] = [];
  const targets = Array.isArray(target) ? target : [target];
  let faults = 0;
  let turn = 0;
  // One channel per target for every service: the target's first client's.
  const upstream = new Map<string, grpc.Client>();
  const clientOf = (service: string) => {
    const to = targets[turn++ % targets.length]!;
    let c = upstream.get(`${to} ${service}`);
    if (!c) {
      const first = [...upstream.entries()].find(([k]) => k.startsWith(`${to} `))?.[1];
      c = new pkg.orbit.v1[service]!(to, grpc.credentials.createInsecure(), {
        ...(first ? { channelOverride: first.getChannel() } : {}),
      });
      upstream.set(`${to} ${service}`, c);
    }
    return c as grpc.Client & Record<string, (...a: unknown[]) => grpc.ClientUnaryCall>;
  };

  const services: Record<string, grpc.UntypedServiceImplementation> = {};
  for (const m of METHODS) {
    (services[m.service] ??= {})[m.rpc] = (
      call: grpc.ServerUnaryCall<Record<string, unknown>, unknown>,
      done: grpc.sendUnaryData<unknown>,
    ) => {
      const rec: ProxyRecord = {
        at: Date.now(),
        method: m.http,
        path: m.path,
        status: 0,
        request: call.request,
        response: null,
        done: false,
      };
      records.push(rec);
      if (proxy.mode === "5xx") {
        const f = fault(faults++);
        rec.status = Number(f.metadata.get("orbit-http-status")[0] ?? 502);
        rec.done = true;
        return done(f);
      }
      const out = clientOf(m.service)[m.rpc]!(
        call.request,
        call.metadata,
        {},
        (e: grpc.ServiceError | null, value: Record<string, unknown>) => {
          rec.done = true;
          if (e) {
            rec.status = Number(e.metadata?.get("orbit-http-status")[0] ?? 599);
            return done(e);
          }
          rec.status = 200;
          if (m.path.startsWith("/v1/tasks/")) rec.response = value;
          done(null, value);
        },
      );
      call.on("cancelled", () => {
        rec.done = true;
        out.cancel();
      });
    };
  }

  let server: grpc.Server | null = null;
  let relay: Relay | null = null;
  const listen = (p: number): Promise<void> => {
    const s = new grpc.Server();
    for (const [name, impl] of Object.entries(services)) {
      s.addService(pkg.orbit.v1[name]!.service, impl);
    }
    server = s;
    return new Promise((resolve, reject) =>
      s.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (err, inner) => {
        if (err) return reject(err);
        relay = startRelay({ hostname: "127.0.0.1", port: p, tls: null }, inner);
        resolve();
      })
    );
  };
  const boundPort = port || freeTcpPort();
  const ready = listen(boundPort);

  const proxy = {
    url: `http://127.0.0.1:${boundPort}`,
    addr: `127.0.0.1:${boundPort}`,
    port: boundPort,
    ready,
    mode,
    records,
    open: (path: string) => records.filter((r) => r.path === path && !r.done).length,
    waitFor: async (what: string, cond: () => boolean, timeoutMs = 30_000) => {
      const end = Date.now() + timeoutMs;
      while (!cond()) {
        if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
        await new Promise((r) => setTimeout(r, 20));
      }
    },
    close: async () => {
      await ready.catch(() => {});
      relay?.close();
      relay = null;
      // Ends every call in flight and every connection: the relay's upstream sockets close,
      // and with them the worker's connections.
      server?.forceShutdown();
      server = null;
      for (const c of upstream.values()) c.close();
      upstream.clear();
    },
    reopen: () => {
      if (!server) void listen(boundPort);
    },
  };
  return proxy;
}

function freeTcpPort(): number {
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (l.addr as Deno.NetAddr).port;
  l.close();
  return port;
}
