/**
 * The OrderProcessing worker: serves all six tasks of the example (and the two compensations)
 * with the TypeScript SDK.
 *
 *   deno run -A examples/order-processing/worker.ts [--server URL] [--concurrency N]
 *
 * Environment: ORBIT_SERVER, ORBIT_TOKEN, ORDER_WORKER_ID, ORDER_CONCURRENCY, and for tests
 * ORDER_CHARGE_DELAY_MS (a slow payment provider) and ORDER_TRACE=1 (one JSON line per attempt
 * on stdout).
 */
import { defineTask, type TaskContext, TaskError, Worker, z } from "../../sdk/typescript/mod.ts";

const args = Deno.args;
const flag = (name: string) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
};
const server = flag("--server") ?? Deno.env.get("ORBIT_SERVER") ?? "http://127.0.0.1:7233";
const concurrency = Number(flag("--concurrency") ?? Deno.env.get("ORDER_CONCURRENCY") ?? 8);
const chargeDelayMs = Number(Deno.env.get("ORDER_CHARGE_DELAY_MS") ?? 0);
const trace = Deno.env.get("ORDER_TRACE") === "1";

const item = z.object({ sku: z.string(), qty: z.number().int().min(1), price: z.number().min(0) });
const order = z.object({ order_id: z.string(), customer: z.string(), items: z.array(item) });

/** Wraps a handler so that, with ORDER_TRACE=1, every attempt is logged as one JSON line. */
function traced<I, O>(task: string, fn: (input: I, ctx: TaskContext) => Promise<O> | O) {
  return async (input: I, ctx: TaskContext): Promise<O> => {
    if (trace) {
      console.log(JSON.stringify({
        event: "executing",
        task,
        execution_id: ctx.executionId,
        step: ctx.step,
        attempt: ctx.attempt,
        redelivery: ctx.redelivery,
        idempotency_key: ctx.idempotencyKey,
      }));
    }
    return await fn(input, ctx);
  };
}

const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => {
      clearTimeout(t);
      resolve();
    }, { once: true });
  });

const tasks = [
  defineTask({
    name: "orders.validate",
    contract: "1",
    input: order,
    output: z.object({ order_id: z.string(), total: z.number() }),
    handler: traced("orders.validate", (o: z.infer<typeof order>) => {
      if (o.items.length === 0) {
        throw new TaskError("INVALID_ORDER", "an order needs items", { retryable: false });
      }
      const total = o.items.reduce((s, i) => s + i.qty * i.price, 0);
      return { order_id: o.order_id, total: Math.round(total * 100) / 100 };
    }),
  }),
  defineTask({
    name: "inventory.reserve",
    contract: "1",
    input: z.object({ order_id: z.string(), items: z.array(item) }),
    output: z.object({ reservation_id: z.string() }),
    handler: traced(
      "inventory.reserve",
      (i: { order_id: string }) => ({ reservation_id: `res-${i.order_id}` }),
    ),
  }),
  defineTask({
    name: "inventory.release",
    contract: "1",
    input: z.object({ reservation_id: z.string() }),
    output: z.object({ released: z.boolean() }),
    handler: traced("inventory.release", () => ({ released: true })),
  }),
  defineTask({
    name: "payments.charge",
    contract: "1",
    input: z.object({ order_id: z.string(), amount: z.number(), customer: z.string() }),
    output: z.object({ charge_id: z.string(), amount: z.number() }),
    handler: traced(
      "payments.charge",
      async (i: { order_id: string; amount: number; customer: string }, ctx) => {
        if (chargeDelayMs > 0) await sleep(chargeDelayMs, ctx.signal);
        if (i.customer === "declined") {
          throw new TaskError("CARD_DECLINED", "the card was declined", { retryable: false });
        }
        // The idempotency key is what a real payment provider would deduplicate on.
        return { charge_id: `ch-${ctx.idempotencyKey}`, amount: i.amount };
      },
    ),
  }),
  defineTask({
    name: "payments.refund",
    contract: "1",
    input: z.object({ charge_id: z.string(), amount: z.number() }),
    output: z.object({ refunded: z.number() }),
    handler: traced("payments.refund", (i: { amount: number }) => ({ refunded: i.amount })),
  }),
  defineTask({
    name: "shipping.create",
    contract: "1",
    input: z.object({ order_id: z.string(), reservation_id: z.string() }),
    output: z.object({ tracking: z.string() }),
    handler: traced(
      "shipping.create",
      (i: { order_id: string }) => ({ tracking: `trk-${i.order_id}` }),
    ),
  }),
  defineTask({
    name: "email.confirm",
    contract: "1",
    input: z.object({ customer: z.string(), tracking: z.string() }),
    output: z.object({ sent: z.boolean() }),
    handler: traced("email.confirm", () => ({ sent: true })),
  }),
  defineTask({
    name: "loyalty.update",
    contract: "1",
    input: z.object({ customer: z.string(), points: z.number() }),
    output: z.object({ points: z.number() }),
    handler: traced("loyalty.update", (i: { points: number }) => ({ points: i.points })),
  }),
];

const worker = new Worker({
  server,
  token: Deno.env.get("ORBIT_TOKEN"),
  workerId: Deno.env.get("ORDER_WORKER_ID") ?? "orders-typescript",
  tasks,
  concurrency,
  // In a shared cluster the slots spread over the servers (the SDK's default); ORDER_SPREAD=0
  // keeps them on the given address.
  spreadOverNodes: Deno.env.get("ORDER_SPREAD") !== "0",
});

// SIGTERM/Ctrl+C: finish running tasks and deliver their results, for at most 30 s (a result
// that cannot be delivered by then is redelivered by the server after its session timeout);
// a second signal exits at once.
let stopping = false;
const stop = () => {
  if (stopping) Deno.exit(130);
  stopping = true;
  worker.stop({ timeoutMs: 30_000 }).finally(() => Deno.exit(0));
};
Deno.addSignalListener("SIGTERM", stop);
Deno.addSignalListener("SIGINT", stop);
await worker.start();
console.error(
  `order worker serving ${tasks.length} tasks on ${server} (concurrency ${concurrency})`,
);
await worker.run();
