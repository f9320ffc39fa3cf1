/**
 * The chaos workload: clients that start OrderProcessing orders (with execution ids, so a start
 * repeated through a crash is a no-op) and wait for each; a client that starts `ChaosFlow`
 * executions (orbit-ir/2: a task, a signal wait, a one-second sleep, a task, compensations) and sends them `note`
 * signals (whose handler runs a task), then `go`, a cancel, or nothing (a declared wait); and a
 * schedule firing `ChaosTick` every 2 s. Every request has a deadline and every loop a bound.
 */
import type { StartRecord } from "./checker.ts";
import type { Rng } from "./rng.ts";
import { type EventType, TERMINAL_EVENTS } from "../lib/engine/events.ts";
import { call, retry } from "./http.ts";

const ROOT = new URL("../", import.meta.url).pathname;
export const ORDER_WORKFLOW = JSON.parse(
  await Deno.readTextFile(`${ROOT}examples/order-processing/workflow.json`),
);

export const FLOW_WORKFLOW = {
  ir: "orbit-ir/2",
  name: "ChaosFlow",
  version: "1.1.0",
  signals: { go: {}, note: {} },
  handlers: {
    note: [{
      id: "ack",
      task: "email.confirm",
      contract: "1",
      input: { customer: "chaos", tracking: "note" },
    }],
  },
  steps: [
    {
      id: "reserve",
      task: "inventory.reserve",
      contract: "1",
      input: { order_id: "{% $input.id %}", items: [{ sku: "s", qty: 1, price: 1 }] },
      compensate: {
        task: "inventory.release",
        contract: "1",
        input: { reservation_id: "{% $steps.reserve.reservation_id %}" },
      },
    },
    { id: "wait", wait_signal: "go", timeout_s: 86400 },
    // A short timer, so that timers start, fire, are cancelled and move with their executions
    // under the faults (checker rule timer-fire).
    { id: "nap", sleep_s: 1 },
    {
      id: "charge",
      task: "payments.charge",
      contract: "1",
      input: { order_id: "{% $input.id %}", amount: 5, customer: "chaos" },
      compensate: {
        task: "payments.refund",
        contract: "1",
        input: { charge_id: "{% $steps.charge.charge_id %}", amount: 5 },
      },
    },
    { id: "done", return: { ok: true } },
  ],
};

export const TICK_WORKFLOW = {
  ir: "orbit-ir/2",
  name: "ChaosTick",
  version: "1.0.0",
  steps: [
    { id: "tick", task: "loyalty.update", contract: "1", input: { customer: "tick", points: 1 } },
    { id: "done", return: 1 },
  ],
};

export const SCHEDULE_EVERY_S = 2;

export interface DriverStats {
  ordersStarted: number;
  ordersDone: number;
  flowsStarted: number;
  signals: number;
  cancels: number;
  /** Longest time with no order finishing while orders were open (ms). */
  longestStallMs: number;
  /** When that stall began (epoch ms; 0 when there was none): to line it up with the faults. */
  longestStallFromMs: number;
  /** Requests that never got an answer before their deadline. */
  unanswered: number;
}

export class Driver {
  readonly starts: StartRecord[] = [];
  readonly stats: DriverStats = {
    ordersStarted: 0,
    ordersDone: 0,
    flowsStarted: 0,
    signals: 0,
    cancels: 0,
    longestStallMs: 0,
    longestStallFromMs: 0,
    unanswered: 0,
  };
  #stopStarting = false;
  #deadline = Infinity;
  #lastProgress = Date.now();
  #open = 0;
  #running: Promise<void>[] = [];

  constructor(
    readonly base: () => string,
    readonly tag: string,
    readonly rng: Rng,
    readonly orderClients: number,
  ) {}

