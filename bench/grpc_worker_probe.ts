/**
 * `bench/worker_probe.ts` (the OrderProcessing example worker, unchanged, its cycle measured)
 * with every request of the worker sent over the gRPC binding to `ORBIT_BENCH_GRPC`
 * (host:port): the SDK's `Transport.request` is routed through `grpcFetch`
 * (sdk/typescript/grpc_transport.ts), whichever connection the worker meant for it.
 * `bench/throughput.ts --grpc-workers N` runs N of these.
 */
import { fetchExchange, Transport } from "../sdk/typescript/http.ts";
import { grpcFetch } from "../sdk/typescript/grpc_transport.ts";

const addr = Deno.env.get("ORBIT_BENCH_GRPC");
if (!addr) throw new Error("ORBIT_BENCH_GRPC (the server's gRPC host:port) is not set");
const viaGrpc = new Transport(
  {
    server: "http://grpc.invalid",
    ...(Deno.env.get("ORBIT_TOKEN") ? { token: Deno.env.get("ORBIT_TOKEN")! } : {}),
  },
  fetchExchange(grpcFetch({ addr })),
);
const realRequest = Transport.prototype.request;
Transport.prototype.request = function (method, path, options) {
  return realRequest.call(viaGrpc, method, path, options);
} as typeof realRequest;

await import("./worker_probe.ts");
