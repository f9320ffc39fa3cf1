/**
 * Author workflow definitions in code. The builder emits an ORBIT IR document
 * (`orbit-ir/1`, or `orbit-ir/2` as soon as a feature of it is used):
 *
 * ```ts
 * const doc = workflow("OrderProcessing", "1.0.0")
 *   .input({ type: "object", required: ["order_id"] })
 *   .task("validate", { task: "orders.validate", contract: "1", input: expr("$input") })
 *   .task("charge", {
 *     task: "payments.charge", contract: "1",
 *     input: { amount: expr("$steps.validate.total") },
 *     compensate: { task: "payments.refund", contract: "1", input: expr("$steps.charge") },
 *   })
 *   .returns(expr("$steps"))
 *   .build();
 * ```
 *
 * @module
 */

import { z } from "zod";
import { isStandardSchema, type TaskDefinition } from "./task.ts";

/** IR versions the builder emits. */
export type IrVersion = "orbit-ir/1" | "orbit-ir/2";

/** One step of a definition. */
export interface Step {
  id: string;
  [key: string]: unknown;
}

/** A workflow definition document. */
export interface WorkflowDocument {
  ir: IrVersion | string;
  name: string;
  version: string;
  steps: Step[];
  input_schema?: unknown;
  timeout_s?: number;
  signals?: Record<string, { schema?: unknown; [key: string]: unknown }>;
  queries?: Record<string, unknown>;
  handlers?: Record<string, Step[]>;
  [key: string]: unknown;
}

/** Retry policy of a task or HTTP step. */
export interface RetryPolicy {
  max_attempts?: number;
  initial_ms?: number;
  backoff?: number;
  max_ms?: number;
  non_retryable?: string[];
  [key: string]: unknown;
}

// deno-lint-ignore no-explicit-any
type AnyTask = TaskDefinition<any, any>;

/** The task a compensation runs when the workflow fails or is cancelled after this step. */
export interface CompensateOptions {
  /** Task name, or a task definition (its name, contract and language are used). */
  task: string | AnyTask;
  contract?: string;
  language?: string;
  input?: unknown;
  retry?: RetryPolicy;
  timeout_s?: number;
  [key: string]: unknown;
}

/** A worker-task step. */
export interface TaskStepOptions {
  /** Task name, or a task definition (its name, contract and language are used). */
  task: string | AnyTask;
  /** Contract version (required with a task name). */
  contract?: string;
  language?: string;
  input?: unknown;
  retry?: RetryPolicy;
  timeout_s?: number;
  compensate?: CompensateOptions;
  [key: string]: unknown;
}

/** A step calling an HTTP endpoint through the runtime's adapter (`--http-allow`). */
export interface HttpStepOptions {
  method?: string;
  url: string;
  headers?: Record<string, unknown>;
  body?: unknown;
  [key: string]: unknown;
}

/** A child workflow step. */
export interface ChildStepOptions {
  workflow: string;
  version?: string;
  input?: unknown;
  [key: string]: unknown;
}

/** A branch: a function that adds steps to the builder it gets, or a list of steps. */
export type Branch = ((b: StepsBuilder) => unknown) | Step[];

/**
 * `expr("$steps.validate.total")` is `"{% $steps.validate.total %}"`: a JSONata expression in
 * the IR's notation. A string already wrapped in `{% %}` is answered unchanged.
 */
export function expr(expression: string): string {
  const trimmed = expression.trim();
  if (trimmed.startsWith("{%") && trimmed.endsWith("%}")) return trimmed;
  return `{% ${trimmed} %}`;
}

const IR2_STEP_KEYS = [
  "sleep_s",
  "wait_signal",
  "http",
  "child",
  "parallel",
  "if",
  "assign",
  "continue_as_new",
];

interface Shared {
  ir2: boolean;
}

/** Adds steps. {@link WorkflowBuilder} and every branch builder are StepsBuilders. */
export class StepsBuilder {
  protected readonly _steps: Step[] = [];
  protected readonly _shared: Shared;

  constructor(shared: Shared = { ir2: false }) {
    this._shared = shared;
  }

  /** The steps added so far. */
  get steps(): readonly Step[] {
    return this._steps;
  }

  /** A worker task. */
  task(id: string, options: TaskStepOptions): this {
    const { task, contract, language, compensate, ...rest } = options;
    const step: Step = { id: checkId(id), ...taskRef(task, contract, language, id) };
    Object.assign(step, dropUndefined(rest));
    if (compensate) {
      const { task: ct, contract: cc, language: cl, ...crest } = compensate;
      step.compensate = { ...taskRef(ct, cc, cl, `${id}.compensate`), ...dropUndefined(crest) };
    }
    return this.#push(step, false);
  }

  /** Waits `seconds` (a durable timer). orbit-ir/2. */
  sleep(id: string, seconds: number | string, extra: Record<string, unknown> = {}): this {
    return this.#push({ id: checkId(id), sleep_s: seconds, ...extra }, true);
  }