  start(): void {
    for (let i = 0; i < this.orderClients; i++) this.#running.push(this.#orders(i));
    this.#running.push(this.#flows());
    const stall = setInterval(() => {
      if (this.#open === 0) this.#lastProgress = Date.now();
      const stalled = Date.now() - this.#lastProgress;
      if (stalled > this.stats.longestStallMs) {
        this.stats.longestStallMs = stalled;
        this.stats.longestStallFromMs = this.#lastProgress;
      }
    }, 250);
    Promise.all(this.#running).finally(() => clearInterval(stall));
  }

  /** No new starts; what is open is still waited for until `deadline`. */
  async finish(deadline: number): Promise<void> {
    this.#stopStarting = true;
    this.#deadline = deadline;
    await Promise.all(this.#running);
  }

  async #startExecution(workflow: string, id: string, input: unknown, rec: StartRecord) {
    this.starts.push(rec);
    const r = await retry(this.base, "POST", "/v1/executions", {
      workflow,
      execution_id: id,
      input,
    }, Math.min(this.#deadline, Date.now() + 120_000));
    rec.answered = r.status === 200 || r.status === 201;
    if (!rec.answered) this.stats.unanswered++;
    return rec.answered;
  }

  /**
   * Waits (long polls) until the execution is no longer running, or the deadline. The answer
   * that ends the wait is kept in `rec.waited` (no request more): the checker compares it with
   * the history's terminal event of that run (`wait-answer`).
   */
  async #waitDone(id: string, rec: StartRecord): Promise<string | null> {
    while (Date.now() < this.#deadline) {
      const r = await call(
        this.base(),
        "GET",
        `/v1/executions/${id}/wait?timeout_s=5`,
        undefined,
        15_000,
      );
      if (r.status === 200 && r.body?.status !== "running") {
        const b = r.body;
        rec.waited = {
          status: String(b?.status),
          at_ms: Date.now(),
          ...(typeof b?.run_id === "string" ? { run_id: b.run_id } : {}),
          ...(b && "output" in b ? { output: b.output ?? null } : {}),
          ...(typeof b?.error?.code === "string" ? { error_code: b.error.code } : {}),
        };
        return b.status;
      }
      if (r.status === 404) return null;
      if (r.status === 0 || r.status >= 500) await new Promise((res) => setTimeout(res, 200));
    }
    return null;
  }

  /** Polls the history until the run has started a signal wait or ended, or the deadline. */
  async #reachedSignalWait(id: string, end: number): Promise<void> {
    while (Date.now() < end) {
      const r = await call(this.base(), "GET", `/v1/executions/${id}/history`, undefined, 15_000);
      const events: { type?: string; kind?: string }[] = Array.isArray(r.body?.events)
        ? r.body.events
        : [];
      const there = (e: { type?: string; kind?: string }) =>
        (e.type === "StepStarted" && e.kind === "wait_signal") ||
        TERMINAL_EVENTS.has(e.type as EventType);
      if (events.some(there)) return;
      if (r.status === 404) return;
      await new Promise((res) => setTimeout(res, 200));
    }
  }

  /**
   * The go or cancel never got an answer before its deadline: it may not have landed, so the
   * flow may wait for its signal. That is the driver's failure, reported as unanswered.
   */
  #undelivered(rec: StartRecord): void {
    rec.declaredWait = true;
    this.stats.unanswered++;
  }

  async #orders(client: number): Promise<void> {
    let n = 0;
    while (!this.#stopStarting) {
      const id = `${this.tag}-o${client}-${n++}`;
      const rec: StartRecord = { id, kind: "order", answered: false, declaredWait: false };
      this.stats.ordersStarted++;
      this.#open++;
      try {
        const input = {
          order_id: id,
          customer: `cust-${client}`,
          items: [{ sku: "sku-1", qty: 1 + (n % 3), price: 9.5 }],
        };
        if (!await this.#startExecution("OrderProcessing", id, input, rec)) continue;
        if (await this.#waitDone(id, rec)) {
          this.stats.ordersDone++;
          this.#lastProgress = Date.now();
        }
      } finally {
        this.#open--;
      }
    }
  }

  async #flows(): Promise<void> {
    let n = 0;
    while (!this.#stopStarting) {
      const id = `${this.tag}-f${n++}`;
      const roll = this.rng.next();
      const declaredWait = roll < 0.1;
      const rec: StartRecord = { id, kind: "flow", answered: false, declaredWait };
      this.stats.flowsStarted++;
      if (!await this.#startExecution("ChaosFlow", id, { id }, rec)) continue;
      const end = Math.min(this.#deadline, Date.now() + 60_000);
      const notes = Math.floor(this.rng.next() * 3);
      for (let i = 0; i < notes; i++) {
        const statuses: number[] = [];
        const r = await retry(
          this.base,
          "POST",
          `/v1/executions/${id}/signals/note`,
          {
            payload: { i },
          },
          end,
          undefined,
          statuses,
        );
        (rec.signals ??= []).push({ signal: "note", key: i, statuses });
        if (r.status === 200 || r.status === 201) this.stats.signals++;
      }
      if (declaredWait) {
        // Left on its wait: it must reach it first (its first task may still be redelivered
        // after a killed worker's session timeout), or the checker reads it mid-step.
        await this.#reachedSignalWait(id, end);
        continue;
      }
      if (roll < 0.35) {
        const r = await retry(
          this.base,
          "POST",
          `/v1/executions/${id}/cancel`,
          { reason: "chaos" },
          end,
        );
        if (r.status === 200) this.stats.cancels++;
        // 409: it already finished — a retry of a cancel whose first attempt landed before its
        // connection failed answers that (the checker reads how the flow really ended).
        else if (r.status !== 409) this.#undelivered(rec);
      } else {
        const r = await retry(this.base, "POST", `/v1/executions/${id}/signals/go`, {}, end);
        if (r.status === 200 || r.status === 201) this.stats.signals++;
        else if (r.status !== 409) this.#undelivered(rec); // 409: it already finished
      }
      await this.#waitDone(id, rec);
    }
  }
}
