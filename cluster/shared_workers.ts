/**
 * Shared mode's worker service (reference page, "Task queue" and "Worker sessions"): the
 * routes' WorkerService over the shared tables, so that a worker can register, poll,
 * heartbeat and report through any server.
 *
 * State model.
 *   Sessions live in `orbit_sessions`; this server caches the ones it served. Last contacts
 *   are collected in memory and written every 250 ms (a poll in progress counts as contact).
 *   A session silent for --session-timeout is removed by whichever server notices; the
 *   worker then gets 404 UNKNOWN_SESSION and registers again, as on one server. A server
 *   learns that a session it caches was removed elsewhere from its contact write (the row is
 *   not there to update) or from the owners' read of contacts, and forgets it (#forget).
 *   Tasks live in `orbit_tasks`, queued by their owner in the transaction of StepScheduled
 *   (lib/executions/shared_changes.ts). A poll claims the oldest rows the session serves in one
 *   statement, those of executions owned here first unless a row owned elsewhere waited
 *   OWN_TASK_HEAD_START_MS longer (sql/postgres/shared.ts, claimTasks); for executions owned
 *   here it then records StepDispatched itself, for the others the claim wrote a
 *   `dispatched` inbox entry in the same statement and the task goes to the worker at once.
 *   Attempts of executions owned here are watched: every 500 ms the owner reads the last
 *   contact of the sessions holding them; a session silent past --session-timeout, or gone,
 *   makes its attempts uncertain (redelivered with the same idempotency key). Attempts of
 *   executions taken over from a dead node are redelivered one --session-timeout after the
 *   takeover unless their result arrives (their worker may never have received them).
 *
 * Failure handling: a dispatch that cannot be recorded puts the row back on the queue; a
 * claim for an execution that no longer wants it is cancelled, and the worker hears it on its
 * next heartbeat. Long polls wake on NOTIFY orbit_tasks and look again every second.
 */
import type postgres from "postgres";
import type { ErrorInfo, HistoryEvent } from "../lib/engine/events.ts";
import type { Command } from "../lib/engine/decide.ts";
import {
  type ExecutionState,
  liveTokens,
  newlyQueued,
  queuedSteps,
  stepOfToken,
  type StepState,
} from "../lib/engine/state.ts";
import {
  executionOfToken,
  type Executions,
  type StartOffer,
} from "../lib/executions/executions.ts";
import { notFound } from "../lib/errors.ts";
import type { Metrics } from "../lib/metrics.ts";
import { log } from "../lib/log.ts";
import {
  dispatchQueued,
  dispatchTo,
  type EagerSession,
  payload,
  pollWaitMs,
  serves,
  type Session,
  type SessionView,
  type TaskPayload,
  type TaskRegistration,
  type TokenHolder,
  undelivered,
  type WorkerService,
} from "../lib/workers/dispatcher.ts";
import * as q from "../sql/postgres/shared.ts";
import { OWN_TASK_HEAD_START_MS, unitOf } from "../lib/executions/shared_changes.ts";
import { MemoryTaskQueue } from "../lib/workers/queue.ts";
import { withTimeout } from "../lib/with_timeout.ts";

const CONTACT_FLUSH_MS = 250;
const CONTACT_CHECK_MS = 500;
const POLL_RECHECK_MS = 1000;
const LOCAL_PRUNE_MS = 5000;
/**
 * A claim statement that failed on this side may still have committed (its answer lost with the
 * connection, or a statement the client gave up on that finished later): for this long after
 * the failure its rows are looked for every LOST_CLAIM_CHECK_MS and handed back.
 */
const LOST_CLAIM_WATCH_MS = 60_000;
const LOST_CLAIM_CHECK_MS = 1000;
/** How long `/v1/health` waits for the cluster's session count (as for the nodes' list). */
const SESSION_COUNT_WAIT_MS = 250;
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

export interface SharedWorkersOptions {
  nodeId: string;
  sessionTimeoutMs: number;
  now: () => number;
  newId: () => string;
  /** The request-path client (claims, sessions). */
  /** The requests' client (lib/store/watched_client.ts in the server; postgres.js in tests). */
  sql: {
    unsafe(
      text: string,
      params: postgres.ParameterOrJSON<never>[],
      options: { prepare: boolean },
    ): PromiseLike<unknown>;
  };
  /** Applies the inbox entries of one execution owned here (a result may need its dispatch). */
  drainInbox(executionId: string): Promise<void>;
  /**
   * Since when this node's own heartbeat has been written without a gap. After a database
   * outage nobody could record contacts or confirmations, so redeliveries that judge silence
   * wait until the node has been healthy for a session timeout.
   */
  healthySince(): number;
  /** Sends notifications after a write (never inside it). */
  notify(list: Array<{ channel: string; payload: string }>): void;
}