  /** Waits for the signal `name` (at most `timeout_s`). orbit-ir/2. */
  waitSignal(
    id: string,
    name: string,
    options: { timeout_s?: number; [key: string]: unknown } = {},
  ): this {
    return this.#push({ id: checkId(id), wait_signal: name, ...dropUndefined(options) }, true);
  }

  /** Calls an HTTP endpoint. orbit-ir/2. */
  http(
    id: string,
    request: HttpStepOptions,
    options: { retry?: RetryPolicy; timeout_s?: number; [key: string]: unknown } = {},
  ): this {
    return this.#push(
      { id: checkId(id), http: dropUndefined(request), ...dropUndefined(options) },
      true,
    );
  }

  /** Runs a child workflow and waits for it. orbit-ir/2. */
  child(
    id: string,
    child: ChildStepOptions,
    options: { timeout_s?: number; [key: string]: unknown } = {},
  ): this {
    return this.#push(
      { id: checkId(id), child: dropUndefined(child), ...dropUndefined(options) },
      true,
    );
  }

  /** Runs branches at the same time and waits for all. orbit-ir/2. */
  parallel(id: string, branches: Branch[], extra: Record<string, unknown> = {}): this {
    if (!Array.isArray(branches) || branches.length === 0) {
      throw new TypeError(`parallel ${id}: give at least one branch`);
    }
    return this.#push(
      { id: checkId(id), parallel: branches.map((b) => this.#branch(b)), ...extra },
      true,
    );
  }

  /**
   * Branches on a condition (a JSONata expression; a string without `{% %}` is wrapped).
   * orbit-ir/2.
   */
  if(id: string, condition: string | boolean, then: Branch, otherwise?: Branch): this {
    const step: Step = {
      id: checkId(id),
      if: typeof condition === "string" ? expr(condition) : condition,
      then: this.#branch(then),
    };
    if (otherwise !== undefined) step.else = this.#branch(otherwise);
    return this.#push(step, true);
  }

  /** Sets workflow variables (`$vars`). orbit-ir/2. */
  assign(id: string, vars: Record<string, unknown>): this {
    return this.#push({ id: checkId(id), assign: vars }, true);
  }

  /** Ends this run and starts a new one of the same execution with `input`. orbit-ir/2. */
  continueAsNew(id: string, options: { input?: unknown; [key: string]: unknown } = {}): this {
    return this.#push({ id: checkId(id), continue_as_new: dropUndefined(options) }, true);
  }

  /** Ends the workflow with `value` as its output. */
  returns(value: unknown, id = "return"): this {
    return this.#push({ id: checkId(id), return: value }, false);
  }

  /** Adds a step written by hand (orbit-ir/2 when it is of a kind only ir/2 has). */
  step(step: Step): this {
    checkId(step.id);
    return this.#push({ ...step }, IR2_STEP_KEYS.some((k) => k in step));
  }

  #push(step: Step, ir2: boolean): this {
    if (ir2) this._shared.ir2 = true;
    this._steps.push(step);
    return this;
  }

  #branch(branch: Branch): Step[] {
    if (Array.isArray(branch)) {
      for (const s of branch) {
        if (IR2_STEP_KEYS.some((k) => k in s)) this._shared.ir2 = true;
      }
      return branch.map((s) => ({ ...s }));
    }
    const b = new StepsBuilder(this._shared);
    branch(b);
    return [...b._steps];
  }
}

/** Builds one workflow definition. Start one with {@link workflow}. */
export class WorkflowBuilder extends StepsBuilder {
  readonly name: string;
  readonly version: string;
  #inputSchema: unknown;
  #timeoutS: number | undefined;
  #forcedIr: IrVersion | undefined;
  readonly #signals: Record<string, { schema?: unknown; [key: string]: unknown }> = {};
  readonly #queries: Record<string, unknown> = {};
  readonly #handlers: Record<string, Step[]> = {};
  readonly #extra: Record<string, unknown> = {};

