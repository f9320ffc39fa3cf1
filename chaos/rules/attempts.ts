/**
 * Rules 7 and 8, the history against the attempts the workers logged: `result-matches-attempt`,
 * `attempt-dispatched`, `idempotency-key`, `redelivery-flag`.
 */
import type { Attempt, CheckInput } from "../check_input.ts";
import type { Add, Dispatch, ExecById } from "./common.ts";

export function checkAttempts(
  input: CheckInput,
  add: Add,
  execById: ExecById,
  dispatched: Map<string, Dispatch>,
): { redeliveries: number; unrecordedClaims: number } {
  const { snapshot } = input;
  // 7. Every StepSucceeded of a worker task matches a logged attempt.
  const attemptByToken = new Map<string, Attempt[]>();
  for (const a of input.attempts) {
    let l = attemptByToken.get(a.token);
    if (!l) attemptByToken.set(a.token, l = []);
    l.push(a);
  }
  for (const ex of snapshot.executions) {
    const events = snapshot.events.get(ex.execution_id) ?? [];
    const keys = new Map<string, string>();
    const kinds = new Map<string, string>();
    for (const e of events) {
      if (e.type === "StepScheduled") {
        keys.set(`${e.run_id}/${e.step}`, e.idempotency_key);
        kinds.set(`${e.run_id}/${e.step}`, e.kind ?? "task");
      }
      if (e.type !== "StepSucceeded" || !e.token) continue;
      if (kinds.get(`${e.run_id}/${e.step}`) !== "task") continue;
      const logged = attemptByToken.get(e.token) ?? [];
      const match = logged.find((a) =>
        a.execution_id === ex.execution_id && a.step === e.step && a.attempt === e.attempt &&
        a.idempotency_key === keys.get(`${e.run_id}/${e.step}`)
      );
      if (!match) {
        add(
          "result-matches-attempt",
          ex.execution_id,
          `StepSucceeded seq ${e.seq} (step ${e.step}, attempt ${e.attempt}, token ${e.token}) ` +
            `matches no attempt a worker logged (${logged.length} with that token)`,
          e.time_ms,
        );
      }
    }
  }
  // 8. Every logged attempt was dispatched, with the step's key and the right redelivery flag.
  let redeliveries = 0;
  let unrecordedClaims = 0;
  const scheduledKeys = new Map<string, string>();
  for (const [id, events] of snapshot.events) {
    for (const e of events) {
      if (e.type === "StepScheduled") {
        scheduledKeys.set(`${id}/${e.step}/${e.attempt}`, e.idempotency_key);
      }
    }
  }
  for (const a of input.attempts) {
    if (a.redelivery) redeliveries++;
    const d = dispatched.get(a.token);
    if (!d) {
      // An execution outside this run (another tag) is not ours to judge.
      if (!execById.has(a.execution_id)) continue;
      const key = scheduledKeys.get(`${a.execution_id}/${a.step}/${a.attempt}`);
      if (input.mode === "shared" && key !== undefined) {
        // Shared mode hands a task claimed for another node's execution to the worker at
        // once; the owner records the dispatch only if the step still waits for that offer
        // (reference page, "Task queue"). An offer the owner refused is never in the history
        // and its result is never applied (a result by an unknown token is an event-order
        // violation above); its key must still be the step's.
        unrecordedClaims++;
        if (key !== a.idempotency_key) {
          add(
            "idempotency-key",
            a.execution_id,
            `token ${a.token}: worker saw key ${a.idempotency_key}, the step's key is ${key}`,
            a.at_ms,
          );
        }
        continue;
      }
      add(
        "attempt-dispatched",
        a.execution_id,
        `attempt token ${a.token} (step ${a.step}) was executed by ${a.worker} but no StepDispatched records it`,
        a.at_ms,
      );
      continue;
    }
    if (d.step !== a.step || d.attempt !== a.attempt) {
      add(
        "attempt-dispatched",
        a.execution_id,
        `token ${a.token}: worker ran step ${a.step} attempt ${a.attempt}, history dispatched step ${d.step} attempt ${d.attempt}`,
        a.at_ms,
      );
    }
    if (d.key !== a.idempotency_key) {
      add(
        "idempotency-key",
        a.execution_id,
        `token ${a.token}: worker saw key ${a.idempotency_key}, the step's key is ${d.key}`,
        a.at_ms,
      );
    }
    if (a.redelivery !== d.redelivery || a.redelivery !== d.uncertainBefore) {
      add(
        "redelivery-flag",
        a.execution_id,
        `token ${a.token}: worker saw redelivery ${a.redelivery}, history dispatched it with ${d.redelivery} (an uncertain attempt before: ${d.uncertainBefore})`,
        a.at_ms,
      );
    }
  }
  return { redeliveries, unrecordedClaims };
}