interface SessionRecord {
  session_id: string;
  worker_id: string;
  runtime: string;
  tasks: TaskRegistration[];
  concurrency: number;
  last_contact_ms: number;
  created_ms: number;
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

export class SharedWorkers implements WorkerService {
  readonly sessions = new Map<string, Session>();
  /** Tasks this server handed to workers since it started (health: tasks_claimed). */
  tasksClaimed = 0;
  #contacts = new Map<string, number>();
  /** When the contact write in flight began (null: none). */
  #flushStarted: number | null = null;
  #wakers = new Set<() => void>();
  /**
   * Bumped by wakeRemote(): a row this node's memory does not hold may have become claimable
   * since — queued or put back by another node (NOTIFY orbit_tasks with another payload), put
   * back by this one (#release, a takeover), or announced while the listener was away (its
   * reconnection). Rows of executions owned here are in #local from their install on, and a
   * look takes from there first (#takeLocal).
   */
  #remoteGen = 0;
  /**
   * Per session: the generation and time of its latest claim that found nothing. Another claim
   * for it with no wakeRemote() since and within POLL_RECHECK_MS would find nothing that #local
   * does not hold (each claim statement is a round trip and an index walk; with the page's
   * worker shape a slot freed by a result asked every time, two thirds of them for nothing);
   * after that it claims, as the polls' one-second re-check does, in case an announcement was
   * lost.
   */
  #empty = new Map<string, { gen: number; ms: number }>();
  /** The polls of each session in the order they came (see poll). */
  #lines = new Map<string, Array<{ wake: () => void }>>();
  /** Polls waiting here, for a new execution's first task (offerFirst). */
  #waiting = new Set<
    {
      s: Session;
      deliver: (tasks: TaskPayload[]) => boolean;
      wake: () => void;
      /** Set aside for a start's first task (offerFirst): only its answer or release ends it. */
      offered: boolean;
    }
  >();
  /** Live attempts of executions owned here: token → session. */
  #held = new Map<string, { execution_id: string; session: string; worker_id: string }>();
  /**
   * The queued tasks of executions owned here (their rows' mirror), for a result that frees a
   * slot (#takeLocal); entries that left the queue are dropped when met, and every few seconds.
   */
  #local: MemoryTaskQueue;
  /** Attempts taken over from a dead node: token → when to redeliver if nothing arrived. */
  #orphans = new Map<string, number>();
  #timers: ReturnType<typeof setInterval>[] = [];
  /** Claims whose statement failed here, by session and claimed_ms (#recoverLostClaims). */
  #lostClaims: Array<{ session_id: string; claimed_ms: number; until: number }> = [];
  /** The claimed_ms of this process's latest claim: each claim gets its own. */
  #lastClaimMs = 0;
  /** Tokens of lost claims handed back already (found again until their owner moves them). */
  #lostHandled = new Set<string>();
  #recovering = false;
  #checking = false;
  #checkStarted = 0;
  #stopped = false;
  #countRead: Promise<number> | null = null;
  #lastCount: number | null = null;

  constructor(
    readonly executions: Executions,
    readonly metrics: Metrics,
    readonly opts: SharedWorkersOptions,
  ) {
    executions.observer = this;
    this.#local = new MemoryTaskQueue(executions);
  }

  #q<T>(text: string, params: unknown[] = []): Promise<T[]> {
    return this.opts.sql.unsafe(text, params as postgres.ParameterOrJSON<never>[], {
      prepare: true,
    }) as unknown as Promise<T[]>;
  }

  start(): void {
    this.#timers.push(setInterval(() => this.#flushContacts(), CONTACT_FLUSH_MS));
    this.#timers.push(setInterval(() => this.#checkSessions(), CONTACT_CHECK_MS));
    this.#timers.push(setInterval(() => this.#local.prune(), LOCAL_PRUNE_MS));
    this.#timers.push(setInterval(() => this.#recoverLostClaims(), LOST_CLAIM_CHECK_MS));
  }

