/** The `.proto` files of the gRPC binding, under `proto/`. */
export const PROTO_FILES = [
  "orbit/v1/common.proto",
  "orbit/v1/workflows.proto",
  "orbit/v1/executions.proto",
  "orbit/v1/schedules.proto",
  "orbit/v1/workers.proto",
  "orbit/v1/system.proto",
  "grpc/health/v1/health.proto",
];
