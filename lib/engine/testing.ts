/**
 * Test helpers for the pure core: a deterministic clock and id source, a seeded PRNG, small
 * builders for workflow documents, and a `Driver` that feeds commands to `decide` and keeps
 * the history the way the shell would (append the events, then install the state).
 *
 * Only tests import this module.
 */
import type { ErrorInfo, EventType, HistoryEvent } from "./events.ts";
import type { Step, TaskSpec, TaskStep, WorkflowDoc } from "./ir.ts";
import { type ChildLimits, type Command, decide, type Decision } from "./decide.ts";
import type { ExecutionState, StepState } from "./state.ts";

/** Start of the test clock: an arbitrary, fixed epoch millisecond. */
export const T0 = 1_700_000_000_000;

/** A counter-based id source: `id-1`, `id-2`, … */
export function ids(prefix = "id"): () => string {
  let n = 0;
  return () => `${prefix}-${++n}`;
}

/** mulberry32: a tiny seeded PRNG, so randomized tests replay exactly from their seed. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A task step `id` running task `t.<id>`, contract "1", with overrides. */
export function task(id: string, extra: Partial<TaskStep> = {}): TaskStep {
  return { id, task: `t.${id}`, contract: "1", ...extra };
}

/** A compensation spec running task `t.<name>`, contract "1". */
export function undo(name: string, extra: Partial<TaskSpec> = {}): TaskSpec {
  return { task: `t.${name}`, contract: "1", ...extra };
}

/** An `orbit-ir/1` document named `Test` 1.0.0 with the given steps. */
export function workflow(steps: Step[], extra: Partial<WorkflowDoc> = {}): WorkflowDoc {
  return { ir: "orbit-ir/1", name: "Test", version: "1.0.0", steps, ...extra };
}

/** An `orbit-ir/2` document named `Test2` 1.0.0 with the given steps. */
export function workflow2(
  steps: Array<Step | Record<string, unknown>>,
  extra: Partial<WorkflowDoc> | Record<string, unknown> = {},
): WorkflowDoc {
  return { ir: "orbit-ir/2", name: "Test2", version: "1.0.0", steps, ...extra } as WorkflowDoc;
}

/** A worker error. */
export function err(code: string, extra: Partial<ErrorInfo> = {}): ErrorInfo {
  return { code, message: `${code} happened`, ...extra };
}

/**
 * Feeds commands to `decide` and keeps the run's history and state, checking on every step
 * that the new events continue the history without a gap.
 */
export class Driver {
  state: ExecutionState | null = null;
  readonly history: HistoryEvent[] = [];
  now: number;
  readonly executionId: string;
  #tokens = 0;
  readonly newId: () => string;
  /** The server's child limits the decisions see (none by default). */
  limits: ChildLimits | undefined;

  constructor(readonly def: WorkflowDoc, opts: { now?: number; executionId?: string } = {}) {
    this.now = opts.now ?? T0;
    this.executionId = opts.executionId ?? "exec-1";
    this.newId = ids("uuid");
  }

  /** Runs one command at the current time; installs the state only when it was accepted. */
  async send(cmd: Command): Promise<Decision> {
    const d = await decide(this.def, this.state, cmd, {
      now: this.now,
      newId: this.newId,
      ...(this.limits ? { limits: this.limits } : {}),
    });
    let seq = this.state?.last_seq ?? 0;
    for (const e of d.events) {
      if (e.seq !== ++seq) throw new Error(`decide emitted seq ${e.seq}, expected ${seq}`);
      if (e.time_ms !== this.now) throw new Error(`event time ${e.time_ms} is not now ${this.now}`);
    }
    if (!d.accepted && d.events.length > 0) throw new Error("a refused command emitted events");
    this.history.push(...d.events);
    if (d.accepted) this.state = d.state;
    return d;
  }

  start(input: unknown = {}, extra: Partial<Extract<Command, { type: "start" }>> = {}) {
    return this.send({
      type: "start",
      execution_id: this.executionId,
      run_id: "run-1",
      input,
      ...extra,
    });
  }

  /** A fresh task token of this execution (`<execution id>/<n>`). */
  token(): string {
    return `${this.executionId}/tok-${++this.#tokens}`;
  }

  /** Dispatches a step to a worker; returns the token (and fails the test if refused). */
  async dispatch(step: string, session = "sess-1"): Promise<string> {
    const token = this.token();
    const d = await this.send({
      type: "dispatch",
      step,
      token,
      worker_id: "w-1",
      worker_session: session,
    });
    if (!d.accepted) throw new Error(`dispatch of "${step}" was refused`);
    return token;
  }

  complete(token: string, output: unknown = null) {
    return this.send({ type: "complete", token, output });
  }

  fail(token: string, error: ErrorInfo) {
    return this.send({ type: "fail", token, error });
  }

  /** Dispatches and completes a step in one go. */
  async run(step: string, output: unknown = null): Promise<Decision> {
    return await this.complete(await this.dispatch(step), output);
  }

  signal(name: string, payload: unknown = null) {
    return this.send({ type: "signal", name, payload });
  }

  /** Reports the end of the child execution of `step` (its id is read from the state). */
  childResult(
    step: string,
    status: "completed" | "failed" | "cancelled" | "timed_out",
    result: { output?: unknown; error?: ErrorInfo } = {},
  ) {
    const id = this.step(step).child?.execution_id ?? "?";
    return this.send({ type: "child_result", step, execution_id: id, status, ...result });
  }

  timer(timer_id: string) {
    return this.send({ type: "timer", timer_id });
  }

  /** Moves the clock to the earliest timer and fires it. */
  async fireNextTimer(): Promise<Decision> {
    const timers = Object.entries(this.s.timers).sort((a, b) => a[1].fire_at_ms - b[1].fire_at_ms);
    const first = timers[0];
    if (!first) throw new Error("no timer is running");
    this.now = Math.max(this.now, first[1].fire_at_ms);
    return await this.timer(first[0]);
  }

  /** The current state (fails the test when the run has not started). */
  get s(): ExecutionState {
    if (!this.state) throw new Error("the run has not started");
    return this.state;
  }

  step(id: string): StepState {
    const st = this.s.steps[id];
    if (!st) throw new Error(`no step "${id}"`);
    return st;
  }

  types(): EventType[] {
    return this.history.map((e) => e.type);
  }

  of<T extends EventType>(type: T): Array<Extract<HistoryEvent, { type: T }>> {
    return this.history.filter((e): e is Extract<HistoryEvent, { type: T }> => e.type === type);
  }

  last(): HistoryEvent {
    const e = this.history.at(-1);
    if (!e) throw new Error("the history is empty");
    return e;
  }
}
