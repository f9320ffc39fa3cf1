/**
 * Shared mode's claims (reference page, "Task queue"): a poll claims the oldest rows of
 * `orbit_tasks` its session serves in one statement, those of executions owned here first;
 * for executions owned here the dispatch is recorded here, for the others the claim wrote a
 * `dispatched` inbox entry in the same statement. Rows whose dispatch cannot be recorded go
 * back (or are cancelled), and claims whose answer was lost are found again.
 */
import { stepOfToken } from "../../lib/engine/state.ts";
import { OWN_TASK_HEAD_START_MS, unitOf } from "../../lib/executions/shared_changes.ts";
import { log } from "../../lib/log.ts";
import type { Session, TaskPayload } from "../../lib/workers/dispatcher.ts";
import * as q from "../../sql/postgres/shared/mod.ts";
import type { WorkersContext } from "./sessions.ts";

/**
 * How long a claim that found nothing stands for its session (see Claims.#empty): the polls'
 * own re-check interval.
 */
export const POLL_RECHECK_MS = 1000;
/**
 * How long a node leaves the rows another node queued to that node's own polling workers before
 * its polls claim them (SharedWorkers.wakeForeign). A few worker round trips on a loaded host
 * (the bench's worker cycle: p50 12–25 ms, p99 100–150 ms): the owner's slots free and take
 * them in memory; under a real backlog, or for tasks the owner's workers do not serve, the
 * other nodes' polls claim them this much later (their one-second re-check aside).
 */
export const FOREIGN_TASK_DELAY_MS = 200;

/**
 * A claim statement that failed on this side may still have committed (its answer lost with the
 * connection, or a statement the client gave up on that finished later): for this long after
 * the failure its rows are looked for every second and handed back.
 */
const LOST_CLAIM_WATCH_MS = 60_000;
const LOST_CLAIMS_MAX = 10_000;

/**
 * How many of the oldest matching rows a claim ranks (q.claimTasks): a few times its limit,
 * at least 64, so that rows locked by concurrent claims (SKIP LOCKED) rarely fill it; a power
 * of two, so that a few statement texts serve every limit.
 */
export function claimWindow(limit: number): number {
  let w = 64;
  while (w < 4 * limit) w *= 2;
  return w;
}

interface ClaimedRow {
  id: number;
  execution_id: string;
  run_id: string;
  step: string;
  attempt: number;
  unit: string;
  token: string;
  payload: Record<string, unknown>;
  owner_node: string | null;
}

/** What claims need from the worker service around them. */
export interface ClaimHooks {
  /** Rows went back on the queue: polls here and on other nodes look again. */
  requeued(): void;
  /** Waiting polls here look again. */
  wake(): void;
  /** Marks an attempt uncertain on its owner, here or through its inbox. */
  uncertain(id: string, token: string, reason: string): void;
}

export class Claims {
  /**
   * Bumped by wakeRemote(): a row this node's memory does not hold may have become claimable
   * since — queued or put back by another node (NOTIFY orbit_tasks with another payload), put
   * back by this one (release, a takeover), or announced while the listener was away (its
   * reconnection). Rows of executions owned here are in the local queue from their install
   * on, and a look takes from there first.
   */
  #remoteGen = 0;
  /**
   * Per session: the generation and time of its latest claim that found nothing. Another claim
   * for it with no wakeRemote() since and within POLL_RECHECK_MS would find nothing that the
   * local queue does not hold (each claim statement is a round trip and an index walk; with the
   * page's worker shape a slot freed by a result asked every time, two thirds of them for
   * nothing); after that it claims, as the polls' one-second re-check does, in case an
   * announcement was lost.
   */
  #empty = new Map<string, { gen: number; ms: number }>();
  /** Claims whose statement failed here, by session and claimed_ms (recoverLost). */
  #lost: Array<{ session_id: string; claimed_ms: number; until: number }> = [];
  /** The claimed_ms of this process's latest claim: each claim gets its own. */
  #lastClaimMs = 0;
  /** Tokens of lost claims handed back already (found again until their owner moves them). */
  #lostHandled = new Set<string>();
  #recovering = false;
  stopped = false;

  constructor(readonly w: WorkersContext, readonly hooks: ClaimHooks) {}

  /** A row this node's memory may not hold became claimable (see #remoteGen). */
  remoteChanged(): void {
    this.#remoteGen++;
  }

