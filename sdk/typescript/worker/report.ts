/** Worker role, the completer: reports an attempt's result (complete/fail), retrying delivery. */

import { isRetryable, OrbitApiError, OrbitConnectionError } from "../errors.ts";
import { Backoff, formatSeconds, sleep, type Transport } from "../http.ts";
import { describe, type Outcome, type PolledTask, type WorkerCore } from "./common.ts";
import { Rerouted } from "./nodes.ts";
import type { Session } from "./session.ts";

/**
 * Reports an attempt's result, retrying until it is delivered (or the worker gives up).
 * With `slot` (a held concurrency slot), the first request also asks for one next task
 * (`session_id`, `max_tasks: 1`), which the runtime may hand out in its answer; `slot` is
 * called to give the slot up before any retry. Returns the tasks the answer carried. The first
 * request goes on `transport` (the slot's connection, to the server that handed the task out);
 * retries go to the configured address, at once when `direct` (that server's own advertised
 * address did not answer: it left or died; the configured address reaches a live server). `cut`
 * ends that first request when the server leaves the cluster's live list while it waits (a
 * paused server holds it until the request's timeout otherwise); the caller aborts it when
 * `core.abandon` aborts, too.
 */
export async function deliver(
  core: WorkerCore,
  session: Session,
  transport: Transport,
  task: PolledTask,
  outcome: Outcome,
  slot: (() => void) | null,
  direct = false,
  cut?: AbortSignal,
): Promise<PolledTask[]> {
  let current = outcome;
  let substituted = false;
  const backoff = new Backoff(core.backoff);
  const abandon = core.abandon;
  let via = transport;
  for (;;) {
    const path = current.kind === "complete" ? "/v1/tasks/complete" : "/v1/tasks/fail";
    const take = slot && session.id && !core.stopping.aborted
      ? { session_id: session.id, max_tasks: 1 }
      : {};
    const body = current.kind === "complete"
      ? { token: task.token, output: current.output, ...take }
      : { token: task.token, error: current.error, ...take };
    try {
      const first = via !== core.transport;
      const res = await via.post<{ accepted?: boolean; tasks?: PolledTask[] } | null>(
        path,
        body,
        {
          // `cut` is aborted with `abandon` too (the caller's listener).
          signal: first && direct && cut ? cut : abandon,
          timeoutMs: core.requestTimeoutMs,
        },
      );
      const next = "session_id" in take && Array.isArray(res?.tasks) ? res.tasks : [];
      if (res && res.accepted === false) {
        core.logger.debug(
          `result not accepted (the step already has one) token=${task.token} step=${task.step}`,
        );
      } else if (current.kind === "fail") {
        core.logger.info("task failed", {
          execution_id: task.execution_id,
          step: task.step,
          attempt: task.attempt,
          code: current.error.code,
        });
      }
      return next;
    } catch (err) {
      if (abandon.aborted) {
        core.logger.warn(`giving up reporting the result of ${task.token} (worker stopped)`);
        return [];
      }
      // Retries do not hold a slot: the answer may take long while the runtime is away.
      slot?.();
      slot = null;
      const first = via !== core.transport;
      via = core.transport;
      if (first && direct && (err instanceof OrbitConnectionError || err instanceof Rerouted)) {
        // A node's own address did not answer (it left or died): the configured address
        // reaches a live server at once, which hands the result to the execution's new owner
        // before that owner redelivers the attempt.
        continue;
      }
      if (isRetryable(err)) {
        const delay = backoff.next();
        core.logger.warn(
          `report result failed: ${describe(err, core.server)}; retrying in ${
            formatSeconds(delay)
          }`,
        );
        try {
          await sleep(delay, abandon);
        } catch {
          core.logger.warn(`giving up reporting the result of ${task.token} (worker stopped)`);
          return [];
        }
        continue;
      }
      // A result the runtime refuses (400, 413, 422), or that is not JSON (a BigInt, a cycle:
      // JSON.stringify throws a TypeError before anything is sent), would be dropped, and its
      // attempt redelivered every session timeout for ever: it is reported as a small failure
      // instead, once (the retry policy then decides). Only if that is refused too is it dropped.
      const refused = err instanceof OrbitApiError &&
        (err.status === 400 || err.status === 413 || err.status === 422);
      const notJson = err instanceof TypeError;
      if (!substituted && (refused || notJson)) {
        const what = current.kind === "complete" ? "output" : "failure";
        const reason = refused
          ? `the runtime refused the ${what}: ${(err as OrbitApiError).code}: ${
            (err as OrbitApiError).message
          }`
          : `the ${what} is not JSON: ${(err as Error).message}`;
        core.logger.error(
          `${reason} (${task.token}); reporting a failure instead`,
        );
        current = {
          kind: "fail",
          error: {
            code: notJson
              ? "RESULT_NOT_JSON"
              : current.kind === "complete"
              ? "OUTPUT_REJECTED"
              : "RESULT_REJECTED",
            message: reason.length > 2000 ? `${reason.slice(0, 1997)}...` : reason,
            retryable: false,
            details: {},
          },
        };
        substituted = true;
        continue;
      }
      core.logger.error(
        `report result failed: ${describe(err, core.server)}; dropping the result of ${task.token}`,
      );
      return [];
    }
  }
}
