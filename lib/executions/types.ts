/**
 * The engine shell's contracts with the rest of the server (lib/executions/executions.ts): the
 * observers that hear of installed states (the worker service, children, http steps, pending),
 * shared mode's ownership and forwarding hooks (implemented in cluster/shared/), and the small
 * pure helpers that name executions and rows. No I/O.
 */
import type { Command } from "../engine/decide.ts";
import type { HistoryEvent } from "../engine/events.ts";
import type { ExecutionState } from "../engine/state.ts";
import type { ExecutionRow, WakingRow } from "../store/store.ts";
import type { EagerSession, TaskPayload } from "../workers/sessions.ts";

export interface Clock {
  now(): number;
  newId(): string;
}

export const EXECUTION_ID_RE = /^[A-Za-z0-9][A-Za-z0-9_.:@+=-]{0,199}$/;

/** What the worker service needs to hear after a state change was committed and installed. */
export interface ExecutionObserver {
  installed(
    prev: ExecutionState | null,
    next: ExecutionState,
    events: readonly HistoryEvent[],
  ): void;
  /** Shared mode: the execution left this node's memory (another node owns it now). */
  dropped?(last: ExecutionState): void;
  /**
   * A new execution's first task, for a poll waiting here: the dispatch goes into the start's
   * own commit. The poll is set aside until `deliver` (after the commit) or `release`.
   */
  offerFirst?(state: ExecutionState): StartOffer | null;
}

/** A waiting poll set aside for a new execution's first task (see offerFirst). */
export interface StartOffer {
  command: Command;
  /** The start committed with the dispatch: the poll answers the task. */
  deliver(state: ExecutionState): void;
  /** The dispatch did not happen: the poll waits on. */
  release(): void;
}

/**
 * Shared mode (cluster/shared/ownership.ts): this node's ownership of the executions it holds. Every
 * append carries the epoch held for its execution and the queue rows it changes; an append
 * fenced because another node took the execution over drops it from memory.
 *
 * Ownership is per process: an epoch read from orbit_owners is adopted only from a row that
 * names this node id and this process's `instance`. A process replaced under its node id (the
 * new one bumped the epochs) would otherwise read its successor's epoch as its own and write
 * beside it until its heartbeat told it.
 */
export interface Ownership {
  readonly nodeId: string;
  /** This process (orbit_nodes.instance): the one that obtained the epochs it holds. */
  readonly instance: string;
  /** The epoch held for an execution (children carry their root's); undefined: none. */
  epochOf(id: string): number | undefined;
  /** Holds `id` at `epoch` (created, taken over, resumed or reclaimed here). */
  hold(id: string, epoch: number): void;
  /** Lets `id` go (it ended, or memory dropped it). */
  release(id: string): void;
  /** The current owner of an execution, or null when none (finished, or never started). */
  ownerOf(id: string): Promise<{ node_id: string; epoch: number; instance: string | null } | null>;
  /**
   * The row of `id` names this node id for another process of it. Takes the row's tree when
   * this process holds the node id (a replaced process created it; the new epochs fence that
   * one) and answers the epoch of `id`; null when this process does not hold the node id (it
   * was replaced: it checks its heartbeat at once) or the row moved.
   */
  reclaim(id: string): Promise<number | null>;
  /**
   * An append was fenced by a row that names this node id: this process may have been
   * replaced. Checks at once (its heartbeat), so that it stops serving as soon as it can tell.
   */
  replaced(): void;
  /**
   * Of these queued units (steps memory holds queued), those whose task row is claimed with no
   * dispatch on its way to this node (no inbox entry of the execution) and no confirmation of
   * the claim since `before`: claims whose recording was lost. (The audit, startAudit.)
   */
  staleClaims?(
    units: Array<{ execution_id: string; unit: string }>,
    before: number,
  ): Promise<Array<{ execution_id: string; unit: string; token: string }>>;
  /** Puts a claimed row back on the queue (REQUEUE_TASK); true when it was claimed. */
  requeue?(token: string): Promise<boolean>;
  /** Wakes when the execution may have closed (NOTIFY orbit_done); returns an unsubscribe. */
  onDone(id: string, wake: () => void): () => void;
  /**
   * `--cache-executions`: the running executions this node owns whose next timer is due by
   * `before` (the store's `listWaking`, of this node's executions only), with their epochs.
   */
  listWaking(
    before: number,
    after: WakingRow | null,
    limit: number,
  ): Promise<Array<WakingRow & { epoch: number }>>;
}

/** Shared mode: commands for an execution another node owns go through its inbox. */
export interface RemoteCommands {
  /**
   * Applies `cmd` on the owner of `id`; null when nobody owns it (not running). With `take`,
   * a result's owner may dispatch the step it makes ready to that worker session and answer
   * the task (`tasks`).
   */
  forward(
    id: string,
    cmd: Command,
    take?: EagerSession,
  ): Promise<
    { accepted: boolean; row?: ExecutionRow; seq?: number; tasks?: TaskPayload[] } | null
  >;
  /**
   * Applies the pending inbox entries of an execution this node owns; answers how many there
   * were (shared mode).
   */
  drainOwned?(id: string): Promise<number>;
}

export interface StartRequest {
  workflow: string;
  version?: string;
  input?: unknown;
  execution_id?: string;
}

export function rowOf(s: ExecutionState, now: number): ExecutionRow {
  return {
    execution_id: s.execution_id,
    run_id: s.run_id,
    root_id: s.root_id,
    parent_id: s.parent_id,
    workflow: s.workflow,
    version: s.version,
    status: s.status,
    input: s.input,
    output: s.phase === "closed" ? s.output : null,
    error: s.error,
    created_ms: s.created_ms,
    closed_ms: s.closed_ms,
    updated_ms: now,
    last_seq: s.last_seq,
  };
}

/** The execution a task token belongs to (`<execution id>/<uuid>`). */
export function executionOfToken(token: string): string | null {
  const i = token.lastIndexOf("/");
  if (i <= 0 || i === token.length - 1) return null;
  const id = token.slice(0, i);
  return EXECUTION_ID_RE.test(id) ? id : null;
}
