/**
 * The gRPC binding (`--grpc-addr`): `@grpc/grpc-js`'s server on Deno's `node:http2`, the
 * `.proto` files of `proto/` loaded by `@grpc/proto-loader`, server reflection
 * (`@grpc/reflection`) and `grpc.health.v1`.
 *
 * One service layer under both transports: every `orbit.v1` call becomes the HTTP request of
 * its route (lib/grpc/methods.ts) and is answered by the server's own HTTP handler, in process,
 * with no socket: the same authentication (the `authorization` metadata is the header; the
 * workers file's rules apply as they are), JSON body checks and limit, engine calls and errors.
 * Errors become gRPC statuses with `orbit-error-code` metadata and the API's JSON error body in
 * the `orbit-error-bin` trailer. In standby mode a server that is not serving as the leader fails
 * every call UNAVAILABLE with `orbit-error-code: NOT_LEADER` (reference page, "Standby
 * behavior"), reads included, as the page says, naming the leader's addresses: its gRPC address
 * (`--grpc-advertise-addr`, `host:port`) in `orbit-leader` when the leader recorded one, and its
 * HTTP address (HTTP's `x-orbit-leader`) in `orbit-leader-http`.
 */
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { ReflectionService } from "@grpc/reflection";
import { Buffer } from "node:buffer";
import protobuf from "protobufjs";
import { PROTO_FILES } from "./proto_files.ts";
import { PROTOS } from "./protos.ts";
import { type Relay, startRelay } from "./relay.ts";
import { answerOversizedMessages } from "./message_limit.ts";
import { type Outcome, pollStream, SlotEvents } from "./poll_stream.ts";
import { NotLeaderError, OrbitError } from "../errors.ts";
import { log } from "../log.ts";
import {
  type Answer,
  bodyText,
  JsonFieldError,
  type Method,
  METHODS,
  pathFields,
  pathOf,
  taskMessage,
} from "./methods.ts";

/** The server's HTTP handler (the Hono app, or the cluster node in front of it). */
export type Handler = (req: Request, info: Deno.ServeHandlerInfo) => Response | Promise<Response>;

/** Standby mode's view of the election (routes/gate.ts's GateView). */
export interface GrpcGate {
  serving(): boolean;
  leader(): { node_id: string; addr: string | null; grpc_addr?: string } | null;
}

export interface GrpcOptions {
  hostname: string;
  port: number;
  handler: Handler;
  /** Standby mode only: every call fails NOT_LEADER unless this server leads. */
  gate: GrpcGate | null;
  /** The same certificate and key as HTTP (`--tls-cert`, `--tls-key`). */
  tls: { cert: string; key: string } | null;
  /** `--max-body-bytes`: the JSON body the call becomes is held to it, as on HTTP. */
  maxBodyBytes: number;
}

export interface GrpcServer {
  readonly port: number;
  /** Ends the calls in progress and stops listening. */
  shutdown(): Promise<void>;
}

/** The package definition (also what tests' and the SDK's clients load). */
export function loadProtos(): protoLoader.PackageDefinition {
  // From the embedded copy of proto/ (lib/grpc/protos.ts): the bundle has no proto/ beside it.
  const root = new protobuf.Root();
  for (const f of PROTO_FILES) protobuf.parse(PROTOS[f]!, root, { keepCase: true });
  root.resolveAll();
  return protoLoader.fromJSON(root.toJSON(), {
    keepCase: true,
    longs: Number,
    enums: String,
    defaults: false,
    // A repeated field is never absent: an empty one is [] (proto3 cannot tell them apart).
    arrays: true,
    oneofs: false,
  });
}

/** gRPC status for an HTTP status and error code. */
export function grpcStatus(status: number, code: string): grpc.status {
  switch (status) {
    case 400:
      return grpc.status.INVALID_ARGUMENT;
    case 401:
      return grpc.status.UNAUTHENTICATED;
    case 403:
      return grpc.status.PERMISSION_DENIED;
    case 404:
      return grpc.status.NOT_FOUND;
    case 409:
      return code.endsWith("_EXISTS")
        ? grpc.status.ALREADY_EXISTS
        : grpc.status.FAILED_PRECONDITION;
    case 413:
    case 429:
      return grpc.status.RESOURCE_EXHAUSTED;
    case 422:
      return grpc.status.INVALID_ARGUMENT;
    case 503:
      return grpc.status.UNAVAILABLE;
    case 504:
      return grpc.status.DEADLINE_EXCEEDED;
    default:
      return status >= 500 ? grpc.status.INTERNAL : grpc.status.UNKNOWN;
  }
}

