/**
 * ORBIT TypeScript SDK for Deno and Node 20: a {@link Worker} that serves tasks, typed task
 * contracts ({@link defineTask}), a {@link Client} for the HTTP API, and a builder that emits
 * workflow definitions ({@link workflow}).
 *
 * ```ts
 * import { Client, defineTask, Worker, workflow, expr, z } from "./sdk/typescript/mod.ts";
 * ```
 *
 * @module
 */

export {
  isRetryable,
  isUnknownSession,
  OrbitApiError,
  OrbitConnectionError,
  OrbitError,
  OrbitExecutionError,
  OrbitValidationError,
  TaskError,
  type TaskErrorOptions,
  type ValidationIssue,
} from "./errors.ts";
export {
  Backoff,
  type BackoffOptions,
  type ConnectionOptions,
  type RequestOptions,
  Transport,
} from "./http.ts";
export {
  consoleLogger,
  type ConsoleLoggerOptions,
  type LogFields,
  type Logger,
  type LogLevel,
  silentLogger,
} from "./logger.ts";
export {
  defineTask,
  type DefineTaskOptions,
  type InferInput,
  type InferOutput,
  isStandardSchema,
  parseWith,
  type StandardSchemaV1,
  type TaskContext,
  type TaskDefinition,
  type TaskHandler,
  type TypedTask,
  validate,
  type ValidationResult,
} from "./task.ts";
export {
  type PolledTask,
  type StopOptions,
  type TaskFailure,
  Worker,
  type WorkerOptions,
} from "./worker.ts";
export {
  Client,
  type ClientOptions,
  type Execution,
  type ExecutionPage,
  type ExecutionStatus,
  type HistoryEvent,
  type HistoryPage,
  isTerminal,
  type ListOptions,
  type ResultOptions,
  type StartOptions,
  TERMINAL_STATUSES,
  type WaitOptions,
} from "./client.ts";
export {
  type Branch,
  type ChildStepOptions,
  type CompensateOptions,
  expr,
  type HttpStepOptions,
  type IrVersion,
  type RetryPolicy,
  type Step,
  StepsBuilder,
  type TaskStepOptions,
  toJsonSchema,
  workflow,
  WorkflowBuilder,
  type WorkflowDocument,
} from "./workflow.ts";

/** zod 4, re-exported so that Node users of the bundle need not install it. */
export { z } from "zod";
