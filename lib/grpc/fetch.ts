/**
 * `grpcFetch`: a `fetch` that sends the HTTP API's requests over the gRPC binding, so that
 * anything built on `fetch` (the TypeScript SDK's `Client` and `Worker` take one as
 * `options.fetch`; sdk/typescript/grpc_transport.ts) runs over gRPC unchanged. The route table is
 * the server's (lib/grpc/methods.ts), read backwards: a request becomes its RPC's message
 * (`x` members as `x_json` JSON text), the answer becomes the HTTP answer the route gives (the
 * Document's JSON, or the error body of `orbit-error-bin` with `orbit-http-status`; a standby's
 * NOT_LEADER with HTTP's `x-orbit-leader` from `orbit-leader-http`, and the leader's gRPC address,
 * `orbit-leader`, as `x-orbit-leader-grpc`, a header of this fetch only). A call the
 * binding cannot make fails as a network failure does (a TypeError), as do connection failures.
 */
import { type GrpcCallError, grpcClient } from "./client.ts";
import { type Method, METHODS } from "./methods.ts";
import { loadProtos } from "./server.ts";

export interface GrpcFetchOptions {
  /** The server's `--grpc-addr`, host:port. */
  addr: string;
  /** The certificate (PEM) to trust for TLS; none: plain text. */
  ca?: string | null;
  /** The name the certificate must have (an IP address cannot be one). */
  serverName?: string;
}

export type GrpcFetch = typeof fetch & { close(): void };

interface Field {
  name: string;
  type: string;
  typeName?: string;
  label?: string;
}

type Types = Record<string, { type?: { field?: Field[] } }>;

/** The method whose route `method path` is, and its path parameters. */
function route(method: string, path: string): { m: Method; params: Record<string, string> } | null {
  for (const m of METHODS) {
    if (m.http !== method) continue;
    const names: string[] = [];
    const re = new RegExp(
      "^" + m.path.replace(/\{(\w+)\}/g, (_, k: string) => {
        names.push(k);
        return "([^/]+)";
      }) + (m.service === "Workflows" && m.rpc === "Get" ? "(?:/([^/]+))?" : "") + "$",
    );
    const hit = re.exec(path);
    if (!hit) continue;
    if (m.service === "Workflows" && m.rpc === "Get") names.push("version");
    const params: Record<string, string> = {};
    names.forEach((k, i) => {
      if (hit[i + 1] !== undefined) params[k] = decodeURIComponent(hit[i + 1]!);
    });
    return { m, params };
  }
  return null;
}

/** A JSON body as a message of `type`: `x_json` fields from member `x`, nested ones alike. */
function toMessage(body: unknown, typeName: string, types: Types): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (body === null || typeof body !== "object") return out;
  const b = body as Record<string, unknown>;
  for (const f of types[typeName]?.type?.field ?? []) {
    if (f.name.endsWith("_json")) {
      const v = b[f.name.slice(0, -5)];
      if (v !== undefined) out[f.name] = JSON.stringify(v);
      continue;
    }
    const v = b[f.name];
    if (v === undefined) continue;
    if (f.type === "TYPE_MESSAGE" && f.typeName) {
      // Relative to the package of the type that holds it ("TaskError"), or absolute.
      const t = f.typeName.startsWith(".")
        ? f.typeName.slice(1)
        : `${typeName.slice(0, typeName.lastIndexOf("."))}.${f.typeName}`;
      out[f.name] = f.label === "LABEL_REPEATED" && Array.isArray(v)
        ? v.map((x) => toMessage(x, t, types))
        : toMessage(v, t, types);
    } else out[f.name] = v;
  }
  return out;
}

const NUMBERS = new Set(["limit", "timeout_s", "after_seq"]);

function errorAnswer(e: GrpcCallError): Response {
  const status = Number(e.metadata["orbit-http-status"]);
  if (!e.orbitCode || !Number.isInteger(status)) {
    throw new TypeError(`gRPC ${e.status}: ${e.details}`);
  }
  // The headers HTTP sends with an error, from the metadata the binding sends them as; and the
  // leader's gRPC address, which HTTP has no header for.
  const headers = new Headers({ "content-type": "application/json" });
  const md = e.metadata;
  if (md["orbit-leader-http"]) headers.set("x-orbit-leader", md["orbit-leader-http"]);
  if (md["orbit-leader"]) headers.set("x-orbit-leader-grpc", md["orbit-leader"]);
  if (e.metadata["retry-after"]) headers.set("retry-after", e.metadata["retry-after"]);
  return new Response(JSON.stringify(e.body), { status, headers });
}