type CallError = Partial<grpc.StatusObject> & { code: grpc.status };

/**
 * An error answer of the API (its status, JSON body text and headers) as a gRPC status.
 * `leaderGrpc`: for NOT_LEADER, the leader's gRPC address as this server knows it (null: none
 * recorded), sent as `orbit-leader`; HTTP's `x-orbit-leader` goes as `orbit-leader-http`.
 */
function callError(
  status: number,
  text: string,
  headers: Headers | Record<string, string>,
  leaderGrpc: () => string | null = () => null,
): CallError {
  let code = "HTTP_ERROR";
  let message = text;
  try {
    const e = JSON.parse(text).error;
    if (typeof e?.code === "string") code = e.code;
    if (typeof e?.message === "string") message = e.message;
  } catch {
    // Not the API's error body (none is expected): the text is the message.
  }
  const md = new grpc.Metadata();
  md.set("orbit-error-code", code);
  md.set("orbit-http-status", String(status));
  md.set("orbit-error-bin", Buffer.from(text));
  const get = (k: string) => headers instanceof Headers ? headers.get(k) : (headers[k] ?? null);
  const leader = get("x-orbit-leader");
  if (leader) md.set("orbit-leader-http", leader);
  const grpcLeader = code === "NOT_LEADER" ? leaderGrpc() : null;
  if (grpcLeader) md.set("orbit-leader", grpcLeader);
  const retry = get("retry-after");
  if (retry) md.set("retry-after", retry);
  return { code: grpcStatus(status, code), details: message, metadata: md };
}

function orbitError(e: OrbitError, leaderGrpc?: () => string | null): CallError {
  return callError(e.status, JSON.stringify(e.toBody()), e.headers, leaderGrpc);
}

interface CallLike {
  metadata: grpc.Metadata;
  getPeer(): string;
  on(event: "cancelled", f: () => void): unknown;
}