  stop(): void {
    this.#stopped = true;
    for (const t of this.#timers) clearInterval(t);
    this.#timers = [];
    for (const w of [...this.#wakers]) w();
    for (const w of [...this.#waiting]) w.wake();
  }

  /**
   * NOTIFY orbit_tasks (or a local enqueue): waiting polls look again, at once. The
   * notification names no owner, and a poll here that finds only rows owned elsewhere takes
   * them without waiting: the owner's own polls were woken at its commit (cluster/shared.ts,
   * afterCommit), before its NOTIFY went out, so they claim first; when they did not take the
   * row, no worker is idle there, and a worker idle here is worth more than the forward saved.
   */
  wake(): void {
    for (const w of [...this.#wakers]) w();
  }

  /** wake() for rows this node's memory may not hold (see #remoteGen). */
  wakeRemote(): void {
    this.#remoteGen++;
    this.wake();
  }

  /**
   * Claimed rows went back on the queue (#release, a takeover): they may be any node's
   * executions', so polls here and on the other nodes look again.
   */
  requeued(): void {
    this.wakeRemote();
    this.opts.notify([{ channel: "orbit_tasks", payload: "" }]);
  }

  /**
   * A new execution's first task for a poll waiting here, dispatched in the start's commit
   * (its row written claimed, as for a result's eager dispatch): no claim statement and no
   * second commit. The poll is set aside (no wake-up reaches it) until the commit answers.
   */
  offerFirst(state: ExecutionState): StartOffer | null {
    return this.#offer(state, queuedSteps(state));
  }

  /**
   * A step that a result made ready (queued by this append, so no other server can be
   * claiming its row) and that the reporting worker does not serve, for a poll of another
   * session waiting here: dispatched in the result's commit, its row written claimed, as for a
   * start's first task (a worker of another language or task list: no claim statement, no
   * commit of its own).
   */
  #offerReady(id: string, state: ExecutionState): StartOffer | null {
    if (this.#waiting.size === 0) return null;
    return this.#offer(state, newlyQueued(this.executions.stateOf(id), state));
  }

  #offer(state: ExecutionState, steps: Iterable<StepState>): StartOffer | null {
    if (this.#waiting.size === 0) return null;
    for (const st of steps) {
      for (const w of this.#waiting) {
        if (!serves(w.s, st)) continue;
        this.#waiting.delete(w);
        this.#wakers.delete(w.wake);
        w.offered = true;
        const command = dispatchTo(state.execution_id, st.id, w.s, this.opts.newId);
        return {
          command,
          deliver: (next) => {
            const task = payload(next, st.id, command.token);
            this.tasksClaimed++;
            this.metrics.tasksDispatched.inc();
            // The poll's request closed meanwhile (nothing else ends a poll set aside): the
            // dispatch names the session, not the poll, so another poll of the session waiting
            // here takes it; with none, it is redelivered.
            if (!w.deliver([task]) && !this.#handOver(w.s, task)) {
              undelivered(this.executions, w.s, [task], "closed");
            }
          },
          release: () => {
            w.offered = false;
            w.wake();
          },
        };
      }
    }
    return null;
  }

  /** Hands a task dispatched to `s` to another poll of that session waiting here. */
  #handOver(s: Session, task: TaskPayload): boolean {
    for (const e of this.#waiting) {
      if (e.s.session_id === s.session_id && e.deliver([task])) return true;
    }
    return false;
  }

  /** Attempts of executions just taken over: redelivered after a session timeout. */
  adoptOrphans(tokens: string[]): void {
    const at = this.opts.now() + this.opts.sessionTimeoutMs;
    for (const t of tokens) this.#orphans.set(t, at);
  }

  async sessionWorker(sessionId: string): Promise<string | null> {
    const cached = this.sessions.get(sessionId);
    if (cached) return cached.worker_id;
    const [rec] = await this.#q<SessionRecord>(q.GET_SESSION, [sessionId]);
    return rec?.worker_id ?? null;
  }

  async tokenHolders(tokens: string[]): Promise<Map<string, TokenHolder>> {
    const rows = await this.#q<
      { token: string; task_name: string; contract_version: string; worker_id: string | null }
    >(q.TOKEN_HOLDERS, [tokens]);
    return new Map(rows.map((r) => [
      r.token,
      { task: r.task_name, contract: r.contract_version, worker_id: r.worker_id },
    ]));
  }

  async register(
    r: Pick<Session, "worker_id" | "runtime" | "tasks" | "concurrency">,
  ): Promise<string> {
    const now = this.opts.now();
    const id = this.opts.newId();
    await this.#q(q.INSERT_SESSION, [id, r.worker_id, r.runtime, r.tasks, r.concurrency, now]);
    this.#cache({
      session_id: id,
      worker_id: r.worker_id,
      runtime: r.runtime,
      tasks: r.tasks,
      concurrency: r.concurrency,
      last_contact_ms: now,
      created_ms: now,
    });
    log.engine.info("worker registered", {
      worker_id: r.worker_id,
      runtime: r.runtime,
      tasks: r.tasks.length,
    });
    return id;
  }

  #cache(rec: SessionRecord): Session {
    const s: Session = {
      ...rec,
      polling: 0,
      tokens: new Set(),
      cancel: new Set(),
      told: new Set(),
    };
    this.sessions.set(rec.session_id, s);
    return s;
  }

  /** The session, from the cache or the table; 404 UNKNOWN_SESSION when it is gone. */
  async #session(id: string): Promise<Session> {
    let s = this.sessions.get(id);
    if (!s) {
      const [rec] = await this.#q<SessionRecord>(q.GET_SESSION, [id]);
      if (rec) s = this.#cache(rec);
    }
    if (!s) {
      throw notFound(
        "UNKNOWN_SESSION",
        `worker session ${id} is unknown or expired; register again`,
      );
    }
    this.#touch(s);
    return s;
  }

  #touch(s: Session): void {
    if (!this.sessions.has(s.session_id)) return; // forgotten: nothing to write for it
    const now = this.opts.now();
    s.last_contact_ms = now;
    this.#contacts.set(s.session_id, now);
  }

  /**
   * Forgets a session whose row is gone (expired here or elsewhere, or unregistered through
   * another server): its next poll, heartbeat or unregister answers 404 UNKNOWN_SESSION, as on
   * one server for an unknown session, and the SDK registers again. Its polls waiting here end
   * (they answer no tasks); a result it reports is still applied. Answers the cached session.
   */
  #forget(id: string): Session | undefined {
    const s = this.sessions.get(id);
    this.#contacts.delete(id);
    this.#empty.delete(id);
    if (!s) return undefined;
    this.sessions.delete(id);
    for (const p of [...(this.#lines.get(id) ?? [])]) p.wake();
    return s;
  }

  /** #forget for a session cached here that another server removed. */
  #gone(id: string): void {
    const s = this.#forget(id);
    if (s) {
      log.engine.info("worker session removed by another server; forgotten here", {
        session_id: id,
        worker_id: s.worker_id,
      });
    }
  }

  async poll(
    sessionId: string,
    max: number,
    waitMs: number,
    signal?: AbortSignal,
  ): Promise<TaskPayload[]> {
    const s = await this.#session(sessionId);
    const started = performance.now();
    const end = this.opts.now() + pollWaitMs(waitMs, this.opts.sessionTimeoutMs);
    s.polling++;
    // The polls of a session waiting here stand in line: only the first looks again (on a
    // notification, and every second), so a worker holding one poll per slot costs one claim
    // per look, not one per slot. When the first leaves, the next looks at once.
    const me = { wake: () => {} };
    let line = this.#lines.get(s.session_id);
    if (!line) this.#lines.set(s.session_id, line = []);
    line.push(me);
    const first = () => line![0] === me;
    try {
      max = Math.max(1, Math.min(max, s.concurrency));
      for (let look = true;; look = first()) {
        // Forgotten meanwhile (#forget): nothing more for it; its next request answers 404.
        if (!this.sessions.has(s.session_id)) return [];
        // A look takes from this node's own queue first, as one server takes from its memory:
        // each dispatch claims its row in its own commit, no claim statement.
        const tasks = look ? await this.#takeLocal(s, max) : [];
        if (look && tasks.length === 0) tasks.push(...await this.#claim(s, max));
        if (tasks.length > 0 || signal?.aborted) return this.#delivered(s, tasks, signal);
        const left = end - this.opts.now();
        if (left <= 0 || this.#stopped || !this.sessions.has(s.session_id)) return [];
        let given: TaskPayload[] | null = null;
        await new Promise<void>((resolve) => {
          let finished = false;
          const entry = {
            s,
            deliver: (tasks: TaskPayload[]) => {
              if (finished) return false;
              given = tasks;
              done();
              return true;
            },
            wake: () => {},
            offered: false,
          };
          const done = () => {
            finished = true;
            clearTimeout(timer);
            this.#wakers.delete(done);
            this.#waiting.delete(entry);
            signal?.removeEventListener("abort", done);
            resolve();
          };
          entry.wake = done; // the same function as in #wakers, so that an offer can unhook it
          // The line moving on (the first poll left) or the wait running out does not end a poll
          // set aside for an offer: it would miss the task dispatched to it (redelivered then).
          const unlessOffered = () => {
            if (!entry.offered) done();
          };
          me.wake = unlessOffered;
          const timer = setTimeout(unlessOffered, first() ? Math.min(POLL_RECHECK_MS, left) : left);
          if (first()) this.#wakers.add(done);
          this.#waiting.add(entry);
          signal?.addEventListener("abort", done);
        });
        if (given) return this.#delivered(s, given, signal);
      }
    } finally {
      const wasFirst = first();
      line.splice(line.indexOf(me), 1);
      if (line.length === 0) this.#lines.delete(s.session_id);
      else if (wasFirst) line[0]!.wake();
      s.polling--;
      this.#touch(s);
      this.metrics.pollLatency.observe((performance.now() - started) / 1000);
    }
  }

  /** Claims up to `max` tasks for the session and records the dispatches owned here. */
  async #claim(s: Session, max: number): Promise<TaskPayload[]> {
    // Nothing announced since this session's last claim found nothing (#empty).
    const gen = this.#remoteGen;
    const empty = this.#empty.get(s.session_id);
    if (empty && empty.gen === gen && this.opts.now() - empty.ms < POLL_RECHECK_MS) return [];
    // The claim's claimed_ms, unique per claim of this process: a claim whose answer is lost
    // is found again by it (#recoverLostClaims).
    const now = this.#lastClaimMs = Math.max(this.opts.now(), this.#lastClaimMs + 1);
    let rows: ClaimedRow[];
    try {
      rows = await this.#q<ClaimedRow>(q.claimTasks(claimWindow(max)), [
        s.tasks.map((t) => ({
          task_name: t.name,
          contract_version: t.contract,
          lang: t.language ?? s.runtime,
        })),
        max,
        this.opts.nodeId,
        s.session_id,
        s.worker_id,
        now,
        OWN_TASK_HEAD_START_MS,
      ]);
    } catch (e) {
      // Kept until a check after the database answers again; a long outage fails a claim a
      // second per waiting poll, so the oldest go past a bound (they failed long before).
      if (this.#lostClaims.length >= LOST_CLAIMS_MAX) this.#lostClaims.shift();
      this.#lostClaims.push({
        session_id: s.session_id,
        claimed_ms: now,
        until: now + LOST_CLAIM_WATCH_MS,
      });
      throw e;
    }
    if (rows.length === 0) this.#empty.set(s.session_id, { gen, ms: now });
    else this.#empty.delete(s.session_id);
    const owners = new Set<string>();
    for (const row of rows) {
      if (row.owner_node && row.owner_node !== this.opts.nodeId) {
        owners.add(row.owner_node);
        this.metrics.commandsForwarded.inc({ kind: "dispatched" });
      }
    }
    if (owners.size > 0) {
      this.opts.notify([...owners].map((payload) => ({ channel: "orbit_inbox", payload })));
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
        await this.#release(q.CANCEL_TASK, row);
        return null;
      }
      if (row.owner_node !== this.opts.nodeId) return task; // the owner records the dispatch
      try {
        // A row queued before its attempt turned uncertain (a dispatch whose commit failed but
        // landed puts its row back on the queue; the rebuild then queues the next unit) is not
        // the unit the step waits for now. Dispatched, its commit would take the current unit's
        // row with the token this claim wrote on the stale one (orbit_tasks_token_idx), fail,
        // and requeue the stale row, the oldest, for the next claim, for ever. It is cancelled,
        // as the inbox path refuses such an offer (cluster/shared.ts, #apply), and the current
        // unit's row goes out. Owned here but not in memory (a takeover loading it): loaded
        // first; owned elsewhere now, the dispatch below finds nothing and requeues the row.
        if (await this.executions.loadOwned(row.execution_id)) {
          // Memory tells the current unit only once no append of it is in doubt.
          await this.executions.settle(row.execution_id);
          const s = this.executions.stateOf(row.execution_id);
          const st = s?.steps[row.step];
          if (s && st && unitOf(s, st) !== row.unit) {
            await this.#release(q.CANCEL_TASK, row);
            return null;
          }
        }
        const r = await this.executions.command(row.execution_id, {
          type: "dispatch",
          step: row.step,
          token: row.token,
          worker_id: s.worker_id,
          worker_session: s.session_id,
        });
        if (r === null) {
          // Owned here but not in memory yet (a takeover is loading it): back on the queue.
          await this.#release(q.REQUEUE_TASK, row);
          return null;
        }
        if (!r.accepted) {
          await this.#release(q.CANCEL_TASK, row);
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
        await this.#release(q.REQUEUE_TASK, row);
        return null;
      }
    }));
    const tasks = out.filter((t): t is TaskPayload => t !== null);
    this.tasksClaimed += tasks.length;
    this.metrics.tasksDispatched.inc({}, tasks.length);
    return tasks;
  }

  /**
   * Dispatches up to `max` tasks queued for executions this node owns (the local mirror of
   * their rows) to `s`, each in an append that claims its row (COMMIT_OWNED's take). A take
   * refused because another server claimed the row, or because an older row of the task
   * waits, yields nothing here: the claim statement decides then.
   */
  async #takeLocal(s: Session, max: number): Promise<TaskPayload[]> {
    const tasks = await dispatchQueued(
      this.executions,
      s,
      this.#local.take(s, max),
      this.opts.newId,
      (item) => this.#local.requeue([item]),
    );
    this.tasksClaimed += tasks.length;
    this.metrics.tasksDispatched.inc({}, tasks.length);
    return tasks;
  }

  /**
   * Puts a claimed row back on the queue (REQUEUE_TASK) or marks it cancelled (CANCEL_TASK)
   * when its dispatch was not recorded here. Until that lands nobody else would ever move the
   * row (only a takeover looks at claims of a live node), so a failure — the database being
   * away is the likely one, as it just failed the dispatch — is retried every second, in the
   * background, until it lands or the server stops.
   */
  async #release(text: string, row: { token: string; execution_id: string }): Promise<void> {
    try {
      await this.#q(text, [row.token]);
      // The row may be another node's execution's (claimed here, so not in #local).
      if (text === q.REQUEUE_TASK) this.requeued();
    } catch (e) {
      if (this.#stopped) return;
      log.engine.warn("cannot release a claimed task row; retrying in 1 s", {
        execution_id: row.execution_id,
        token: row.token,
        error: (e as Error).message,
      });
      setTimeout(() => void this.#release(text, row), 1000);
    }
  }

  /**
   * The rows of claims whose statement failed here (#claim): it may have committed with its
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
  async #recoverLostClaims(): Promise<void> {
    if (this.#recovering || this.#lostClaims.length === 0) return;
    this.#recovering = true;
    try {
      const now = this.opts.now();
      const rows = await this.#q<
        { token: string; execution_id: string; step: string; owner_node: string | null }
      >(q.LOST_CLAIM_ROWS, [
        this.opts.nodeId,
        this.#lostClaims.map(({ session_id, claimed_ms }) => ({ session_id, claimed_ms })),
      ]);
      this.#lostClaims = this.#lostClaims.filter((c) => c.until > now);
      if (this.#lostClaims.length === 0) this.#lostHandled.clear();
      for (const row of rows) {
        if (this.#lostHandled.has(row.token)) continue;
        // Memory answers whether the dispatch was recorded only once no append is in doubt
        // (throws while the database is away: the next check looks again).
        if (row.owner_node === this.opts.nodeId) await this.executions.settle(row.execution_id);
        this.#lostHandled.add(row.token);
        log.engine.warn("a claim's answer was lost; its task goes out again", {
          execution_id: row.execution_id,
          step: row.step,
          token: row.token,
          owner_node: row.owner_node,
        });
        if (row.owner_node === null) {
          await this.#release(q.CANCEL_TASK, row);
        } else if (row.owner_node !== this.opts.nodeId) {
          this.#onOwner(row.execution_id, {
            type: "uncertain",
            token: row.token,
            reason: "the answer to the claim that took the attempt was lost",
          });
        } else {
          await this.executions.serial(row.execution_id, async () => {
            const st = this.executions.stateOf(row.execution_id);
            if (st && stepOfToken(st, row.token)) return; // its dispatch was recorded
            await this.#release(q.REQUEUE_TASK, row);
            this.wake();
          });
        }
      }
    } catch {
      // The database is still away: the next check looks again.
    } finally {
      this.#recovering = false;
    }
  }

  /** A worker that went away before the answer never saw these attempts. */
  #delivered(s: Session, tasks: TaskPayload[], signal?: AbortSignal): TaskPayload[] {
    if (!signal?.aborted) return tasks;
    for (const t of tasks) {
      const cmd = {
        type: "uncertain" as const,
        token: t.token,
        reason: `the request of worker \`${s.worker_id}\` closed before the task was delivered`,
      };
      this.#onOwner(t.execution_id, cmd);
    }
    return [];
  }

  /** Runs an uncertain command on the execution's owner, here or through its inbox. */
  #onOwner(id: string, cmd: { type: "uncertain"; token: string; reason: string }): void {
    if (this.executions.holds(id)) {
      this.executions.uncertain(id, cmd.token, cmd.reason);
    } else if (this.executions.remote) {
      this.executions.remote.forward(id, cmd).catch((e) =>
        log.engine.error("cannot forward an uncertain attempt", {
          execution_id: id,
          error: (e as Error).message,
        })
      );
    }
  }

  async heartbeat(sessionId: string, tokens: string[]): Promise<string[]> {
    const s = await this.#session(sessionId);
    const cancel = new Set(
      (await this.#q<{ token: string }>(q.TAKE_CANCELLED, [sessionId, tokens])).map((r) => r.token),
    );
    // A token no server knows any more (its result was applied, or it never existed).
    const unknown = tokens.filter((t) => !cancel.has(t) && !s.told.has(t));
    if (unknown.length > 0) {
      const known = new Set(
        (await this.#q<{ token: string }>(q.KNOWN_TOKENS, [unknown])).map((r) => r.token),
      );
      for (const t of unknown) {
        const id = executionOfToken(t);
        const st = id ? this.executions.stateOf(id) : undefined;
        // Memory in doubt may lack a dispatch that landed: not a reason to cancel.
        if (id && this.executions.inDoubt(id)) continue;
        if (!known.has(t) && !(st && stepOfToken(st, t))) cancel.add(t);
      }
    }
    for (const t of cancel) s.told.add(t);
    if (s.told.size > 10_000) s.told.clear();
    const running = tokens.filter((t) => !cancel.has(t));
    if (running.length > 0) await this.#q(q.CONFIRM_TOKENS, [running, this.opts.now()]);
    return [...cancel];
  }

  async unregister(sessionId: string): Promise<void> {
    const s = await this.#session(sessionId);
    this.sessions.delete(sessionId);
    this.#contacts.delete(sessionId);
    await this.#q(q.DELETE_SESSION, [sessionId]);
    const held = await this.#q<{ token: string; execution_id: string }>(
      "SELECT token, execution_id FROM orbit_tasks WHERE session_id = $1 AND state = 'claimed'",
      [sessionId],
    );
    for (const h of held) {
      this.#onOwner(h.execution_id, {
        type: "uncertain",
        token: h.token,
        reason: `worker \`${s.worker_id}\` unregistered while holding the attempt`,
      });
    }
  }

  async report(
    token: string,
    result: { output: unknown } | { error: ErrorInfo },
    take?: { sessionId: string; maxTasks: number },
    signal?: AbortSignal,
  ): Promise<{ accepted: boolean; tasks: TaskPayload[] }> {
    const id = executionOfToken(token);
    const a = id ? this.executions.stateOf(id) : undefined;
    // The dispatch of this token may still be in this node's inbox (a fast worker reported
    // before the owner recorded it): apply the inbox first, in order.
    if (id && a && !stepOfToken(a, token)) await this.opts.drainInbox(id);
    // Eager dispatch, as on one server: when this node owns the execution and the worker
    // named its session, a step the result makes ready is dispatched to it in the same
    // append (its task row is written claimed). Only a step that was not queued before: a
    // queued row may be claimed by another server at this very moment.
    const s = take && take.maxTasks > 0 ? this.sessions.get(take.sessionId) : undefined;
    const want = s ? Math.min(take!.maxTasks, s.concurrency) : 0;
    const eager = s && id && a ? this.eager(id, s) : undefined;
    // The result leaves nothing of its execution for the freed slot: a task queued here for an
    // execution this node owns is dispatched to it now, while the result is decided, so that
    // both appends share one commit, which also claims the task's row (no claim statement;
    // COMMIT_OWNED's take). The row may be claimed elsewhere meanwhile, or an older row of the
    // task may wait elsewhere: that dispatch is then not written, and the claim below decides.
    let local: Promise<TaskPayload[]> | null = null;
    // Or the step it made ready is another worker's (another language, another task list): a
    // poll of that worker waiting here gets it in the result's commit (#offerReady).
    let offer: StartOffer | null = null;
    const follow = id && a
      ? (state: ExecutionState) => {
        offer?.release();
        offer = null;
        const command = eager?.follow(state) ?? null;
        if (command) return command;
        if (eager && !local && !signal?.aborted && this.sessions.has(s!.session_id)) {
          local = this.#takeLocal(s!, want);
        }
        offer = this.#offerReady(id, state);
        return offer?.command ?? null;
      }
      : undefined;
    // Owned elsewhere: the owner dispatches the next step to this session in the commit of
    // the result and sends the task back with its reply.
    const remote = s && id && !a
      ? {
        session_id: s.session_id,
        worker_id: s.worker_id,
        runtime: s.runtime,
        tasks: s.tasks,
      }
      : undefined;
    let r;
    try {
      r = await this.executions.report(token, result, follow, remote);
    } catch (e) {
      (offer as StartOffer | null)?.release();
      // The result was not applied (or not known to be): the worker hears an error and retries
      // it; tasks dispatched for its slot never reach it, so they go out again.
      if (local) {
        undelivered(this.executions, s!, await (local as Promise<TaskPayload[]>), "failed");
      }
      throw e;
    }
    const offered = offer as StartOffer | null;
    if (offered) {
      if (r.followed && r.state) offered.deliver(r.state);
      else offered.release();
    }
    if (s) this.#touch(s);
    const tasks = eager ? eager.tasks(r) : (r.tasks ?? []);
    if (tasks.length > 0) {
      this.tasksClaimed += tasks.length;
      this.metrics.tasksDispatched.inc({}, tasks.length);
    }
    if (local) tasks.push(...await (local as Promise<TaskPayload[]>)); // counted by #takeLocal
    // Nothing yet for the freed slot: its next task comes from the queue now, in this answer,
    // as on one server (the claim prefers this node's own executions), instead of after the
    // worker's next poll.
    const usable = () =>
      s !== undefined && want > tasks.length && !signal?.aborted &&
      this.sessions.has(s.session_id);
    // First from this node's own queue, as one server looks at its queue again after the
    // commit: a task queued by a commit that landed with this result's is taken in a commit
    // of its own dispatch (no claim statement) rather than through the claim and the
    // dispatch commit after it.
    if (usable()) {
      tasks.push(...await this.#takeLocal(s!, want - tasks.length));
    }
    if (usable()) {
      const more = want - tasks.length;
      // The result is applied whatever happens here: a failed claim only leaves the slot to poll.
      tasks.push(
        ...await this.#claim(s!, more).catch((e) => {
          log.engine.warn("claim after a result failed; the worker polls", {
            error: (e as Error).message,
          });
          return [];
        }),
      );
    }
    return { accepted: r.accepted, tasks: s ? this.#delivered(s, tasks, signal) : tasks };
  }

  /**
   * Eager dispatch, as on one server: the first step that a result makes ready and that the
   * session serves is dispatched to it in the same append (its task row is written claimed).
   * Only a step that was not queued before: a queued row may be claimed by another server at
   * this very moment. Used for results reported here and for results forwarded to this owner.
   */
  eager(id: string, s: EagerSession): {
    follow: (state: ExecutionState) => Command | null;
    tasks: (r: { followed: boolean; state: ExecutionState | null }) => TaskPayload[];
  } {
    let taken: { step: string; token: string } | null = null;
    return {
      follow: (state) => {
        taken = null;
        const st = newlyQueued(this.executions.stateOf(id), state).find((st) => serves(s, st));
        if (!st) return null;
        const command = dispatchTo(state.execution_id, st.id, s, this.opts.newId);
        taken = { step: st.id, token: command.token };
        return command;
      },
      tasks: (r) => {
        const t = taken as { step: string; token: string } | null;
        return r.followed && r.state && t ? [payload(r.state, t.step, t.token)] : [];
      },
    };
  }

  /** Every session of the cluster with the attempts it holds (claimed rows). */
  #sessionRows(): Promise<Array<SessionRecord & { in_flight: number }>> {
    return this.#q<SessionRecord & { in_flight: number }>(
      `SELECT s.*, (SELECT count(*) FROM orbit_tasks t WHERE t.session_id = s.session_id
         AND t.state = 'claimed') AS in_flight FROM orbit_sessions s ORDER BY s.created_ms`,
    );
  }

  /**
   * WorkerService.sessionViews: the sessions of the whole cluster for `/pending`, their last
   * contact the latest known here or written by any server (a poll open on another server is
   * written as contact every CONTACT_FLUSH_MS), those silent past the sweep's limit left out.
   */
  async sessionViews(): Promise<SessionView[]> {
    const now = this.opts.now();
    const out: SessionView[] = [];
    for (const r of await this.#sessionRows()) {
      const local = this.sessions.get(r.session_id);
      const last = Math.max(
        Number(r.last_contact_ms),
        this.#contacts.get(r.session_id) ?? 0,
        local?.last_contact_ms ?? 0,
      );
      const polling = local?.polling ?? 0;
      if (polling === 0 && now - last > this.opts.sessionTimeoutMs + 1000) continue;
      out.push({
        session_id: r.session_id,
        worker_id: r.worker_id,
        runtime: r.runtime,
        tasks: r.tasks,
        concurrency: r.concurrency,
        last_contact_ms: last,
        polling,
        busy: Number(r.in_flight),
      });
    }
    return out;
  }

  /**
   * WorkerService.sessionCount, for `/v1/health`: read once for the calls that arrive while it
   * runs, awaited up to SESSION_COUNT_WAIT_MS; past that, or when it fails, the last count read
   * (or this server's cached sessions), so that health never waits on a wedged connection.
   */
  async sessionCount(): Promise<number> {
    this.#countRead ??= this.#q<{ n: number }>(q.COUNT_SESSIONS)
      .then(([r]) => this.#lastCount = r?.n ?? 0)
      .finally(() => this.#countRead = null);
    try {
      return await withTimeout(this.#countRead, SESSION_COUNT_WAIT_MS);
    } catch {
      return this.#lastCount ?? this.sessions.size;
    }
  }

  async list(): Promise<unknown[]> {
    const rows = await this.#sessionRows();
    return rows.map((r) => ({
      session_id: r.session_id,
      worker_id: r.worker_id,
      runtime: r.runtime,
      tasks: r.tasks,
      concurrency: r.concurrency,
      created_ms: r.created_ms,
      last_contact_ms: Math.max(r.last_contact_ms, this.#contacts.get(r.session_id) ?? 0),
      in_flight: Number(r.in_flight),
    }));
  }

  installed(
    prev: ExecutionState | null,
    next: ExecutionState,
    events: readonly HistoryEvent[] = [],
  ): void {
    let queued = false;
    for (const e of events) {
      if (e.type === "StepScheduled") queued = true;
      if (e.type === "StepAttemptUncertain") {
        queued = true;
        this.metrics.tasksRedelivered.inc();
        log.engine.warn("attempt outcome uncertain; redelivering", {
          execution_id: next.execution_id,
          step: e.step,
          attempt: e.attempt,
          reason: e.reason,
        });
      }
    }
    const live = new Set<string>();
    for (const { token, info } of liveTokens(next)) {
      live.add(token);
      if (next.phase === "closed") continue;
      const uncertain = (info as { uncertain?: boolean }).uncertain === true;
      if (!uncertain && !this.#held.has(token)) {
        this.#held.set(token, {
          execution_id: next.execution_id,
          session: info.worker_session,
          worker_id: info.worker_id,
        });
      }
      if (uncertain) this.#held.delete(token);
    }
    if (prev) {
      for (const { token } of liveTokens(prev)) {
        if (live.has(token) && next.phase !== "closed") continue;
        this.#held.delete(token);
        this.#orphans.delete(token);
      }
    }
    if (queued) {
      this.#local.enqueue(next);
      this.wake();
    }
  }

  dropped(last: ExecutionState): void {
    for (const { token } of liveTokens(last)) {
      this.#held.delete(token);
      this.#orphans.delete(token);
    }
  }

  /**
   * Writes the contacts seen since the last write (every 250 ms). One write at a time: a write
   * still waiting (a slow database, a row another server's write holds) is not joined by the
   * next ones, which would take every request connection of this server; what comes meanwhile
   * goes with the next write. A write that has not finished within 10 s (a wedged connection)
   * no longer holds them back.
   */
  async #flushContacts(): Promise<void> {
    for (const s of this.sessions.values()) {
      if (s.polling > 0) this.#contacts.set(s.session_id, this.opts.now());
    }
    if (this.#contacts.size === 0) return;
    const now = this.opts.now();
    if (this.#flushStarted !== null && now - this.#flushStarted < 10_000) return;
    const started = this.#flushStarted = now;
    const batch = [...this.#contacts].sort((a, b) => a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0);
    this.#contacts.clear();
    try {
      const kept = new Set(
        (await this.#q<{ session_id: string }>(q.TOUCH_SESSIONS, [
          batch.map(([id, ms]) => ({ id, ms })),
        ])).map((r) => r.session_id),
      );
      // No row to update: another server removed the session (it expired there, e.g. while
      // this server's writes failed for longer than the session timeout).
      for (const [id] of batch) if (!kept.has(id)) this.#gone(id);
    } catch {
      for (const [id, ms] of batch) {
        this.#contacts.set(id, Math.max(ms, this.#contacts.get(id) ?? 0));
      }
    } finally {
      if (this.#flushStarted === started) this.#flushStarted = null;
    }
  }

  /**
   * The owner's watch over the sessions holding its attempts (every 500 ms). A check that has
   * not finished within 10 s (a wedged connection) no longer holds the next ones back.
   */
  async #checkSessions(): Promise<void> {
    if (this.#checking && this.opts.now() - this.#checkStarted < 10_000) return;
    if (this.#checking) {
      log.engine.warn("the worker session check has not finished for 10 s; starting another");
    }
    const mine = this.#checkStarted = this.opts.now();
    this.#checking = true;
    try {
      const now = this.opts.now();
      const calm = now - this.opts.healthySince() > this.opts.sessionTimeoutMs + 1000;
      for (const [token, at] of [...this.#orphans]) {
        if (at > now) continue;
        this.#orphans.delete(token);
        const h = this.#held.get(token);
        const id = h?.execution_id ?? executionOfToken(token);
        if (!id) continue;
        this.#held.delete(token);
        this.executions.uncertain(
          id,
          token,
          "no result arrived within --session-timeout after this node took the execution over",
        );
      }
      if (!calm) return;
      const sessions = new Set<string>();
      for (const h of this.#held.values()) sessions.add(h.session);
      /** Sessions found alive in this pass: only their attempts are judged by confirmation. */
      const alive = new Set<string>();
      if (sessions.size > 0) {
        const rows = await this.#q<{ session_id: string; last_contact_ms: number }>(
          q.SESSION_CONTACTS,
          [[...sessions]],
        );
        const contact = new Map(rows.map((r) => [r.session_id, r.last_contact_ms]));
        // Inserted before it was cached, so a session cached here without a row was removed.
        for (const id of sessions) if (!contact.has(id)) this.#gone(id);
        for (const [token, h] of [...this.#held]) {
          const local = this.sessions.get(h.session);
          const last = Math.max(contact.get(h.session) ?? -Infinity, local?.last_contact_ms ?? 0);
          if (
            (local && local.polling > 0) ||
            ((contact.has(h.session) || local) && now - last <= this.opts.sessionTimeoutMs)
          ) {
            alive.add(h.session);
            continue;
          }
          this.#held.delete(token);
          this.#orphans.delete(token);
          this.executions.uncertain(
            h.execution_id,
            token,
            `worker \`${h.worker_id}\` stopped responding`,
          );
        }
      }
      // After the sessions: an attempt its live worker does not list in its heartbeats was
      // never received (the answer that carried it was lost, e.g. with a server that paused):
      // redelivered one session timeout after its claim or its last confirmation.
      if (this.#held.size > 0) {
        const rows = await this.#q<{ token: string; claimed_ms: number | null }>(
          q.CONFIRMED_AT,
          [[...this.#held.keys()]],
        );
        for (const r of rows) {
          const h = this.#held.get(r.token);
          if (!h || r.claimed_ms === null || !alive.has(h.session)) continue;
          if (now - Number(r.claimed_ms) <= this.opts.sessionTimeoutMs + 1000) continue;
          this.#held.delete(r.token);
          this.#orphans.delete(r.token);
          this.executions.uncertain(
            h.execution_id,
            r.token,
            `worker \`${h.worker_id}\` does not list the attempt in its heartbeats`,
          );
        }
      }
      // Sessions silent past the timeout are gone for every server (404 UNKNOWN_SESSION).
      const expired = await this.#q<{ session_id: string }>(q.EXPIRE_SESSIONS, [
        this.opts.sessionTimeoutMs + 1000,
        now,
      ]);
      // Gone for every server: forgotten here too, even with a poll waiting (its row cannot
      // come back; kept, it would be served here and nowhere else).
      for (const { session_id } of expired) {
        const s = this.#forget(session_id);
        log.engine.info("worker session expired", { session_id, worker_id: s?.worker_id });
      }
      // A cached session another server removed.
      for (const s of [...this.sessions.values()]) {
        if (s.polling === 0 && now - s.last_contact_ms > this.opts.sessionTimeoutMs + 1000) {
          this.sessions.delete(s.session_id);
        }
      }
    } catch (e) {
      log.engine.warn("cannot check worker sessions", { error: (e as Error).message });
    } finally {
      if (this.#checkStarted === mine) this.#checking = false;
    }
  }
}
