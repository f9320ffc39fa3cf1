/**
 * One dispatch of a queued task, as the dispatcher (./dispatcher.ts) records it, and the SPEC §4
 * task payload a worker receives for a dispatched step.
 */
import type { ExecutionState } from "../engine/state.ts";
import type { Executions } from "../executions/executions.ts";
import { log } from "../log.ts";
import { TaskTakenError } from "../store/store.ts";
import type { QueuedTask } from "./queue.ts";
import type { Session, TaskPayload } from "./sessions.ts";

/**
 * Dispatches queued tasks to `s`, each in an append of its own (they share commits). A task
 * whose step no longer waits yields nothing; one whose dispatch failed is given to `requeue`
 * (the execution is re-read from its history first, and a dispatch that landed after all is
 * redelivered); in shared mode, one whose take the commit refused (TaskTakenError: another
 * server claimed the row first, or an older row of the task waits) yields nothing and goes to
 * `taken`: the claim statement that follows takes the older rows; the step, while it is still
 * queued here, must stay in the queue (see TAKEN_HOLD_MS).
 */
export async function dispatchQueued(
  executions: Pick<Executions, "command">,
  s: Pick<Session, "worker_id" | "session_id">,
  picked: readonly QueuedTask[],
  newId: () => string,
  requeue: (q: QueuedTask) => void,
  taken: (q: QueuedTask) => void,
): Promise<TaskPayload[]> {
  const out = await Promise.all(picked.map(async (q): Promise<TaskPayload | null> => {
    const token = `${q.execution_id}/${newId()}`;
    try {
      const r = await executions.command(q.execution_id, {
        type: "dispatch",
        step: q.step,
        token,
        worker_id: s.worker_id,
        worker_session: s.session_id,
      });
      return r?.accepted ? payload(r.state, q.step, token) : null;
    } catch (e) {
      if (e instanceof TaskTakenError) {
        taken(q);
        return null;
      }
      log.engine.error("dispatch failed; task stays queued", {
        execution_id: q.execution_id,
        step: q.step,
        error: (e as Error).message,
      });
      requeue(q);
      return null;
    }
  }));
  return out.filter((t): t is TaskPayload => t !== null);
}

/** The SPEC §4 task payload of a dispatched step. */
export function payload(state: ExecutionState, step: string, token: string): TaskPayload {
  const st = state.steps[step]!;
  return {
    token,
    execution_id: state.execution_id,
    step,
    attempt: st.attempt,
    task: st.task,
    contract: st.contract,
    input: st.input,
    idempotency_key: st.idempotency_key,
    redelivery: st.redelivery,
    deadline_ms: st.deadline_ms,
  };
}
