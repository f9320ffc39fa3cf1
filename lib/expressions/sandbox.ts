/**
 * The expression sandbox: JSONata runs in worker threads, never in the server's own thread, and
 * each evaluation has a hard deadline (issue 37). JSONata's own guards (time, depth, sequence
 * length) stop an expression that loops through JSONata; they cannot stop one call of a
 * built-in that runs long by itself (`$distinct` over 100,000 items is quadratic and never
 * returns to JSONata). Past its deadline such an evaluation's worker is terminated, the
 * evaluation fails with EXPRESSION_LIMIT, and a fresh worker takes the next one.
 *
 * Each worker runs one evaluation at a time, so a deadline belongs to exactly one evaluation and
 * terminating a worker never fails another one; evaluations wait in one queue for the first free
 * worker. The server's thread only posts the scope and reads the result, so health, reads and
 * every other request are answered while a hostile expression runs out its time.
 */
import {
  type ExpressionBudget,
  ExpressionError,
  ExpressionLimitError,
  type ExpressionSandbox,
  type Scope,
} from "../engine/expr.ts";

/** The name a worker of the sandbox runs under (main.ts starts the worker loop on it). */
export const EXPRESSION_WORKER_NAME = "orbit-expressions";

/** Messages between the sandbox and its workers. */
export type ToWorker =
  | { kind: "budget"; budget: ExpressionBudget }
  | { kind: "evaluate"; id: number; text: string; scope: Scope };
export type FromWorker =
  | { ready: true }
  | { id: number; ok: true; value: unknown }
  | { id: number; ok: false; limit: boolean; message: string };

export interface SandboxOptions {
  budget: ExpressionBudget;
  /** Workers (default 2: one hostile expression leaves the other for everything else). */
  workers?: number;
  /** Time past the budget's timeout before a worker is terminated (default 250 ms). */
  graceMs?: number;
  /** The worker's module (default: ./worker.ts beside this file, or the bundle itself). */
  workerUrl?: string | URL;
  /** Called when a worker is terminated at a deadline (logging, metrics). */
  onTerminated?: (text: string, ms: number) => void;
}

interface Job {
  id: number;
  text: string;
  scope: Scope;
  resolve(v: unknown): void;
  reject(e: Error): void;
}

interface Slot {
  worker: Worker | null;
  /** The worker has loaded and answers (its deadline clock runs from then, not from spawn). */
  ready: boolean;
  job: Job | null;
  timer: ReturnType<typeof setTimeout> | null;
  started: number;
}

/**
 * The module a worker runs. From the sources that is ./worker.ts; in the single-file bundle
 * (and a compiled binary) there is no such file, so the worker runs the program's own main
 * module, which starts the worker loop when it runs under EXPRESSION_WORKER_NAME (main.ts).
 */
function defaultWorkerUrl(): string {
  const here = import.meta.url;
  return /\/lib\/expressions\/sandbox\.ts$/.test(here)
    ? new URL("./worker.ts", here).href
    : Deno.mainModule;
}

export class WorkerSandbox implements ExpressionSandbox {
  readonly #budget: ExpressionBudget;
  readonly #graceMs: number;
  readonly #url: string | URL;
  readonly #onTerminated: SandboxOptions["onTerminated"];
  readonly #slots: Slot[];
  readonly #queue: Job[] = [];
  #nextId = 1;
  #closed = false;
  /** Workers terminated at a deadline so far. */
  terminated = 0;

