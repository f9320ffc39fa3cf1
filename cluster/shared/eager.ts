/**
 * Shared mode's eager dispatch: the step a worker's result makes ready is dispatched in the
 * result's own append, as on one server, to the reporting worker's session, or (a result
 * forwarded from another server) preferably to the owner's own workers.
 */
import type { Command } from "../../lib/engine/decide.ts";
import { type ExecutionState, newlyQueued, type StepState } from "../../lib/engine/state.ts";
import type { StartOffer } from "../../lib/executions/types.ts";
import {
  dispatchTo,
  type EagerSession,
  payload,
  serves,
  type TaskPayload,
} from "../../lib/workers/dispatcher.ts";

export interface EagerDispatch {
  follow: (state: ExecutionState) => Command | null;
  tasks: (r: { followed: boolean; state: ExecutionState | null }) => TaskPayload[];
  /** The append failed: a poll set aside for it waits on. */
  failed: () => void;
}

export interface EagerDeps {
  stateOf(id: string): ExecutionState | undefined;
  newId(): string;
  /** A poll waiting on this server for a step of `state` that it serves (Workers.#offerReady). */
  offerReady(state: ExecutionState): StartOffer | null;
  /** Whether a session that serves the step made a request through this server lately. */
  servedHere(st: StepState): boolean;
}

/**
 * Eager dispatch, as on one server: the first step that a result makes ready and that the
 * session serves is dispatched to it in the same append (its task row is written claimed).
 * Only a step that was not queued before: a queued row may be claimed by another server at
 * this very moment. Used for results reported here and for results forwarded to this owner.
 *
 * A forwarded result (`forwarded`) keeps the step here when workers that serve it talk to
 * this server: a poll waiting here gets it in the same append (as a start's first task), or
 * else its row is queued for this server's next poll; the reporting worker's slot takes its
 * next task where it reports (its own server's queue, then a claim). Sent back with the reply,
 * the step would go to the worker that reports through the other server, and so would every
 * later step of the execution, each result forwarded again (issue 39: 1.5 forwards per order of
 * six steps with three shared servers behind the proxy). Only when no worker serving it talks
 * to this server does the reporting worker get the step, as before.
 */
export function eagerDispatch(
  deps: EagerDeps,
  id: string,
  s: EagerSession,
  forwarded: boolean,
): EagerDispatch {
  let taken: { step: string; token: string } | null = null;
  let offer: StartOffer | null = null;
  return {
    follow: (state) => {
      taken = null;
      offer?.release();
      offer = forwarded ? deps.offerReady(state) : null;
      if (offer) return offer.command;
      const st = newlyQueued(deps.stateOf(id), state).find((st) => serves(s, st));
      if (!st || (forwarded && deps.servedHere(st))) return null;
      const command = dispatchTo(state.execution_id, st.id, s, deps.newId);
      taken = { step: st.id, token: command.token };
      return command;
    },
    tasks: (r) => {
      const o = offer as StartOffer | null;
      offer = null;
      if (o) {
        if (r.followed && r.state) o.deliver(r.state);
        else o.release();
        return [];
      }
      const t = taken as { step: string; token: string } | null;
      return r.followed && r.state && t ? [payload(r.state, t.step, t.token)] : [];
    },
    failed: () => {
      (offer as StartOffer | null)?.release();
      offer = null;
    },
  };
}
