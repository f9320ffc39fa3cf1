/**
 * The OrderProcessing example worker with its cycle measured: the time from a worker's result
 * (the start of its `complete`/`fail` request) to the next task that reaches the slot it freed
 * (in that request's answer with eager dispatch, or in a later poll's). It wraps the SDK's
 * `Transport.request`, then runs `examples/order-processing/worker.ts` unchanged (same flags
 * and environment).
 *
 * SIGUSR1 prints one JSON line `{"cycle":{"n","p50_ms","p99_ms"}}` on stdout for the samples
 * since the previous SIGUSR1 and starts a new period, so `bench/throughput.ts` can leave the
 * warm-up out. The probe counts the tasks of an answer in its parsed `tasks`.
 */
import { type RequestOptions, Transport } from "../sdk/typescript/http.ts";

const RESULT_PATHS = new Set(["/v1/tasks/complete", "/v1/tasks/fail"]);
const POLL_PATH = "/v1/workers/poll";

/** Start times of results whose slot has not received its next task yet, oldest first. */
const freed: number[] = [];
let samples: number[] = [];

// Every request of the worker goes through Transport.request (whether `fetch` or a slot's
// own HTTP/1.1 connection carries it).
const realRequest = Transport.prototype.request;
Transport.prototype.request = async function <T>(
  this: Transport,
  method: string,
  path: string,
  options?: RequestOptions,
): Promise<T> {
  const isResult = RESULT_PATHS.has(path);
  if (!isResult && path !== POLL_PATH) {
    return await realRequest.call(this, method, path, options) as T;
  }
  const t0 = performance.now();
  let answer: unknown;
  try {
    answer = await realRequest.call(this, method, path, options);
  } catch (err) {
    if (isResult) freed.push(t0);
    throw err;
  }
  const now = performance.now();
  const tasks = (answer as { tasks?: unknown[] } | null)?.tasks;
  let n = Array.isArray(tasks) ? tasks.length : 0;
  if (isResult) {
    if (n > 0) {
      samples.push(now - t0);
      n--;
    } else {
      freed.push(t0);
    }
  }
  for (; n > 0 && freed.length > 0; n--) samples.push(now - freed.shift()!);
  return answer as T;
};

function pct(sorted: number[], p: number): number {
  return sorted.length === 0
    ? NaN
    : sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))]!;
}

Deno.addSignalListener("SIGUSR1", () => {
  const s = samples.sort((a, b) => a - b);
  samples = [];
  const r = (x: number) => Math.round(x * 100) / 100;
  console.log(
    JSON.stringify({ cycle: { n: s.length, p50_ms: r(pct(s, 0.5)), p99_ms: r(pct(s, 0.99)) } }),
  );
});

await import("../examples/order-processing/worker.ts");
