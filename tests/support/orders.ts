/**
 * The OrderProcessing example as a test fixture: worker processes, an order driver that retries
 * starts through server crashes (a start with an execution_id is safe to repeat), and the
 * history checks every end-to-end test makes.
 */
import assert from "node:assert/strict";
import { api, killOnExit } from "./server.ts";

const ROOT = new URL("../../", import.meta.url).pathname;
export const ORDER_WORKFLOW = JSON.parse(
  await Deno.readTextFile(`${ROOT}examples/order-processing/workflow.json`),
);
export const ORDER_STEPS = ["validate", "reserve", "charge", "ship", "confirm", "loyalty"];

/**
 * A workflow that waits for one signal (`go`) and returns its payload (the bench's executions
 * that wait through a run, `--waiting`).
 */
export const WAITER_WORKFLOW = {
  ir: "orbit-ir/2",
  name: "Waiter",
  version: "1.0.0",
  signals: { go: {} },
  steps: [{ id: "w", wait_signal: "go" }, { id: "r", return: "{% $steps.w %}" }],
};

/**
 * A workflow that waits for `go` while it keeps every `note` signal's payload, which its query
 * `notes` answers (reads from memory against reads from history).
 */
export const NOTES_WORKFLOW = {
  ir: "orbit-ir/2",
  name: "Notes",
  version: "1.0.0",
  signals: { go: {}, note: {} },
  queries: { notes: "{% $vars.notes %}" },
  handlers: {
    note: [{ id: "keep", assign: { notes: "{% $append($vars.notes, $signal) %}" } }],
  },
  steps: [
    { id: "init", assign: { notes: [] } },
    { id: "w", wait_signal: "go" },
    { id: "r", return: "{% $steps.w %}" },
  ],
};

/**
 * Two tasks for two workers: `a` for any worker of `t.a`, then `b` pinned to Python, then the
 * result (a result that makes ready another worker's step).
 */
export const SWITCH_WORKFLOW = {
  ir: "orbit-ir/1",
  name: "Switch",
  version: "1.0.0",
  steps: [
    { id: "a", task: "t.a", contract: "1", input: "{% $input %}" },
    { id: "b", task: "t.b", contract: "1", language: "python", input: "{% $steps.a %}" },
    { id: "r", return: "{% $steps.b %}" },
  ],
};

export interface WorkerProcess {
  pid: number;
  lines: string[];
  kill(signal?: Deno.Signal): Promise<Deno.CommandStatus>;
  status: Promise<Deno.CommandStatus>;
}

const workers = new Set<Deno.ChildProcess>();

export function startOrderWorker(server: string, env: Record<string, string> = {}): WorkerProcess {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", `${ROOT}examples/order-processing/worker.ts`, "--server", server],
    env: { NO_COLOR: "1", ORDER_TRACE: "1", ...env },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  workers.add(child);
  const lines: string[] = [];
  const pump = async (s: ReadableStream<Uint8Array>) => {
    let buf = "";
    for await (const chunk of s.pipeThrough(new TextDecoderStream())) {
      buf += chunk;
      let i;
      while ((i = buf.indexOf("\n")) >= 0) {
        lines.push(buf.slice(0, i));
        if (Deno.env.get("ORBIT_TEST_LOGS")) {
          console.error(`[worker ${child.pid}] ${buf.slice(0, i)}`);
        }
        buf = buf.slice(i + 1);
      }
    }
  };
  const pumps = Promise.all([pump(child.stdout), pump(child.stderr)]);
  const status = child.status.then(async (s) => {
    workers.delete(child);
    await pumps;
    return s;
  });
  return {
    pid: child.pid,
    lines,
    status,
    kill: async (signal: Deno.Signal = "SIGTERM") => {
      try {
        child.kill(signal);
      } catch { /* gone */ }
      return await status;
    },
  };
}

killOnExit(workers);

export function orderInput(id: string) {
  return { order_id: id, customer: `cust-${id}`, items: [{ sku: "sku-1", qty: 2, price: 9.5 }] };
}

/** Calls `fn` until it answers, through connection errors and 5xx (a server restarting). */
export async function retrying<T extends { status: number }>(
  fn: () => Promise<T>,
  ms = 60_000,
): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    try {
      const r = await fn();
      if (r.status < 500 || Date.now() > end) return r;
    } catch (e) {
      if (Date.now() > end) throw e;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * Starts `ids.length` orders from `clients` concurrent clients, each starting one order and
 * waiting for it to finish before taking the next; `base()` is read at every request, so the
 * server may be replaced under it.
 */
export async function runOrders(
  base: () => string,
  ids: string[],
  clients: number,
  onDone?: (id: string) => void,
): Promise<Map<string, string>> {
  const statuses = new Map<string, string>();
  let next = 0;
  const client = async () => {
    while (next < ids.length) {
      const id = ids[next++]!;
      const start = await retrying(() =>
        api(base()).post("/v1/executions", {
          workflow: "OrderProcessing",
          execution_id: id,
          input: orderInput(id),
        })
      );
      assert.ok(
        start.status === 201 || start.status === 200,
        `start ${id}: ${JSON.stringify(start.body)}`,
      );
      for (;;) {
        const w = await retrying(() => api(base()).get(`/v1/executions/${id}/wait?timeout_s=10`));
        assert.equal(w.status, 200, JSON.stringify(w.body));
        if (w.body.status !== "running") {
          statuses.set(id, w.body.status);
          onDone?.(id);
          break;
        }
      }
    }
  };
  await Promise.all(Array.from({ length: clients }, client));
  return statuses;
}

// deno-lint-ignore no-explicit-any
export async function fullHistory(base: string, id: string): Promise<any[]> {
  // deno-lint-ignore no-explicit-any
  const events: any[] = [];
  let after = 0;
  for (;;) {
    const r = await api(base).get(`/v1/executions/${id}/history?after_seq=${after}&limit=1000`);
    assert.equal(r.status, 200);
    events.push(...r.body.events);
    if (!r.body.next_after_seq) return events;
    after = r.body.next_after_seq;
  }
}

/** seq 1..n without gaps, exactly one StepSucceeded per order step, and a completed run. */
// deno-lint-ignore no-explicit-any
export function assertCleanOrderHistory(id: string, events: any[]): void {
  events.forEach((e, i) => assert.equal(e.seq, i + 1, `${id}: seq ${e.seq} at position ${i + 1}`));
  for (const step of ORDER_STEPS) {
    const n = events.filter((e) => e.type === "StepSucceeded" && e.step === step).length;
    assert.equal(n, 1, `${id}: ${n} StepSucceeded for ${step}`);
  }
  assert.equal(events.at(-1).type, "WorkflowCompleted", `${id}: last event ${events.at(-1).type}`);
}
