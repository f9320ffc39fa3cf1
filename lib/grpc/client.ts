/**
 * A small promise client for the gRPC binding (tests, and the TypeScript SDK's gRPC transport):
 * one `@grpc/grpc-js` channel, the `authorization` metadata, and errors read back into the API's
 * shape (`orbit-error-code`, the JSON error body of `orbit-error-bin`).
 */
import * as grpc from "@grpc/grpc-js";
import { Buffer } from "node:buffer";
import { loadProtos } from "./server.ts";

export interface GrpcCallError {
  /** The gRPC status code's name, e.g. UNAVAILABLE. */
  status: string;
  code: number;
  details: string;
  /** `orbit-error-code`, e.g. NOT_LEADER (absent: not an error of the API). */
  orbitCode: string | null;
  /** The API's JSON error body (`orbit-error-bin`), parsed. */
  body: unknown;
  metadata: Record<string, string>;
}

export type GrpcResult<T> = { ok: true; value: T } | { ok: false; error: GrpcCallError };

type ServiceClient = grpc.Client & Record<string, (...args: unknown[]) => unknown>;

export interface GrpcClient {
  // deno-lint-ignore no-explicit-any
  call<T = any>(
    service: string,
    rpc: string,
    request: Record<string, unknown>,
    o?: { deadlineMs?: number; signal?: AbortSignal },
  ): Promise<GrpcResult<T>>;
  /** A server stream read to its end: every message, then the final status. */
  // deno-lint-ignore no-explicit-any
  stream<T = any>(
    service: string,
    rpc: string,
    request: Record<string, unknown>,
    o?: { signal?: AbortSignal },
  ): Promise<{ messages: T[]; error: GrpcCallError | null }>;
  /**
   * A server stream as it runs: `messages` grows as they arrive, `ended` is its final status
   * (null: ended OK), `cancel` ends it from this side.
   */
  // deno-lint-ignore no-explicit-any
  open<T = any>(
    service: string,
    rpc: string,
    request: Record<string, unknown>,
  ): { messages: T[]; ended: Promise<GrpcCallError | null>; cancel(): void };
  close(): void;
}

function readError(e: grpc.ServiceError): GrpcCallError {
  const md = e.metadata?.getMap() ?? {};
  const metadata: Record<string, string> = {};
  for (const [k, v] of Object.entries(md)) metadata[k] = typeof v === "string" ? v : v.toString();
  let body: unknown = null;
  const bin = e.metadata?.get("orbit-error-bin")[0];
  if (bin !== undefined) {
    try {
      body = JSON.parse(bin.toString());
    } catch {
      body = bin.toString();
    }
  }
  return {
    status: grpc.status[e.code] ?? String(e.code),
    code: e.code,
    details: e.details,
    orbitCode: (e.metadata?.get("orbit-error-code")[0] as string | undefined) ?? null,
    body,
    metadata,
  };
}

/**
 * `addr`: host:port; `ca`: the certificate (PEM) to trust for TLS, or none for plain text;
 * `serverName`: the name to check it against (an IP address cannot be one).
 */
export function grpcClient(
  addr: string,
  o: { token?: string | null; ca?: string | null; serverName?: string } = {},
): GrpcClient {
  const pkg = grpc.loadPackageDefinition(loadProtos()) as unknown as {
    orbit: { v1: Record<string, grpc.ServiceClientConstructor> };
    grpc: { health: { v1: Record<string, grpc.ServiceClientConstructor> } };
  };
  const creds = o.ca
    ? grpc.credentials.createSsl(Buffer.from(o.ca))
    : grpc.credentials.createInsecure();
  const clients = new Map<string, ServiceClient>();
  const client = (service: string) => {
    let c = clients.get(service);
    if (!c) {
      const [pkgName, name] = service.startsWith("grpc.health.v1.")
        ? [pkg.grpc.health.v1, service.slice("grpc.health.v1.".length)]
        : [pkg.orbit.v1, service];
      const Ctor = pkgName[name];
      if (!Ctor) throw new Error(`no gRPC service ${service}`);
      // One channel for every service: the first client's, shared by the others.
      const first = clients.values().next().value as grpc.Client | undefined;
      c = new Ctor(addr, creds, {
        ...(first ? { channelOverride: first.getChannel() } : {}),
        // The name the certificate must have (Deno's node:tls takes no IP address as one).
        ...(o.serverName
          ? {
            "grpc.ssl_target_name_override": o.serverName,
            "grpc.default_authority": o.serverName,
          }
          : {}),
      }) as unknown as ServiceClient;
      clients.set(service, c);
    }
    return c;
  };
  const metadata = () => {
    const md = new grpc.Metadata();
    if (o.token) md.set("authorization", `Bearer ${o.token}`);
    return md;
  };
  return {
    call: (service, rpc, request, opts = {}) =>
      new Promise((resolve) => {
        const options: grpc.CallOptions = opts.deadlineMs
          ? { deadline: Date.now() + opts.deadlineMs }
          : {};
        const call = client(service)[rpc]!(
          request,
          metadata(),
          options,
          (e: grpc.ServiceError | null, value: unknown) =>
            resolve(e ? { ok: false, error: readError(e) } : { ok: true, value: value as never }),
        ) as grpc.ClientUnaryCall;
        opts.signal?.addEventListener("abort", () => call.cancel(), { once: true });
      }),
    stream: (service, rpc, request, opts = {}) =>
      new Promise((resolve) => {
        const messages: never[] = [];
        const s = client(service)[rpc]!(request, metadata()) as grpc.ClientReadableStream<never>;
        opts.signal?.addEventListener("abort", () => s.cancel(), { once: true });
        s.on("data", (m: never) => messages.push(m));
        s.on("error", (e: grpc.ServiceError) => resolve({ messages, error: readError(e) }));
        s.on("end", () => resolve({ messages, error: null }));
      }),
    open: (service, rpc, request) => {
      const messages: never[] = [];
      const s = client(service)[rpc]!(request, metadata()) as grpc.ClientReadableStream<never>;
      s.on("data", (m: never) => messages.push(m));
      const ended = new Promise<GrpcCallError | null>((resolve) => {
        s.on("error", (e: grpc.ServiceError) => resolve(readError(e)));
        s.on("end", () => resolve(null));
      });
      return { messages, ended, cancel: () => s.cancel() };
    },
    close: () => {
      for (const c of clients.values()) c.close();
    },
  };
}