  constructor(name: string, version: string) {
    super({ ir2: false });
    if (!name) throw new TypeError("workflow: a name is required");
    if (!/^\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.+-]+)?$/.test(version ?? "")) {
      throw new TypeError(`workflow ${name}: version must be semver (like 1.0.0), not ${version}`);
    }
    this.name = name;
    this.version = version;
  }

  /**
   * The input's schema: a JSON Schema object, or a zod schema (converted to draft-07 JSON
   * Schema). Without an argument, nothing is declared.
   */
  input(schema?: unknown): this {
    this.#inputSchema = schema === undefined ? undefined : toJsonSchema(schema);
    return this;
  }

  /** The whole execution's timeout. orbit-ir/2. */
  timeout(seconds: number): this {
    this.#timeoutS = seconds;
    this._shared.ir2 = true;
    return this;
  }

  /** Declares a signal (its payload's schema: JSON Schema or zod). orbit-ir/2. */
  signal(name: string, options: { schema?: unknown; [key: string]: unknown } = {}): this {
    const { schema, ...rest } = options;
    this.#signals[name] = {
      ...(schema === undefined ? {} : { schema: toJsonSchema(schema) }),
      ...dropUndefined(rest),
    };
    this._shared.ir2 = true;
    return this;
  }

  /** Declares a query: a value (usually an expression) evaluated on the current state. orbit-ir/2. */
  query(name: string, value: unknown): this {
    this.#queries[name] = value;
    this._shared.ir2 = true;
    return this;
  }

  /**
   * Steps run when the signal `name` arrives (`$signal` is its payload). Declares the signal
   * if it is not declared yet. orbit-ir/2.
   */
  handler(name: string, branch: Branch): this {
    if (!(name in this.#signals)) this.#signals[name] = {};
    const b = new StepsBuilder(this._shared);
    if (Array.isArray(branch)) branch.forEach((s) => b.step(s));
    else branch(b);
    this.#handlers[name] = [...b.steps];
    this._shared.ir2 = true;
    return this;
  }

  /** Sets another top-level key of the document (e.g. `description`). */
  set(key: string, value: unknown): this {
    this.#extra[key] = value;
    return this;
  }

  /** Emits `orbit-ir/2` even when no ir/2 feature is used (or force `orbit-ir/1`). */
  ir(version: IrVersion): this {
    this.#forcedIr = version;
    return this;
  }

  /** The IR version the document will have. */
  get irVersion(): IrVersion {
    return this.#forcedIr ?? (this._shared.ir2 ? "orbit-ir/2" : "orbit-ir/1");
  }

  /** Emits the document (a fresh copy each time). Throws on duplicate step ids. */
  build(): WorkflowDocument {
    const ir = this.irVersion;
    if (ir === "orbit-ir/1" && this._shared.ir2) {
      throw new TypeError(
        `workflow ${this.name}: orbit-ir/1 was forced but ir/2 features are used`,
      );
    }
    const doc: WorkflowDocument = { ir, name: this.name, version: this.version, steps: [] };
    if (this.#inputSchema !== undefined) doc.input_schema = this.#inputSchema;
    if (this.#timeoutS !== undefined) doc.timeout_s = this.#timeoutS;
    if (Object.keys(this.#signals).length > 0) doc.signals = this.#signals;
    if (Object.keys(this.#queries).length > 0) doc.queries = this.#queries;
    doc.steps = this._steps;
    if (Object.keys(this.#handlers).length > 0) doc.handlers = this.#handlers;
    Object.assign(doc, this.#extra);
    checkUniqueIds(doc);
    return JSON.parse(JSON.stringify(doc));
  }

  /** `JSON.stringify(builder)` gives the document. */
  toJSON(): WorkflowDocument {
    return this.build();
  }
}

/** Starts building the definition `name` at semver `version`. */
export function workflow(name: string, version: string): WorkflowBuilder {
  return new WorkflowBuilder(name, version);
}

function checkId(id: unknown): string {
  if (typeof id !== "string" || id.length === 0) {
    throw new TypeError(`a step id must be a non-empty string, not ${JSON.stringify(id)}`);
  }
  return id;
}

function taskRef(
  task: string | AnyTask,
  contract: string | undefined,
  language: string | undefined,
  where: string,
): Record<string, unknown> {
  if (typeof task === "string") {
    if (!contract) throw new TypeError(`step ${where}: a contract version is required`);
    return { task, contract, ...(language ? { language } : {}) };
  }
  const lang = language ?? task.language;
  return {
    task: task.name,
    contract: contract ?? task.contract,
    ...(lang ? { language: lang } : {}),
  };
}

function dropUndefined<T extends Record<string, unknown>>(obj: T): T {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(obj)) if (v !== undefined) out[k] = v;
  return out as T;
}

/** A JSON Schema from a zod schema (draft-07, without `$schema`), or the object as given. */
export function toJsonSchema(schema: unknown): unknown {
  if (isStandardSchema(schema)) {
    if (!("_zod" in (schema as object))) {
      throw new TypeError("only zod schemas can be converted to JSON Schema; pass JSON Schema");
    }
    const json = z.toJSONSchema(schema as unknown as z.ZodType, {
      target: "draft-07",
      io: "input",
    }) as Record<
      string,
      unknown
    >;
    delete json.$schema;
    return json;
  }
  return schema;
}

function checkUniqueIds(doc: WorkflowDocument): void {
  const seen = new Map<string, string>();
  const visit = (steps: unknown, path: string) => {
    if (!Array.isArray(steps)) return;
    steps.forEach((step, i) => {
      if (typeof step !== "object" || step === null) return;
      const s = step as Step;
      const here = `${path}[${i}]`;
      const prev = seen.get(s.id);
      if (prev !== undefined) {
        throw new TypeError(
          `workflow ${doc.name}: step id "${s.id}" is used twice (${prev} and ${here})`,
        );
      }
      seen.set(s.id, here);
      if (Array.isArray(s.parallel)) {
        s.parallel.forEach((branch, j) => visit(branch, `${here}.parallel[${j}]`));
      }
      visit(s.then, `${here}.then`);
      visit(s.else, `${here}.else`);
    });
  };
  visit(doc.steps, "$.steps");
  for (const [name, steps] of Object.entries(doc.handlers ?? {})) {
    visit(steps, `$.handlers.${name}`);
  }
}