  constructor(o: SandboxOptions) {
    this.#budget = o.budget;
    this.#graceMs = o.graceMs ?? 250;
    this.#url = o.workerUrl ?? defaultWorkerUrl();
    this.#onTerminated = o.onTerminated;
    this.#slots = Array.from(
      { length: Math.max(1, o.workers ?? 2) },
      () => ({ worker: null, ready: false, job: null, timer: null, started: 0 }),
    );
  }

  evaluate(text: string, scope: Scope): Promise<unknown> {
    if (this.#closed) return Promise.reject(new ExpressionError("the server is stopping"));
    return new Promise((resolve, reject) => {
      this.#queue.push({ id: this.#nextId++, text, scope, resolve, reject });
      this.#pump();
    });
  }

  /** Terminates every worker; evaluations still waiting fail. */
  close(): void {
    this.#closed = true;
    for (const slot of this.#slots) {
      if (slot.timer !== null) clearTimeout(slot.timer);
      slot.worker?.terminate();
      slot.worker = null;
      slot.job?.reject(new ExpressionError("the server is stopping"));
      slot.job = null;
    }
    for (const job of this.#queue.splice(0)) {
      job.reject(new ExpressionError("the server is stopping"));
    }
  }

  /** Hands waiting evaluations to free workers. */
  #pump(): void {
    for (const slot of this.#slots) {
      if (this.#queue.length === 0) return;
      if (slot.job !== null) continue;
      const job = this.#queue.shift()!;
      const worker = slot.worker ?? this.#spawn(slot);
      slot.job = job;
      if (slot.ready) this.#arm(slot, job);
      try {
        worker.postMessage({ kind: "evaluate", id: job.id, text: job.text, scope: job.scope });
      } catch (e) {
        // A scope the structured clone cannot carry (never plain JSON): the evaluation's error.
        this.#finish(slot);
        job.reject(new ExpressionError(`Cannot evaluate expression: ${(e as Error).message}`));
      }
    }
  }

  /** Starts the deadline of the evaluation a ready worker runs. */
  #arm(slot: Slot, job: Job): void {
    slot.started = performance.now();
    slot.timer = setTimeout(
      () => this.#deadline(slot, job),
      this.#budget.timeoutMs + this.#graceMs,
    );
  }

  #spawn(slot: Slot): Worker {
    const worker = new Worker(this.#url, { type: "module", name: EXPRESSION_WORKER_NAME });
    slot.ready = false;
    worker.onmessage = (ev: MessageEvent<FromWorker>) => {
      if (slot.worker !== worker) return;
      const m = ev.data;
      if ("ready" in m) {
        slot.ready = true;
        if (slot.job !== null && slot.timer === null) this.#arm(slot, slot.job);
        return;
      }
      const job = slot.job;
      if (job === null || m.id !== job.id) return;
      this.#finish(slot);
      if (m.ok) job.resolve(m.value);
      else {job.reject(
          m.limit ? new ExpressionLimitError(m.message) : new ExpressionError(m.message),
        );}
      this.#pump();
    };
    worker.onerror = (ev: ErrorEvent) => {
      // The worker died (it could not load, or threw outside an evaluation): replace it.
      ev.preventDefault();
      if (slot.worker !== worker) return;
      const job = slot.job;
      this.#retire(slot);
      job?.reject(new ExpressionError(`Cannot evaluate expression: ${ev.message}`));
      this.#pump();
    };
    worker.postMessage({ kind: "budget", budget: this.#budget } satisfies ToWorker);
    slot.worker = worker;
    return worker;
  }

  /** An evaluation past its deadline: its worker goes, the evaluation fails. */
  #deadline(slot: Slot, job: Job): void {
    if (slot.job !== job) return;
    const ms = performance.now() - slot.started;
    this.#retire(slot);
    this.terminated++;
    this.#onTerminated?.(job.text, ms);
    job.reject(
      new ExpressionLimitError(
        `Expression "${job.text.length > 200 ? job.text.slice(0, 200) + "…" : job.text}" ` +
          `ran past its deadline of ${this.#budget.timeoutMs} ms and was stopped`,
      ),
    );
    this.#pump();
  }

  #finish(slot: Slot): void {
    if (slot.timer !== null) clearTimeout(slot.timer);
    slot.timer = null;
    slot.job = null;
  }

  #retire(slot: Slot): void {
    this.#finish(slot);
    slot.worker?.terminate();
    slot.worker = null;
    slot.ready = false;
  }
}