export function startGrpcServer(opts: GrpcOptions): Promise<GrpcServer> {
  const def = loadProtos();
  const pkg = grpc.loadPackageDefinition(def) as unknown as {
    orbit: { v1: Record<string, { service: grpc.ServiceDefinition }> };
    grpc: { health: { v1: { Health: { service: grpc.ServiceDefinition } } } };
  };
  // Messages up to the body limit and then some (the JSON body of a message is a little
  // larger than it): the HTTP layer judges the body, and answers BODY_TOO_LARGE as on HTTP.
  // A message past this grpc-js refuses unread, with the same answer (message_limit.ts).
  answerOversizedMessages(opts.maxBodyBytes);
  const server = new grpc.Server({
    "grpc.max_receive_message_length": opts.maxBodyBytes * 2 + 65_536,
    "grpc.max_send_message_length": -1,
  });

  /** The leader's gRPC address, as the election last read it (standby mode). */
  const leaderGrpc = () => opts.gate?.leader()?.grpc_addr ?? null;
  const notLeader = (): CallError | null => {
    if (!opts.gate || opts.gate.serving()) return null;
    const leader = opts.gate.leader();
    return orbitError(new NotLeaderError(leader), () => leader?.grpc_addr ?? null);
  };
  /** The API's error answer as the call's status. */
  const failed = (out: { status: number; text: string; headers: Headers }) =>
    callError(out.status, out.text, out.headers, leaderGrpc);

  /** One HTTP request through the handler, with the call's credentials and cancellation. */
  async function dispatch(
    call: CallLike,
    method: string,
    path: string,
    body: string | null,
  ): Promise<Outcome> {
    const headers = new Headers();
    const auth = call.metadata.get("authorization")[0];
    if (typeof auth === "string") headers.set("authorization", auth);
    if (body !== null) headers.set("content-type", "application/json");
    const aborter = new AbortController();
    call.on("cancelled", () => aborter.abort());
    const req = new Request(`http://127.0.0.1${path}`, {
      method,
      headers,
      body,
      signal: aborter.signal,
    });
    const peer = /^(.*):(\d+)$/.exec(call.getPeer());
    const info = {
      remoteAddr: {
        transport: "tcp",
        hostname: peer?.[1]?.replace(/^\[|\]$/g, "") ?? "127.0.0.1",
        port: Number(peer?.[2] ?? 0),
      },
      completed: Promise.resolve(),
    } as Deno.ServeHandlerInfo;
    const res = await opts.handler(req, info);
    return { status: res.status, text: await res.text(), headers: res.headers };
  }

  function request(m: Method, msg: Record<string, unknown>): { path: string; body: string | null } {
    const inPath = pathFields(m);
    const query = new URLSearchParams();
    const members: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(msg)) {
      if (v === undefined || v === null || inPath.has(k)) continue;
      if (m.query?.includes(k)) query.set(k, String(v));
      else members[k] = v;
    }
    let path = pathOf(m, msg);
    if (query.size > 0) path += `?${query}`;
    if (m.http === "GET" || m.http === "DELETE") return { path, body: null };
    // The document's JSON text is the body, as sent: the route parses it (400 if it is not JSON).
    if (m.rawBody) return { path, body: String(msg[m.rawBody] ?? "") };
    return { path, body: bodyText(members) };
  }

  function response(answer: Answer, status: number, text: string): Record<string, unknown> {
    if (answer === "document") return { json: text, created: status === 201 };
    const body = JSON.parse(text) as Record<string, unknown>;
    if (answer === "tasks") {
      const tasks = (body.tasks as Record<string, unknown>[] | undefined) ?? [];
      return { ...body, tasks: tasks.map(taskMessage), json: text };
    }
    return body;
  }

  async function unary(m: Method, call: grpc.ServerUnaryCall<Record<string, unknown>, unknown>) {
    const refused = notLeader();
    if (refused) return { error: refused };
    let req;
    try {
      req = request(m, call.request);
    } catch (e) {
      if (!(e instanceof JsonFieldError)) throw e;
      return {
        error: orbitError(new OrbitError(400, "BAD_REQUEST", e.message, { field: e.field })),
      };
    }
    const out = await dispatch(call, m.http, req.path, req.body);
    if (m.service === "Workers") slotEvent(m.rpc, call.request, out.status);
    if (out.status < 300 || m.ok?.includes(out.status)) {
      return { value: response(m.answer, out.status, out.text) };
    }
    return { error: failed(out) };
  }

  // What frees the slots of PollStream calls: the results and heartbeats answered here.
  const slots = new SlotEvents();
  function slotEvent(rpc: string, msg: Record<string, unknown>, status: number) {
    if (status >= 500) return; // not answered: the worker will send it again
    if ((rpc === "Complete" || rpc === "Fail") && typeof msg.token === "string") {
      slots.reported(msg.token);
    } else if (rpc === "Heartbeat" && status < 300 && Array.isArray(msg.tokens)) {
      slots.heartbeat(String(msg.session_id ?? ""), msg.tokens.map(String));
    }
  }

  const services: Record<string, grpc.UntypedServiceImplementation> = {};
  for (const m of METHODS) {
    const impl = services[m.service] ??= {};
    impl[m.rpc] = (
      call: grpc.ServerUnaryCall<Record<string, unknown>, unknown>,
      done: grpc.sendUnaryData<unknown>,
    ) => {
      unary(m, call).then(
        (r) => r.error ? done(r.error) : done(null, r.value),
        (e) => {
          log.server.error("gRPC call failed", { rpc: `${m.service}.${m.rpc}`, error: String(e) });
          done({ code: grpc.status.INTERNAL, details: "internal error; see the server log" });
        },
      );
    };
  }

  // Executions.History: a server stream of the events after after_seq, page after page.
  services.Executions!.History = (
    call: grpc.ServerWritableStream<Record<string, unknown>, unknown>,
  ) => {
    let cancelled = false;
    call.on("cancelled", () => cancelled = true);
    (async () => {
      const refused = notLeader();
      if (refused) return call.emit("error", refused);
      const id = encodeURIComponent(String(call.request.execution_id ?? ""));
      let after = call.request.after_seq as number | undefined;
      // The first page's run for every page: a continue_as_new meanwhile starts another run.
      let run = call.request.run_id as string | undefined;
      for (;;) {
        const q = new URLSearchParams();
        if (after !== undefined) q.set("after_seq", String(after));
        if (run) q.set("run_id", run);
        if (call.request.limit) q.set("limit", String(call.request.limit));
        const path = `/v1/executions/${id}/history${q.size ? `?${q}` : ""}`;
        const out = await dispatch(call, "GET", path, null);
        if (cancelled) return;
        if (out.status >= 300) {
          return call.emit("error", failed(out));
        }
        const page = JSON.parse(out.text) as {
          run_id: string;
          events: Array<{ seq: number; type: string }>;
          next_after_seq?: number;
        };
        run = page.run_id;
        for (const e of page.events) {
          call.write({ seq: e.seq, type: e.type, json: JSON.stringify(e), run_id: page.run_id });
        }
        if (page.next_after_seq === undefined || page.events.length === 0) break;
        after = page.next_after_seq;
      }
      call.end();
    })().catch((e) => {
      log.server.error("gRPC call failed", { rpc: "Executions.History", error: String(e) });
      call.emit("error", {
        code: grpc.status.INTERNAL,
        details: "internal error; see the server log",
      });
    });
  };

  services.Workers!.PollStream = (
    call: grpc.ServerWritableStream<Record<string, unknown>, unknown>,
  ) => {
    pollStream(call, {
      events: slots,
      refused: notLeader,
      dispatch: (c, path, body) => dispatch(c, "POST", path, body),
      error: failed,
    }).catch((e) => {
      log.server.error("gRPC call failed", { rpc: "Workers.PollStream", error: String(e) });
      call.emit("error", {
        code: grpc.status.INTERNAL,
        details: "internal error; see the server log",
      });
    });
  };

  for (const [name, impl] of Object.entries(services)) {
    server.addService(pkg.orbit.v1[name]!.service, impl);
  }

  // grpc.health.v1: SERVING where orbit.v1 calls are served; a standby is NOT_SERVING.
  const known = new Set(["", ...Object.keys(services).map((s) => `orbit.v1.${s}`)]);
  const healthOf = (service: string) =>
    !known.has(service) ? null : notLeader() ? "NOT_SERVING" : "SERVING";
  server.addService(pkg.grpc.health.v1.Health.service, {
    Check: (
      call: grpc.ServerUnaryCall<{ service?: string }, unknown>,
      done: grpc.sendUnaryData<unknown>,
    ) => {
      const status = healthOf(call.request.service ?? "");
      if (status === null) done({ code: grpc.status.NOT_FOUND, details: "unknown service" });
      else done(null, { status });
    },
    Watch: (call: grpc.ServerWritableStream<{ service?: string }, unknown>) => {
      let last: string | null = null;
      const tick = () => {
        const status = healthOf(call.request.service ?? "") ?? "SERVICE_UNKNOWN";
        if (status !== last) call.write({ status });
        last = status;
      };
      tick();
      const timer = setInterval(tick, 1000);
      call.on("cancelled", () => clearInterval(timer));
    },
  });
  try {
    new ReflectionService(def).addToServer(server);
  } catch (e) {
    // @grpc/reflection reads its own .proto files from beside its code: the single-file bundle
    // has none (`deno run main.ts` and a compiled binary do). The binding works without it.
    log.server.warn("gRPC server reflection is not available in this build", {
      error: (e as Error).message,
    });
  }

  // grpc-js listens on loopback only, behind the relay (lib/grpc/relay.ts: it keeps clients'
  // GOAWAY frames from Deno's node:http2, which aborts on them), which also terminates TLS.
  return new Promise((resolve, reject) => {
    server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (err, inner) => {
      if (err) return reject(err);
      let relay: Relay;
      try {
        relay = startRelay({ hostname: opts.hostname, port: opts.port, tls: opts.tls }, inner);
      } catch (e) {
        server.forceShutdown();
        return reject(e);
      }
      resolve({
        port: relay.port,
        shutdown: () =>
          new Promise<void>((done) => {
            relay.close();
            const force = setTimeout(() => server.forceShutdown(), 1000);
            server.tryShutdown(() => {
              clearTimeout(force);
              done();
            });
          }),
      });
    });
  });
}
