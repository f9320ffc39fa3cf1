/**
 * Typed task contracts: a task's name, contract version, input and output schemas and handler
 * in one value that a {@link Worker} serves and a workflow builder can reference.
 *
 * Schemas are [Standard Schema](https://standardschema.dev) objects: zod 4 schemas (`z.object(…)`)
 * are, and so are valibot's and arktype's.
 *
 * @module
 */

import { OrbitValidationError, type ValidationIssue } from "./errors.ts";
import type { Logger } from "./logger.ts";

/** The Standard Schema interface (v1) that zod 4 schemas implement. */
export interface StandardSchemaV1<Input = unknown, Output = Input> {
  readonly "~standard": {
    readonly version: 1;
    readonly vendor: string;
    readonly validate: (
      value: unknown,
    ) => StandardResult<Output> | Promise<StandardResult<Output>>;
    readonly types?: { readonly input: Input; readonly output: Output } | undefined;
  };
}

type StandardResult<Output> =
  | { readonly value: Output; readonly issues?: undefined }
  | { readonly issues: ReadonlyArray<StandardIssue> };

interface StandardIssue {
  readonly message: string;
  readonly path?: ReadonlyArray<PropertyKey | { readonly key: PropertyKey }> | undefined;
}

/** What a schema accepts. */
export type InferInput<S> = S extends StandardSchemaV1<infer I, unknown> ? I : unknown;
/** What a schema produces. */
export type InferOutput<S> = S extends StandardSchemaV1<unknown, infer O> ? O : unknown;

/** What a handler learns about the attempt it runs. */
export interface TaskContext {
  /** The attempt's task token (`<execution id>/<uuid>`). */
  token: string;
  executionId: string;
  /** The step id in the workflow definition. */
  step: string;
  /** Attempt number, from 1. */
  attempt: number;
  /** The same for every attempt and redelivery of one step execution: use it for side effects. */
  idempotencyKey: string;
  /** True when the attempt was handed out again after its worker went silent. */
  redelivery: boolean;
  /** When the runtime stops waiting for this attempt (epoch milliseconds), if it said. */
  deadlineMs: number | undefined;
  /** The task name and contract version being served. */
  task: string;
  contract: string;
  /** Aborted when the runtime cancels the attempt, its deadline passes, or the worker gives up on it. */
  signal: AbortSignal;
  /** The worker's logger. */
  logger: Logger;
}

/** A handler: gets the (validated) input, answers the output. */
export type TaskHandler<I, O> = (input: I, ctx: TaskContext) => O | Promise<O>;

/** A task a worker can serve. */
export interface TaskDefinition<I = unknown, O = unknown> {
  readonly name: string;
  readonly contract: string;
  /** Pin the task to workers of one language (`typescript`, `python`, `any`, …). */
  readonly language?: string;
  readonly input?: StandardSchemaV1;
  readonly output?: StandardSchemaV1;
  readonly handler: TaskHandler<I, O>;
}

/** What {@link defineTask} takes. */
export interface DefineTaskOptions<
  IS extends StandardSchemaV1 | undefined,
  OS extends StandardSchemaV1 | undefined,
> {
  name: string;
  /** Contract version, e.g. `"1"`. */
  contract: string;
  language?: string;
  /** Validates the input before the handler runs (failure: `INVALID_INPUT`, not retryable). */
  input?: IS;
  /** Validates the handler's answer (failure: `INVALID_OUTPUT`, not retryable). */
  output?: OS;
  handler: TaskHandler<
    // deno-lint-ignore no-explicit-any
    IS extends StandardSchemaV1 ? InferOutput<IS> : any,
    OS extends StandardSchemaV1 ? InferInput<OS> : unknown
  >;
}

/** A typed task definition returned by {@link defineTask}. */
export interface TypedTask<I, O, RawI = I, RawO = O> extends TaskDefinition<I, RawO> {
  /** Validates a value as this task's input (the client side can call it before starting). */
  parseInput(value: unknown): Promise<I>;
  /** Validates a value as this task's output. */
  parseOutput(value: unknown): Promise<O>;
  /** Phantom types: `typeof task.$types.input`. */
  readonly $types: { input: RawI; output: O };
}