export function grpcFetch(o: GrpcFetchOptions): GrpcFetch {
  const types = loadProtos() as unknown as Types;
  const clients = new Map<string, ReturnType<typeof grpcClient>>();
  const clientFor = (token: string | null) => {
    const key = token ?? "";
    let c = clients.get(key);
    if (!c) {
      c = grpcClient(o.addr, {
        token,
        ca: o.ca ?? null,
        ...(o.serverName ? { serverName: o.serverName } : {}),
      });
      clients.set(key, c);
    }
    return c;
  };

  const f = async (input: RequestInfo | URL, init: RequestInit = {}): Promise<Response> => {
    const req = new Request(input, init);
    const url = new URL(req.url);
    const found = route(req.method, url.pathname);
    if (!found) throw new TypeError(`no gRPC twin for ${req.method} ${url.pathname}`);
    const { m, params } = found;
    const auth = /^Bearer +(\S+)$/i.exec(req.headers.get("authorization") ?? "");
    const g = clientFor(auth?.[1] ?? null);
    const text = req.method === "GET" || req.method === "DELETE" ? "" : await req.text();
    const signal = init.signal ?? undefined;
    signal?.throwIfAborted();

    let message: Record<string, unknown>;
    if (m.rawBody) message = { [m.rawBody]: text };
    else {
      const body = text ? JSON.parse(text) : {};
      message = toMessage(body, requestTypeOf(types, m), types);
    }
    Object.assign(message, params);
    for (const [k, v] of url.searchParams) message[k] = NUMBERS.has(k) ? Number(v) : v;

    const r = await g.call(m.service, m.rpc, message, signal ? { signal } : {});
    if (signal?.aborted) throw signal.reason;
    if (!r.ok) return errorAnswer(r.error);
    const v = r.value as Record<string, unknown>;
    const json = typeof v.json === "string" ? v.json : JSON.stringify(v);
    return new Response(json, {
      status: v.created === true ? 201 : 200,
      headers: { "content-type": "application/json" },
    });
  };

  // History has no unary twin: the stream read whole, as one page.
  const history = async (
    g: ReturnType<typeof grpcClient>,
    id: string,
    url: URL,
    signal: AbortSignal | undefined,
  ): Promise<Response> => {
    const limit = url.searchParams.has("limit") ? Number(url.searchParams.get("limit")) : 1000;
    const request: Record<string, unknown> = { execution_id: id };
    if (url.searchParams.has("after_seq")) {
      request.after_seq = Number(url.searchParams.get("after_seq"));
    }
    if (url.searchParams.has("run_id")) request.run_id = url.searchParams.get("run_id");
    const r = await g.stream("Executions", "History", request, signal ? { signal } : {});
    if (signal?.aborted) throw signal.reason;
    if (r.error) return errorAnswer(r.error);
    const events = r.messages.map((e: { json: string }) => JSON.parse(e.json));
    const page = events.slice(0, limit);
    // The run: the events', or with none (after the end) the one asked for or the current one.
    let runId = (r.messages[0] as { run_id?: string } | undefined)?.run_id ??
      url.searchParams.get("run_id");
    if (!runId) {
      const e = await g.call("Executions", "Get", { execution_id: id }, signal ? { signal } : {});
      if (!e.ok) return errorAnswer(e.error);
      runId = JSON.parse(e.value.json).run_id;
    }
    return new Response(
      JSON.stringify({
        execution_id: id,
        run_id: runId,
        events: page,
        ...(events.length > limit ? { next_after_seq: page.at(-1).seq } : {}),
      }),
      { status: 200, headers: { "content-type": "application/json" } },
    );
  };

  const fetchFn = (async (input: RequestInfo | URL, init: RequestInit = {}) => {
    const req = new Request(input, init);
    const url = new URL(req.url);
    const h = /^\/v1\/executions\/([^/]+)\/history$/.exec(url.pathname);
    if (req.method === "GET" && h) {
      const auth = /^Bearer +(\S+)$/i.exec(req.headers.get("authorization") ?? "");
      return await history(
        clientFor(auth?.[1] ?? null),
        decodeURIComponent(h[1]!),
        url,
        init.signal ?? undefined,
      );
    }
    return await f(input, init);
  }) as GrpcFetch;
  fetchFn.close = () => {
    for (const c of clients.values()) c.close();
    clients.clear();
  };
  return fetchFn;
}

/** The name of `m`'s request message type. */
function requestTypeOf(types: Types, m: Method): string {
  const svc = types[`orbit.v1.${m.service}`] as unknown as Record<
    string,
    { requestType?: { type?: { name?: string } } }
  >;
  const name = svc?.[m.rpc]?.requestType?.type?.name;
  return `orbit.v1.${name ?? ""}`;
}
