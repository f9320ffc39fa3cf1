/** Worker role, the executor: runs a handler for one attempt (context, cancellation, deadline). */

import { TaskError } from "../errors.ts";
import { type TaskContext, validate } from "../task.ts";
import {
  type AnyTask,
  errorMessage,
  type Inflight,
  type Outcome,
  type TaskFailure,
  type WorkerCore,
} from "./common.ts";

/** The tasks a worker serves, by name and contract. */
export type TaskTable = ReadonlyMap<string, AnyTask>;

export function taskKey(name: string, contract: string): string {
  return `${name}\u0000${contract}`;
}

/** Aborts an attempt's signal (once), remembering why. */
export function abort(entry: Inflight, why: "cancel" | "deadline" | "shutdown"): void {
  if (entry.controller.signal.aborted) return;
  entry.abortedBy = why;
  const message = why === "cancel"
    ? "the ORBIT runtime cancelled this attempt"
    : why === "deadline"
    ? "the attempt's deadline passed"
    : "the worker is shutting down";
  const reason = new Error(message);
  reason.name = "AbortError";
  entry.controller.abort(reason);
}

/** Runs the attempt's handler; never rejects for the handler's sake (its error is the outcome). */
export async function execute(
  core: WorkerCore,
  tasks: TaskTable,
  entry: Inflight,
): Promise<Outcome> {
  const { task } = entry;
  const def = tasks.get(taskKey(task.task, task.contract));
  core.logger.info("executing", {
    execution_id: task.execution_id,
    step: task.step,
    attempt: task.attempt,
    task: task.task,
    redelivery: task.redelivery,
  });
  if (!def) {
    return {
      kind: "fail",
      error: {
        code: "UNKNOWN_TASK",
        message:
          `worker ${core.workerId} does not serve task ${task.task} contract ${task.contract}`,
        retryable: true,
        details: {},
      },
    };
  }

  const input = await validate(def.input, task.input);
  if (!input.ok) {
    return {
      kind: "fail",
      error: {
        code: "INVALID_INPUT",
        message: `invalid input for ${def.name}: ${input.message}`,
        retryable: false,
        details: { issues: input.issues },
      },
    };
  }

  const deadlineMs = deadlineOf(task.deadline_ms);
  let timer: ReturnType<typeof setTimeout> | undefined;
  if (deadlineMs !== undefined) {
    const delay = deadlineMs - Date.now();
    // A deadline far in the future needs no timer (and setTimeout overflows past ~24 days).
    if (delay < 2 ** 31 - 1) {
      timer = setTimeout(() => abort(entry, "deadline"), Math.max(0, delay));
    }
  }
  const ctx: TaskContext = {
    token: task.token,
    executionId: task.execution_id,
    step: task.step,
    attempt: task.attempt,
    idempotencyKey: task.idempotency_key,
    redelivery: Boolean(task.redelivery),
    deadlineMs,
    task: task.task,
    contract: task.contract,
    signal: entry.controller.signal,
    logger: core.logger,
  };

  let raw: unknown;
  try {
    raw = await def.handler(input.value, ctx);
  } catch (err) {
    if (err instanceof TaskError) return { kind: "fail", error: failureFrom(err) };
    if (entry.abortedBy === "cancel") {
      return {
        kind: "fail",
        error: {
          code: "CANCELLED",
          message: `task cancelled by the ORBIT runtime: ${errorMessage(err)}`,
          retryable: true,
          details: {},
        },
      };
    }
    if (entry.abortedBy === "deadline") {
      return {
        kind: "fail",
        error: {
          code: "DEADLINE_EXCEEDED",
          message: `the attempt's deadline passed: ${errorMessage(err)}`,
          retryable: true,
          details: {},
        },
      };
    }
    return { kind: "fail", error: failureFrom(err) };
  } finally {
    if (timer !== undefined) clearTimeout(timer);
  }

  const output = await validate(def.output, raw);
  if (!output.ok) {
    return {
      kind: "fail",
      error: {
        code: "INVALID_OUTPUT",
        message: `invalid output of ${def.name}: ${output.message}`,
        retryable: false,
        details: { issues: output.issues },
      },
    };
  }
  return { kind: "complete", output: output.value === undefined ? null : output.value };
}

/** `deadline_ms` is epoch milliseconds; small values are read as a duration from now. */
function deadlineOf(value: unknown): number | undefined {
  if (typeof value !== "number" || !Number.isFinite(value) || value <= 0) return undefined;
  return value > 1e11 ? value : Date.now() + value;
}

export function failureFrom(err: unknown): TaskFailure {
  if (err instanceof TaskError) {
    return {
      code: err.code,
      message: err.message,
      retryable: err.retryable,
      details: err.details === undefined ? {} : err.details,
    };
  }
  const details: Record<string, unknown> = {};
  if (err instanceof Error) {
    details.type = err.name;
    if (err.stack) details.stack = err.stack.split("\n").slice(0, 12).join("\n");
  } else {
    details.type = typeof err;
  }
  return { code: "TASK_ERROR", message: errorMessage(err), retryable: true, details };
}