  /** A session was forgotten. */
  forget(sessionId: string): void {
    this.#empty.delete(sessionId);
  }

  /** Claims up to `max` tasks for the session and records the dispatches owned here. */
  async claim(s: Session, max: number): Promise<TaskPayload[]> {
    const { executions, metrics, opts } = this.w;
    // Nothing announced since this session's last claim found nothing (#empty).
    const gen = this.#remoteGen;
    const empty = this.#empty.get(s.session_id);
    if (empty && empty.gen === gen && opts.now() - empty.ms < POLL_RECHECK_MS) return [];
    // The claim's claimed_ms, unique per claim of this process: a claim whose answer is lost
    // is found again by it (recoverLost).
    const now = this.#lastClaimMs = Math.max(opts.now(), this.#lastClaimMs + 1);
    let rows: ClaimedRow[];
    try {
      rows = await this.w.q<ClaimedRow>(q.claimTasks(claimWindow(max)), [
        s.tasks.map((t) => ({
          task_name: t.name,
          contract_version: t.contract,
          lang: t.language ?? s.runtime,
        })),
        max,
        opts.nodeId,
        s.session_id,
        s.worker_id,
        now,
        OWN_TASK_HEAD_START_MS,
      ]);
    } catch (e) {
      // Kept until a check after the database answers again; a long outage fails a claim a
      // second per waiting poll, so the oldest go past a bound (they failed long before).
      if (this.#lost.length >= LOST_CLAIMS_MAX) this.#lost.shift();
      this.#lost.push({
        session_id: s.session_id,
        claimed_ms: now,
        until: now + LOST_CLAIM_WATCH_MS,
      });
      throw e;
    }
    metrics.taskClaims.inc({ found: rows.length === 0 ? "none" : "some" });
    if (rows.length === 0) this.#empty.set(s.session_id, { gen, ms: now });
    else this.#empty.delete(s.session_id);
    const owners = new Set<string>();
    for (const row of rows) {
      if (row.owner_node && row.owner_node !== opts.nodeId) {
        owners.add(row.owner_node);
        metrics.commandsForwarded.inc({ kind: "dispatched" });
      }
    }
    if (owners.size > 0) {
      opts.notify([...owners].map((payload) => ({ channel: "orbit_inbox", payload })));
    }
    const out = await Promise.all(rows.map(async (row): Promise<TaskPayload | null> => {
      const timeout = row.payload.timeout_ms;
      const task: TaskPayload = {
        token: row.token,
        execution_id: row.execution_id,
        step: row.step,
        attempt: row.attempt,
        task: String(row.payload.task),
        contract: String(row.payload.contract),
        input: row.payload.input,
        idempotency_key: String(row.payload.idempotency_key),
        redelivery: row.payload.redelivery === true,
        deadline_ms: typeof timeout === "number" ? now + timeout : null,
      };
      if (row.owner_node === null) {
        // Nobody owns it any more: the execution finished; the row is dropped.
        await this.release(q.CANCEL_TASK, row);
        return null;
      }
      if (row.owner_node !== opts.nodeId) return task; // the owner records the dispatch
      try {
        // A row queued before its attempt turned uncertain (a dispatch whose commit failed but
        // landed puts its row back on the queue; the rebuild then queues the next unit) is not
        // the unit the step waits for now. Dispatched, its commit would take the current unit's
        // row with the token this claim wrote on the stale one (orbit_tasks_token_idx), fail,
        // and requeue the stale row, the oldest, for the next claim, for ever. It is cancelled,
        // as the inbox path refuses such an offer (inbox.ts), and the current unit's row goes
        // out. Owned here but not in memory (a takeover loading it): loaded first; owned
        // elsewhere now, the dispatch below finds nothing and requeues the row.
        if (await executions.loadOwned(row.execution_id)) {
          // Memory tells the current unit only once no append of it is in doubt.
          await executions.settle(row.execution_id);
          const s = executions.stateOf(row.execution_id);
          const st = s?.steps[row.step];
          if (s && st && unitOf(s, st) !== row.unit) {
            await this.release(q.CANCEL_TASK, row);
            return null;
          }
        }
        const r = await executions.command(row.execution_id, {
          type: "dispatch",
          step: row.step,
          token: row.token,
          worker_id: s.worker_id,
          worker_session: s.session_id,
        });
        if (r === null) {
          // Owned here but not in memory yet (a takeover is loading it): back on the queue.
          await this.release(q.REQUEUE_TASK, row);
          return null;
        }
        if (!r.accepted) {
          await this.release(q.CANCEL_TASK, row);
          return null;
        }
        const st = r.state.steps[row.step];
        if (st) {
          task.deadline_ms = st.deadline_ms;
          // The row may predate an uncertain attempt (a dispatch whose commit failed but landed
          // puts its row back on the queue): the worker hears what the history recorded.
          task.redelivery = st.redelivery;
        }
        return task;
      } catch (e) {
        log.engine.error("dispatch failed; task stays queued", {
          execution_id: row.execution_id,
          step: row.step,
          error: (e as Error).message,
        });
        await this.release(q.REQUEUE_TASK, row);
        return null;
      }
    }));
    return out.filter((t): t is TaskPayload => t !== null);
  }

  /**
   * Puts a claimed row back on the queue (REQUEUE_TASK) or marks it cancelled (CANCEL_TASK)
   * when its dispatch was not recorded here. Until that lands nobody else would ever move the
   * row (only a takeover looks at claims of a live node), so a failure — the database being
   * away is the likely one, as it just failed the dispatch — is retried every second, in the
   * background, until it lands or the server stops.
   */
  async release(text: string, row: { token: string; execution_id: string }): Promise<void> {
    try {
      await this.w.q(text, [row.token]);
      // The row may be another node's execution's (claimed here, so not in the local queue).
      if (text === q.REQUEUE_TASK) this.hooks.requeued();
    } catch (e) {
      if (this.stopped) return;
      log.engine.warn("cannot release a claimed task row; retrying in 1 s", {
        execution_id: row.execution_id,
        token: row.token,
        error: (e as Error).message,
      });
      setTimeout(() => void this.release(text, row), 1000);
    }
  }

  /**
   * The rows of claims whose statement failed here (claim): it may have committed with its
   * answer lost, and then the rows stay claimed for a worker that never received them — an
   * execution owned here would wait for ever (its history shows the step queued, the row is
   * claimed, so neither a claim nor a take hands it out again; found by the chaos suite, a
   * connection dropped right after a claim). Looked for every second while the failure is
   * recent (LOST_CLAIM_WATCH_MS), so a statement that committed after its client gave up is
   * found too. A row of an execution owned here whose dispatch was not recorded goes back on
   * the queue (checked in the execution's turn, so that a dispatch in flight is seen); a row
   * owned elsewhere had its `dispatched` entry written with the claim, so its owner hears that
   * the attempt is uncertain and redelivers it now rather than one session timeout later; a row
   * of a finished execution is cancelled.
   */
  async recoverLost(): Promise<void> {
    if (this.#recovering || this.#lost.length === 0) return;
    const { executions, opts } = this.w;
    this.#recovering = true;
    try {
      const now = opts.now();
      const rows = await this.w.q<
        { token: string; execution_id: string; step: string; owner_node: string | null }
      >(q.LOST_CLAIM_ROWS, [
        opts.nodeId,
        this.#lost.map(({ session_id, claimed_ms }) => ({ session_id, claimed_ms })),
      ]);
      this.#lost = this.#lost.filter((c) => c.until > now);
      if (this.#lost.length === 0) this.#lostHandled.clear();
      for (const row of rows) {
        if (this.#lostHandled.has(row.token)) continue;
        // Memory answers whether the dispatch was recorded only once no append is in doubt
        // (throws while the database is away: the next check looks again).
        if (row.owner_node === opts.nodeId) await executions.settle(row.execution_id);
        this.#lostHandled.add(row.token);
        log.engine.warn("a claim's answer was lost; its task goes out again", {
          execution_id: row.execution_id,
          step: row.step,
          token: row.token,
          owner_node: row.owner_node,
        });
        if (row.owner_node === null) {
          await this.release(q.CANCEL_TASK, row);
        } else if (row.owner_node !== opts.nodeId) {
          this.hooks.uncertain(
            row.execution_id,
            row.token,
            "the answer to the claim that took the attempt was lost",
          );
        } else {
          await executions.serial(row.execution_id, async () => {
            const st = executions.stateOf(row.execution_id);
            if (st && stepOfToken(st, row.token)) return; // its dispatch was recorded
            await this.release(q.REQUEUE_TASK, row);
            this.hooks.wake();
          });
        }
      }
    } catch {
      // The database is still away: the next check looks again.
    } finally {
      this.#recovering = false;
    }
  }
}
