/**
 * The conformance suite (tests/conformance/README.md) for the TypeScript SDK over the gRPC
 * binding: its conformance worker with `grpcFetch` against servers started with `--grpc-addr`,
 * faults injected by a gRPC proxy (tests/conformance/grpc_fault_proxy.ts).
 */
import { conformanceTest } from "./conformance/suite.ts";

conformanceTest("typescript-grpc");
