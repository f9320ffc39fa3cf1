/**
 * The OrderProcessing example worker with its cycle measured: the time from a worker's result
 * (the start of its `complete`/`fail` request) to the next task that reaches the slot it freed
 * (in that request's answer with eager dispatch, or in a later poll's). It wraps the global
 * `fetch` the SDK uses, then runs `examples/order-processing/worker.ts` unchanged (same flags
 * and environment).
 *
 * SIGUSR1 prints one JSON line `{"cycle":{"n","p50_ms","p99_ms"}}` on stdout for the samples
 * since the previous SIGUSR1 and starts a new period, so `bench/throughput.ts` can leave the
 * warm-up out. The probe reads no body twice: it counts the tasks of an answer by its
 * `"token":` members (the order workload carries no such string in its data).
 */
const RESULT_PATHS = new Set(["/v1/tasks/complete", "/v1/tasks/fail"]);
const POLL_PATH = "/v1/workers/poll";

/** Start times of results whose slot has not received its next task yet, oldest first. */
const freed: number[] = [];
let samples: number[] = [];

function tasksIn(text: string): number {
  let n = 0;
  for (let i = text.indexOf('"token":'); i >= 0; i = text.indexOf('"token":', i + 8)) n++;
  return n;
}

const realFetch = globalThis.fetch;
globalThis.fetch = async (input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
  const url = typeof input === "string" ? input : input instanceof URL ? input.href : input.url;
  const path = new URL(url).pathname;
  const isResult = RESULT_PATHS.has(path);
  if (!isResult && path !== POLL_PATH) return await realFetch(input, init);
  const t0 = performance.now();
  const res = await realFetch(input, init);
  const text = await res.text();
  const now = performance.now();
  let n = res.ok ? tasksIn(text) : 0;
  if (isResult) {
    if (n > 0) {
      samples.push(now - t0);
      n--;
    } else {
      freed.push(t0);
    }
  }
  for (; n > 0 && freed.length > 0; n--) samples.push(now - freed.shift()!);
  return new Response(text, {
    status: res.status,
    statusText: res.statusText,
    headers: res.headers,
  });
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
