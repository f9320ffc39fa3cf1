/**
 * The TypeScript SDK's conformance worker: the program the language-neutral conformance suite
 * (tests/conformance/README.md) drives. It serves the suite's four tasks with the SDK and
 * prints one JSON line per event on standard output.
 *
 *   deno run -A sdk/typescript/testing/conformance_worker.ts --server http://127.0.0.1:7233
 *
 * Environment: ORBIT_SERVER, ORBIT_TOKEN, CONFORMANCE_WORKER_ID, CONFORMANCE_TASKS (names,
 * comma-separated; default all), CONFORMANCE_CONCURRENCY (default 2), CONFORMANCE_HEARTBEAT_MS
 * (default 500), CONFORMANCE_POLL_WAIT_S (default 10), CONFORMANCE_STOP_GRACE_MS (default
 * 30000), CONFORMANCE_GRPC_ADDR (host:port: talk to that gRPC binding through grpcFetch of
 * ../grpc_transport.ts instead of HTTP; `--server` then only names the runtime). SIGTERM or
 * SIGINT: stop gracefully, print {"event":"stopped"}, exit 0.
 */
import { defineTask, type TaskContext, TaskError, Worker, z } from "../mod.ts";

const flag = (name: string) => {
  const i = Deno.args.indexOf(name);
  return i >= 0 ? Deno.args[i + 1] : undefined;
};
const env = (name: string) => Deno.env.get(name) || undefined;
const envInt = (name: string, def: number) => {
  const n = Number(env(name));
  return Number.isFinite(n) && n > 0 ? n : def;
};

const emit = (event: string, fields: Record<string, unknown> = {}) =>
  console.log(JSON.stringify({ ...fields, event }));

const attemptFields = (task: string, ctx: TaskContext) => ({
  task,
  execution_id: ctx.executionId,
  step: ctx.step,
  attempt: ctx.attempt,
  redelivery: ctx.redelivery,
  idempotency_key: ctx.idempotencyKey,
  token: ctx.token,
});

/** Resolves after `ms`; rejects with the signal's reason (after the event) when it aborts. */
function sleepOrCancel(task: string, ms: number, ctx: TaskContext): Promise<void> {
  return new Promise((resolve, reject) => {
    const cancelled = () => {
      clearTimeout(timer);
      emit("cancelled", attemptFields(task, ctx));
      reject(ctx.signal.reason);
    };
    const timer = setTimeout(() => {
      ctx.signal.removeEventListener("abort", cancelled);
      resolve();
    }, ms);
    if (ctx.signal.aborted) cancelled();
    else ctx.signal.addEventListener("abort", cancelled, { once: true });
  });
}

const all = [
  defineTask({
    name: "conformance.echo",
    contract: "1",
    input: z.object({ value: z.unknown() }),
    output: z.object({
      value: z.unknown(),
      attempt: z.number().int(),
      redelivery: z.boolean(),
      idempotency_key: z.string(),
      runtime: z.string(),
    }),
    handler: (input, ctx) => {
      emit("executing", attemptFields("conformance.echo", ctx));
      return {
        value: input.value,
        attempt: ctx.attempt,
        redelivery: ctx.redelivery,
        idempotency_key: ctx.idempotencyKey,
        runtime: "typescript",
      };
    },
  }),
  defineTask({
    name: "conformance.fail",
    contract: "1",
    input: z.object({
      code: z.string().min(1),
      message: z.string().default(""),
      retryable: z.boolean().default(false),
      succeed_on_attempt: z.number().int().default(0),
    }),
    output: z.object({ attempt: z.number().int() }),
    handler: (input, ctx) => {
      emit("executing", attemptFields("conformance.fail", ctx));
      if (input.succeed_on_attempt > 0 && ctx.attempt >= input.succeed_on_attempt) {
        return { attempt: ctx.attempt };
      }
      throw new TaskError(input.code, input.message, {
        retryable: input.retryable,
        details: { attempt: ctx.attempt },
      });
    },
  }),
  defineTask({
    name: "conformance.sleep",
    contract: "1",
    input: z.object({ ms: z.number().int().min(0) }),
    output: z.object({ slept_ms: z.number().int() }),
    handler: async (input, ctx) => {
      emit("executing", attemptFields("conformance.sleep", ctx));
      await sleepOrCancel("conformance.sleep", input.ms, ctx);
      return { slept_ms: input.ms };
    },
  }),
  defineTask({
    name: "conformance.hold",
    contract: "1",
    output: z.object({ redelivered: z.boolean() }),
    handler: async (_input: unknown, ctx) => {
      emit("executing", attemptFields("conformance.hold", ctx));
      if (ctx.redelivery) return { redelivered: true };
      await sleepOrCancel("conformance.hold", 2 ** 31 - 1, ctx);
      return { redelivered: false };
    },
  }),
];

const wanted = (env("CONFORMANCE_TASKS") ?? "").split(",").map((s) => s.trim()).filter(Boolean);
const tasks = wanted.length === 0 ? all : all.filter((t) => wanted.includes(t.name));
const workerId = env("CONFORMANCE_WORKER_ID") ?? "conformance-typescript";
const graceMs = envInt("CONFORMANCE_STOP_GRACE_MS", 30_000);

const grpcAddr = env("CONFORMANCE_GRPC_ADDR");
// Loaded only when asked for: @grpc/grpc-js takes half a second to load.
const grpc = grpcAddr
  ? (await import("../grpc_transport.ts")).grpcFetch({ addr: grpcAddr })
  : undefined;

const worker = new Worker({
  server: flag("--server") ?? env("ORBIT_SERVER") ?? "http://127.0.0.1:7233",
  ...(grpc ? { fetch: grpc } : {}),
  token: env("ORBIT_TOKEN"),
  workerId,
  tasks,
  concurrency: envInt("CONFORMANCE_CONCURRENCY", 2),
  heartbeatMs: envInt("CONFORMANCE_HEARTBEAT_MS", 500),
  pollWaitS: envInt("CONFORMANCE_POLL_WAIT_S", 10),
});

let stopping = false;
const stop = () => {
  if (stopping) return;
  stopping = true;
  worker.stop({ timeoutMs: graceMs }).then(() => {
    emit("stopped");
    Deno.exit(0);
  });
};
Deno.addSignalListener("SIGTERM", stop);
Deno.addSignalListener("SIGINT", stop);

try {
  await worker.start();
} catch (err) {
  console.error(`error: ${err instanceof Error ? err.message : err}`);
  Deno.exit(1);
}
if (!stopping) {
  emit("ready", {
    sdk: "typescript",
    worker_id: workerId,
    runtime: "typescript",
    tasks: tasks.length,
    transport: grpc ? "grpc" : "http",
  });
}
await worker.done;
