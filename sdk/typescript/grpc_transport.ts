/**
 * The TypeScript SDK over the gRPC binding (README "gRPC"): `grpcFetch` is a `fetch` that sends
 * the SDK's HTTP API requests as gRPC calls to a server's `--grpc-addr`, so the `Client` and the
 * `Worker` run over gRPC unchanged, given it as their `fetch` option:
 *
 * ```ts
 * import { Client, Worker } from "./mod.ts";
 * import { grpcFetch } from "./grpc_transport.ts";
 *
 * const grpc = grpcFetch({ addr: "127.0.0.1:7234" });
 * const client = new Client({ server: "http://127.0.0.1:7233", fetch: grpc });
 * const worker = new Worker({ server: "http://127.0.0.1:7233", fetch: grpc, workerId, tasks });
 * // …
 * grpc.close();
 * ```
 *
 * `server` still names the runtime (errors say it); the requests go to `addr`. Deno only, from
 * the source tree: it uses `@grpc/grpc-js` and the binding's tables in `lib/grpc/`, which is why
 * it is a module of its own, outside `mod.ts` and the Node bundle, rather than a
 * `transport: "grpc"` of the Client's (that would put `@grpc/grpc-js` in every SDK user's build).
 *
 * @module
 */
export { type GrpcFetch, grpcFetch, type GrpcFetchOptions } from "../../lib/grpc/fetch.ts";
