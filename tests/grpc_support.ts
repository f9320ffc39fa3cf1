/**
 * The gRPC tests' helpers: a server process with `--grpc-addr 127.0.0.1:0` (the port read from
 * its `ORBIT gRPC listening` log line) and the same request over both bindings.
 */
import assert from "node:assert/strict";
import { type GrpcClient, grpcClient, type GrpcResult } from "../lib/grpc/client.ts";
import { api, type ServerOptions, type ServerProcess, startServer } from "./support/server.ts";

export interface GrpcServerProcess extends ServerProcess {
  grpcAddr: string;
}

export async function startGrpcServer(o: ServerOptions): Promise<GrpcServerProcess> {
  const s = await startServer({ ...o, args: ["--grpc-addr", "127.0.0.1:0", ...(o.args ?? [])] });
  try {
    const line = await s.waitForLog(/ORBIT gRPC listening addr=/);
    return { ...s, grpcAddr: line.match(/addr=(\S+)/)![1]! };
  } catch (e) {
    await s.kill("SIGKILL");
    throw e;
  }
}

/** An answer of either binding, as the HTTP API gives it: status and parsed JSON body. */
export interface Answer {
  status: number;
  body: unknown;
}

/** A gRPC answer read as HTTP's, with its gRPC status and, for an error, its metadata. */
export type GrpcAnswer = Answer & {
  grpc: string;
  /** `orbit-error-code` of an error (null: none sent; undefined: not an error). */
  orbitCode?: string | null;
  metadata?: Record<string, string>;
};

/** The HTTP answer a gRPC result stands for (Document: `created` is 201; errors: the trailer). */
export function asHttp(r: GrpcResult<Record<string, unknown>>): GrpcAnswer {
  if (!r.ok) {
    return {
      status: Number(r.error.metadata["orbit-http-status"]),
      body: r.error.body,
      grpc: r.error.status,
      orbitCode: r.error.orbitCode,
      metadata: r.error.metadata,
    };
  }
  const v = r.value;
  if (typeof v.json === "string" && !("tasks" in v)) {
    return { status: v.created ? 201 : 200, body: JSON.parse(v.json), grpc: "OK" };
  }
  return { status: 200, body: v, grpc: "OK" };
}

/**
 * A body without the clock's reading: a running execution in memory reads with the time of the
 * read as `updated_ms` (lib/executions/executions.ts rowOf), pending answers `now_ms`; two reads
 * a moment apart differ there and only there.
 */
function steady(body: unknown): unknown {
  return JSON.parse(
    JSON.stringify(body, (k, v) => k === "updated_ms" || k === "now_ms" ? undefined : v),
  );
}

/** The same request over HTTP and gRPC; the two answers must be the same. */
export async function sameAnswer(
  base: string,
  g: GrpcClient,
  token: string | undefined,
  http: { method: string; path: string; body?: unknown; raw?: string },
  rpc: { service: string; rpc: string; request: Record<string, unknown> },
): Promise<{ http: Answer; grpc: GrpcAnswer }> {
  let h: Answer;
  if (http.raw !== undefined) {
    const r = await fetch(base + http.path, {
      method: http.method,
      headers: {
        "content-type": "application/json",
        ...(token ? { authorization: `Bearer ${token}` } : {}),
      },
      body: http.raw,
    });
    h = { status: r.status, body: JSON.parse(await r.text()) };
  } else {
    const r = await api(base, token).call(http.method, http.path, http.body);
    h = { status: r.status, body: r.body };
  }
  const gr = asHttp(await g.call(rpc.service, rpc.rpc, rpc.request));
  const what = `${http.method} ${http.path} vs ${rpc.service}.${rpc.rpc}`;
  assert.equal(gr.status, h.status, `${what}: ${JSON.stringify({ http: h, grpc: gr })}`);
  assert.deepEqual(steady(gr.body), steady(h.body), what);
  if (h.status >= 400) {
    // An error's code is also metadata of its own, for clients that read no body.
    const code = (h.body as { error?: { code?: string } } | null)?.error?.code;
    assert.equal(gr.orbitCode, code, `${what}: orbit-error-code`);
  }
  return { http: h, grpc: gr };
}

export { grpcClient };
