/**
 * The chaos suite's worker: the OrderProcessing example's tasks (the same names, contracts and
 * outputs as examples/order-processing/worker.ts) on the TypeScript SDK, with every attempt
 * written to a log file before its handler runs, so the checker can match each result in the
 * history to an attempt a worker really executed.
 *
 *   deno run -A chaos/worker.ts --server URL --log FILE [--worker-id ID] [--max-delay-ms N]
 *     [--no-spread]
 *
 * In a shared cluster the slots spread over the servers' advertised addresses (the SDK's
 * default); `--no-spread` keeps them on `--server` (attach mode: only that link is the run's).
 *
 * A bearer token, when the server wants one, comes from `ORBIT_TOKEN` (attach mode).
 *
 * A log line is JSON: `{"event":"executing","pid","at_ms","execution_id","step","attempt",
 * "idempotency_key","redelivery","token","task"}`. It is appended synchronously, so a SIGKILL
 * after a result was sent cannot lose the line that records its attempt.
 */
import { defineTask, type TaskContext, Worker, z } from "../sdk/typescript/mod.ts";

const flag = (name: string) => {
  const i = Deno.args.indexOf(name);
  return i >= 0 ? Deno.args[i + 1] : undefined;
};
const server = flag("--server") ?? "http://127.0.0.1:7233";
const logFile = flag("--log") ?? "chaos-worker.log";
const workerId = flag("--worker-id") ?? "chaos-worker";
const maxDelayMs = Number(flag("--max-delay-ms") ?? 200);
const spreadOverNodes = !Deno.args.includes("--no-spread");
const enc = new TextEncoder();

function logged<I, O>(task: string, fn: (input: I, ctx: TaskContext) => O) {
  return async (input: I, ctx: TaskContext): Promise<O> => {
    Deno.writeFileSync(
      logFile,
      enc.encode(
        JSON.stringify({
          event: "executing",
          pid: Deno.pid,
          at_ms: Date.now(),
          execution_id: ctx.executionId,
          step: ctx.step,
          attempt: ctx.attempt,
          idempotency_key: ctx.idempotencyKey,
          redelivery: ctx.redelivery,
          token: ctx.token,
          task,
        }) + "\n",
      ),
      { append: true },
    );
    // A little work time widens the windows in which a fault meets an attempt in flight.
    const ms = Math.floor(Math.random() * maxDelayMs);
    if (ms > 0) {
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, ms);
        ctx.signal.addEventListener("abort", () => {
          clearTimeout(t);
          resolve();
        }, { once: true });
      });
    }
    return fn(input, ctx);
  };
}

const item = z.object({ sku: z.string(), qty: z.number().int().min(1), price: z.number().min(0) });
const order = z.object({ order_id: z.string(), customer: z.string(), items: z.array(item) });

const tasks = [
  defineTask({
    name: "orders.validate",
    contract: "1",
    input: order,
    output: z.object({ order_id: z.string(), total: z.number() }),
    handler: logged("orders.validate", (o: z.infer<typeof order>) => ({
      order_id: o.order_id,
      total: Math.round(o.items.reduce((s, i) => s + i.qty * i.price, 0) * 100) / 100,
    })),
  }),
  defineTask({
    name: "inventory.reserve",
    contract: "1",
    input: z.object({ order_id: z.string(), items: z.array(item) }),
    output: z.object({ reservation_id: z.string() }),
    handler: logged("inventory.reserve", (i: { order_id: string }) => ({
      reservation_id: `res-${i.order_id}`,
    })),
  }),
  defineTask({
    name: "inventory.release",
    contract: "1",
    input: z.object({ reservation_id: z.string() }),
    output: z.object({ released: z.boolean() }),
    handler: logged("inventory.release", () => ({ released: true })),
  }),
  defineTask({
    name: "payments.charge",
    contract: "1",
    input: z.object({ order_id: z.string(), amount: z.number(), customer: z.string() }),
    output: z.object({ charge_id: z.string(), amount: z.number() }),
    handler: logged("payments.charge", (i: { amount: number }, ctx: TaskContext) => ({
      charge_id: `ch-${ctx.idempotencyKey}`,
      amount: i.amount,
    })),
  }),
  defineTask({
    name: "payments.refund",
    contract: "1",
    input: z.object({ charge_id: z.string(), amount: z.number() }),
    output: z.object({ refunded: z.number() }),
    handler: logged("payments.refund", (i: { amount: number }) => ({ refunded: i.amount })),
  }),
  defineTask({
    name: "shipping.create",
    contract: "1",
    input: z.object({ order_id: z.string(), reservation_id: z.string() }),
    output: z.object({ tracking: z.string() }),
    handler: logged("shipping.create", (i: { order_id: string }) => ({
      tracking: `trk-${i.order_id}`,
    })),
  }),
  defineTask({
    name: "email.confirm",
    contract: "1",
    input: z.object({ customer: z.string(), tracking: z.string() }),
    output: z.object({ sent: z.boolean() }),
    handler: logged("email.confirm", () => ({ sent: true })),
  }),
  defineTask({
    name: "loyalty.update",
    contract: "1",
    input: z.object({ customer: z.string(), points: z.number() }),
    output: z.object({ points: z.number() }),
    handler: logged("loyalty.update", (i: { points: number }) => ({ points: i.points })),
  }),
];

const token = Deno.env.get("ORBIT_TOKEN");
const worker = new Worker({
  server,
  workerId,
  tasks,
  concurrency: 8,
  spreadOverNodes,
  ...(token ? { token } : {}),
});
let stopping = false;
const stop = () => {
  if (stopping) Deno.exit(130);
  stopping = true;
  worker.stop({ timeoutMs: 10_000 }).finally(() => Deno.exit(0));
};
Deno.addSignalListener("SIGTERM", stop);
Deno.addSignalListener("SIGINT", stop);
await worker.start();
console.error(`chaos worker ${workerId} serving ${tasks.length} tasks on ${server}`);
await worker.run();