/**
 * Defines a task with typed, validated input and output:
 *
 * ```ts
 * const charge = defineTask({
 *   name: "payments.charge", contract: "1",
 *   input: z.object({ amount: z.number().positive() }),
 *   output: z.object({ charge_id: z.string() }),
 *   handler: async ({ amount }, ctx) => ({ charge_id: await pay(amount, ctx.idempotencyKey) }),
 * });
 * ```
 */
export function defineTask<
  IS extends StandardSchemaV1 | undefined = undefined,
  OS extends StandardSchemaV1 | undefined = undefined,
>(
  options: DefineTaskOptions<IS, OS>,
): TypedTask<
  // deno-lint-ignore no-explicit-any
  IS extends StandardSchemaV1 ? InferOutput<IS> : any,
  OS extends StandardSchemaV1 ? InferOutput<OS> : unknown,
  IS extends StandardSchemaV1 ? InferInput<IS> : unknown,
  OS extends StandardSchemaV1 ? InferInput<OS> : unknown
> {
  if (!options.name) throw new TypeError("defineTask: `name` is required");
  if (typeof options.contract !== "string" || !options.contract) {
    throw new TypeError(`defineTask(${options.name}): \`contract\` must be a non-empty string`);
  }
  if (typeof options.handler !== "function") {
    throw new TypeError(`defineTask(${options.name}): \`handler\` must be a function`);
  }
  const task = {
    name: options.name,
    contract: options.contract,
    ...(options.language ? { language: options.language } : {}),
    input: options.input,
    output: options.output,
    handler: options.handler,
    parseInput: (value: unknown) => parseWith(options.input, value, `${options.name} input`),
    parseOutput: (value: unknown) => parseWith(options.output, value, `${options.name} output`),
    $types: undefined as never,
  };
  // deno-lint-ignore no-explicit-any
  return task as any;
}

/** Result of {@link validate}. */
export type ValidationResult<T> =
  | { ok: true; value: T }
  | { ok: false; issues: ValidationIssue[]; message: string };

/** Validates `value` with a Standard Schema (no schema: accepted as is). */
export async function validate<S extends StandardSchemaV1 | undefined>(
  schema: S,
  value: unknown,
): Promise<ValidationResult<S extends StandardSchemaV1 ? InferOutput<S> : unknown>> {
  if (!schema) return { ok: true, value: value as never };
  let result = schema["~standard"].validate(value);
  if (result instanceof Promise) result = await result;
  if (result.issues) {
    const issues = result.issues.map((issue) => ({
      path: issuePath(issue.path),
      message: issue.message,
    }));
    const message = issues
      .map((i) => (i.path ? `${i.path}: ${i.message}` : i.message))
      .join("; ");
    return { ok: false, issues, message };
  }
  return { ok: true, value: result.value as never };
}

/** Validates `value`, throwing an {@link OrbitValidationError} when it does not fit. */
export async function parseWith<S extends StandardSchemaV1 | undefined>(
  schema: S,
  value: unknown,
  what = "value",
): Promise<S extends StandardSchemaV1 ? InferOutput<S> : unknown> {
  const result = await validate(schema, value);
  if (!result.ok) {
    throw new OrbitValidationError(`invalid ${what}: ${result.message}`, result.issues);
  }
  return result.value;
}

function issuePath(path: StandardIssue["path"]): string {
  if (!path || path.length === 0) return "";
  return path
    .map((p) => (typeof p === "object" && p !== null && "key" in p ? p.key : p))
    .map((k) => String(k))
    .join(".");
}

/** Whether a value looks like a Standard Schema. */
export function isStandardSchema(value: unknown): value is StandardSchemaV1 {
  return typeof value === "object" && value !== null && "~standard" in value;
}
