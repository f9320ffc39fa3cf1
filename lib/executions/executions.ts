/**
 * The engine shell for executions: it keeps the state of every running execution in memory,
 * runs each command through the pure core (`engine/decide.ts`), commits the events through the
 * group committer, and only after the commit installs the new state, wakes waiters, arms the
 * durable timers (retry backoff, step deadlines) and tells the worker service what changed.
 *
 * Commands for one execution run one at a time (a promise chain per id); commands for
 * different executions run concurrently and their appends share commits.
 *
 * With `cacheExecutions` (a single server, a standby's leader, a shared-mode server) memory is
 * bounded: past that many, executions that only wait leave memory (lib/executions/cache.ts),
 * and whatever happens to one that is not held — a command (signal, cancel, task or child
 * result, timer), a wait, a start of its id — loads it from history first, through the same
 * path as a load at start (`#loadOne`). Start-up loads only executions with work in flight or
 * a timer due soon; a poll every second loads those whose timer comes due.
 *
 * In shared mode a load needs the owner first: a command on an execution this node does not
 * hold returns null, and the caller's forward (`RemoteCommands`) or the inbox reads the owner
 * and loads it here (`load`) at the epoch this node owns it with, or sends it to the owner's
 * inbox. The wake-up poll lists only executions this node owns (`Ownership.listWaking`), and
 * a takeover or resume loads only those with work due (`adopt`).
 *
 * Why one file of this size: `Executions` is the only owner of the memory map and of the
 * per-execution serial chains, and every operation here (start, command, report, wait, load,
 * recovery, the resolution of appends in doubt) reads and changes both under the one
 * invariant "memory changes only after a commit, in the execution's turn". Split across
 * classes, that invariant would have to be upheld by every part. What does not touch that
 * state lives beside it: the contracts (`types.ts`), the group commit (`committer.ts`), the
 * bounded cache policy (`cache.ts`), the memory audit (`audit.ts`), shared mode's queue rows
 * (`shared_changes.ts`), reads (`reads.ts`), signals and queries (`signals.ts`), and
 * "why is it waiting?" (`pending.ts`).
 */
import {
  type ChildLimits,
  type Command,
  type Context,
  continuation,
  decide,
  wakeups,
} from "../engine/decide.ts";
import type { ErrorInfo, HistoryEvent } from "../engine/events.ts";
import type { WorkflowDoc } from "../engine/ir.ts";
import { type ExecutionState, inFlightCount, replay } from "../engine/state.ts";
import type { GroupCommitter } from "./committer.ts";
import type { Definitions } from "../definitions.ts";
import {
  type AppendItem,
  DuplicateExecutionError,
  type ExecutionRow,
  FencedError,
  HistoryConflictError,
  InboxGoneError,
  mayHaveCommitted,
  ownerFencedError,
  readRun,
  type Store,
  TaskTakenError,
  type WakingRow,
} from "../store/store.ts";
import { sharedChanges } from "./shared_changes.ts";
import { conflict, invalid, notFound, OrbitError, storageError } from "../errors.ts";
import type { Metrics } from "../metrics.ts";
import { validateAgainst } from "../jsonschema.ts";
import { log } from "../log.ts";
import type { EagerSession, TaskPayload } from "../workers/sessions.ts";
import { MemoryAudit } from "./audit.ts";
import { evictable, WAKE_AHEAD_MS, WAKE_POLL_MS, wakeAt } from "./cache.ts";
import {
  type Clock,
  EXECUTION_ID_RE,
  type ExecutionObserver,
  executionOfToken,
  type Ownership,
  type RemoteCommands,
  rowOf,
  type StartOffer,
  type StartRequest,
} from "./types.ts";

/**
 * An append whose outcome is unknown (#suspect): the item sent and what memory would have
 * installed had it answered. `item` is absent once the append is resolved and only the rebuild
 * from history is left to do.
 */
interface Doubt {
  timer: ReturnType<typeof setTimeout> | null;
  /** The append resolved as landed had its dispatches handed out already (see `append`). */
  delivered?: boolean;
  append?: {
    item: AppendItem;
    prev: ExecutionState | null;
    next: ExecutionState;
    def: WorkflowDoc;
    events: HistoryEvent[];
    /** Its dispatches were handed to their workers already (a claim's, through the inbox). */
    delivered: boolean;
  };
}

interface Active {
  state: ExecutionState;
  def: WorkflowDoc;
  timers: ReturnType<typeof setTimeout>[];
}

/** Whether an append from `prev` to `next` changes nothing of the row but its history's end. */
function steady(prev: ExecutionState, next: ExecutionState, wake: number | null): boolean {
  return next.phase !== "closed" && prev.run_id === next.run_id && prev.status === next.status &&
    prev.input === next.input && prev.error === next.error && wakeAt(prev) === wake;
}

export class Executions {
  /** The executions held in memory: only this class reads or changes the map. */
  readonly #active = new Map<string, Active>();
  #chains = new Map<string, Promise<unknown>>();
  /** Waits on running executions; called with the closing row, or with nothing on release. */
  #waiters = new Map<string, Set<(row?: ExecutionRow | null) => void>>();
  #stopped = false;
  /** Starts past the limit check whose first append has not committed yet. */
  #starting = 0;
  observer: ExecutionObserver | null = null;
  /** More observers (the HTTP adapter, the child coordinator), told after `observer`. */
  readonly #observers: ExecutionObserver[] = [];
  /**
   * Executions whose last append failed in a way that may have written it (a connection lost
   * after COMMIT was sent, perhaps still to land): memory may be behind the history. Nothing
   * more happens to one before its doubt is resolved (#resync: the same append committed again
   * decides it), before its next command and in the background until that works.
   */
  readonly #suspect = new Map<string, Doubt>();
  /** Shared mode: where commands for executions owned elsewhere go. */
  remote: RemoteCommands | null = null;
  /**
   * Runs memory saw end with continue-as-new whose next run has not started yet (the two are
   * separate commits, see #continue): a cancel, a signal or a wait that comes in between
   * starts or waits for the next run rather than finding the execution ended.
   */
  readonly #continuing = new Map<string, { ended: ExecutionState; def: WorkflowDoc }>();
  /** Running executions not held in memory (evicted, or not loaded at start). */
  #idle = 0;
  #sweepQueued = false;
  #wakePoll: ReturnType<typeof setInterval> | undefined;
  #polling = false;
  /** The audit of memory against the history (see #auditOnce). */
  #audit: MemoryAudit | undefined;

  constructor(
    readonly store: Store,
    readonly committer: GroupCommitter,
    readonly defs: Definitions,
    readonly clock: Clock,
    readonly metrics: Metrics,
    readonly opts: {
      maxActive: number | null;
      readOnly?: boolean;
      ownership?: Ownership | null;
      /**
       * `--cache-executions`: executions held in memory beyond which idle ones leave it and
       * load again on demand. Absent or null: every running execution stays in memory.
       */
      cacheExecutions?: number | null;
      /** `--max-child-depth`, `--max-children-per-execution` (absent: none). */
      childLimits?: ChildLimits;
    },
  ) {}

  /** What the pure core sees of the server at `now`: the clock, ids, and the child limits. */
  #ctx(now: number): Context {
    const limits = this.opts.childLimits;
    return { now, newId: this.clock.newId, ...(limits ? { limits } : {}) };
  }

  /** Whether executions leave memory and load on demand (a bounded cache; never on a standby). */
  get #lazy(): boolean {
    return (this.opts.cacheExecutions ?? null) !== null && !this.opts.readOnly;
  }

  /**
   * Whether a command, a wait or a start loads a running execution memory does not hold by
   * itself: on one server. In shared mode another node may own it; the forward or the inbox
   * reads the owner first and loads it (`load`) only when this node owns it.
   */
  get #loadsHere(): boolean {
    return this.#lazy && !this.opts.ownership;
  }

  /** Whether memory is bounded (`--cache-executions`): waiting executions may leave it. */
  get caches(): boolean {
    return this.#lazy;
  }

  /** Running executions of this server: those held in memory and those left to the store. */
  get running(): number {
    return this.#active.size + this.#idle;
  }

  /** Shared mode's ownership, or null on a single server and in standby mode. */
  get ownership(): Ownership | null {
    return this.opts.ownership ?? null;
  }

  /**
   * The append of a change: in shared mode with the epoch held (a new execution takes its
   * root's, or 1) and the queue rows the change makes, plus the inbox entries it applies.
   */
  #item(
    prev: ExecutionState | null,
    next: ExecutionState,
    events: HistoryEvent[],
    now: number,
    create: boolean,
    inbox: number[] = [],
  ): AppendItem {
    const item: AppendItem = { row: rowOf(next, now), events, wake_at_ms: wakeAt(next) };
    if (create) item.create = true;
    else if (prev && steady(prev, next, item.wake_at_ms!)) item.steady = true;
    const own = this.opts.ownership;
    if (own) {
      // A child is created at its parent's epoch: the commit checks the parent's row at it.
      const epoch = own.epochOf(next.execution_id) ??
        (next.parent_id !== null ? own.epochOf(next.parent_id) : undefined) ??
        (next.root_id !== next.execution_id ? own.epochOf(next.root_id) : undefined) ?? 1;
      // A forwarded command (inbox entries) may be answered with its rows' task inputs left
      // out: those rows keep them (sharedChanges).
      const changes = sharedChanges(prev, next, events, now, inbox.length > 0);
      for (const t of changes.enqueue) if (t.claimed) t.claimed.node_id = own.nodeId;
      for (const t of changes.take) t.claimed_by = own.nodeId;
      item.shared = { node_id: own.nodeId, epoch, ...changes, inbox };
      if (create) item.shared.instance = own.instance;
    }
    return item;
  }

  /** After a committed append: the epoch is held from now on (a create's, a child's). */
  #held(item: AppendItem): void {
    if (item.shared && item.row.status === "running") {
      this.opts.ownership!.hold(item.row.execution_id, item.shared.epoch);
    }
  }

  /**
   * Shared mode: an append was fenced, so another node owns the execution now. Memory lets it
   * go (timers, waiters stay to the database); nothing was written.
   */
  #fenced(id: string, e: FencedError): void {
    const a = this.#active.get(id);
    if (!this.opts.ownership) return;
    if (e.ownerNode === this.opts.ownership.nodeId) this.opts.ownership.replaced();
    log.engine.error("shared: dropped an execution another node took over", {
      execution_id: id,
      error: e.message,
    });
    this.drop(id);
    if (a) { for (const o of this.#allObservers()) o.dropped?.(a.state); }
  }

  /** Forgets an execution held in memory without touching the store (shared mode). */
  drop(id: string): void {
    const a = this.#active.get(id);
    if (a) { for (const t of a.timers) clearTimeout(t); }
    this.#active.delete(id);
    this.#continuing.delete(id);
    this.opts.ownership?.release(id);
    const timer = this.#suspect.get(id)?.timer;
    if (timer) clearTimeout(timer);
    this.#suspect.delete(id);
    // Its waits follow it from the database now (NOTIFY orbit_done from its new owner).
    for (const w of [...(this.#waiters.get(id) ?? [])]) w();
  }

  #allObservers(): ExecutionObserver[] {
    return this.observer ? [this.observer, ...this.#observers] : [...this.#observers];
  }

  /** Runs `fn` after every earlier operation on the same execution has finished. */
  serial<T>(id: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.#chains.get(id) ?? Promise.resolve();
    const next = prev.then(fn, fn);
    const tail = next.then(() => {}, () => {});
    this.#chains.set(id, tail);
    tail.then(() => {
      if (this.#chains.get(id) === tail) this.#chains.delete(id);
    });
    return next;
  }

  /** The state of an execution held in memory here, if it is. */
  stateOf(id: string): ExecutionState | undefined {
    return this.#active.get(id)?.state;
  }

  /**
   * Whether memory may answer reads of what it holds: always on one server; in shared mode
   * only while no other node can have taken this node's executions over (SharedNode).
   */
  memoryCurrent: () => boolean = () => true;

  /**
   * The state held here, for a read that answers a client (a query, `/pending`); undefined
   * when memory may be stale (memoryCurrent): the read replays the history instead.
   */
  currentStateOf(id: string): ExecutionState | undefined {
    return this.memoryCurrent() ? this.#active.get(id)?.state : undefined;
  }

  /** Whether the execution is held in memory here. */
  holds(id: string): boolean {
    return this.#active.has(id);
  }

  /**
   * Whether an append of the execution has an unknown outcome that is not resolved yet (see
   * #resync): until it is, memory may be behind the history, and nothing more happens to it.
   */
  inDoubt(id: string): boolean {
    return this.#suspect.has(id);
  }

  /**
   * Resolves an append of the execution whose outcome is unknown, if there is one (in its turn,
   * as a command would first): afterwards memory is level with the history. Throws while the
   * outcome cannot be found out (the store is away).
   */
  async settle(id: string): Promise<void> {
    if (!this.#suspect.has(id)) return;
    await this.serial(id, () => this.#suspect.has(id) ? this.#resync(id) : Promise.resolve());
  }

  /** How many executions memory holds. */
  get heldCount(): number {
    return this.#active.size;
  }

  /** The ids of the executions memory holds (a copy). */
  heldIds(): string[] {
    return [...this.#active.keys()];
  }

  /** The states of the executions memory holds. */
  *heldStates(): IterableIterator<ExecutionState> {
    for (const a of this.#active.values()) yield a.state;
  }

  /** Adds an observer of committed changes. */
  addObserver(o: ExecutionObserver): void {
    this.#observers.push(o);
  }

  /**
   * `link`: the parent of a child execution (a `child` step), whose root it shares, and the
   * child's depth. `admit` runs in the start's own turn, after the check for an id that runs
   * already and before the limit and the commit, and refuses the start by throwing: the child
   * coordinator checks there that the parent still waits for the child (a cancel of the parent
   * that commits later finds the child started, and its cancel is queued behind this start).
   */
  async start(
    req: StartRequest,
    link?: { parent_id: string; root_id: string; depth?: number },
    admit?: () => void,
  ): Promise<{ created: boolean; row: ExecutionRow }> {
    const id = req.execution_id ?? this.clock.newId();
    if (!EXECUTION_ID_RE.test(id)) {
      throw invalid(
        "INVALID_EXECUTION_ID",
        "execution_id must be 1-200 characters: letters, digits and _ . : @ + = - (no slash)",
      );
    }
    const def = await this.defs.resolve(req.workflow, req.version);
    if (def.input_schema) {
      const problems = validateAgainst(def.input_schema, req.input ?? null, "$.input");
      if (problems.length > 0) {
        throw invalid("INPUT_INVALID", `input does not match the input_schema of ${def.name}`, {
          problems,
        });
      }
    }
    return await this.serial(id, async () => {
      // Starting an existing id is a no-op that returns it. A running one is in memory; a
      // finished one is found by the insert itself (DuplicateExecutionError below), so a new
      // start costs no read — except at the limit, where an existing id still answers 200.
      // An earlier attempt whose commit has an unknown outcome is resolved first.
      if (this.#suspect.has(id)) await this.#resync(id);
      const a = this.#active.get(id);
      if (a) return { created: false, row: rowOf(a.state, this.clock.now()) };
      admit?.();
      // Starts of other ids run at the same time: those still committing hold a slot too.
      const running = this.running + this.#starting;
      if (this.opts.maxActive !== null && running >= this.opts.maxActive) {
        const existing = await this.store.getExecution(id);
        if (existing) return { created: false, row: existing };
        throw new OrbitError(
          429,
          "TOO_MANY_ACTIVE_EXECUTIONS",
          `this server runs ${running} executions, the limit of --max-active-executions; retry later`,
          { limit: this.opts.maxActive, retry_after_s: 1 },
          { "retry-after": "1" },
        );
      }
      this.#starting++;
      try {
        const now = this.clock.now();
        // The first task goes to a poll waiting here in the start's own commit.
        let offer: StartOffer | null = null;
        const d = await decide(
          def,
          null,
          {
            type: "start",
            execution_id: id,
            run_id: this.clock.newId(),
            input: req.input ?? null,
            ...(link ?? {}),
          },
          this.#ctx(now),
          (st) => {
            offer = this.observer?.offerFirst?.(st) ?? null;
            return offer?.command ?? null;
          },
        );
        const taken = offer as StartOffer | null;
        if (taken && !d.followed) taken.release();
        const item = this.#item(null, d.state, d.events, now, true);
        const row = item.row;
        try {
          await this.committer.append(item);
          this.#held(item);
        } catch (e) {
          if (taken && d.followed) taken.release();
          // Either the id exists (maybe from an earlier attempt of this very start whose
          // commit landed although it reported an error), or the outcome is unknown: read
          // the store, and load a running execution that memory does not hold yet.
          if (e instanceof DuplicateExecutionError) {
            const existing = await this.#adopt(id);
            if (existing) return { created: false, row: existing };
          } else if (!(e instanceof FencedError)) {
            this.#failed(id, e, {
              item,
              prev: null,
              next: d.state,
              def,
              events: d.events,
              delivered: false,
            });
          }
          throw storageError(e);
        }
        this.metrics.executionsStarted.inc();
        log.engine.info("execution started", {
          execution_id: id,
          workflow: def.name,
          version: def.version,
        });
        this.#install(id, null, d.state, def, d.events);
        if (taken && d.followed) taken.deliver(d.state);
        // A run that reached continue_as_new in its first append starts its next run now.
        if (d.state.continued) await this.#continue(d.state, def);
        return { created: true, row };
      } finally {
        this.#starting--;
      }
    });
  }

  /**
   * Runs a command on a running execution. Returns null when the execution is not running
   * here (finished or unknown); `accepted` false when the command no longer applied.
   *
   * `follow` may name a second command to decide on the state after the first one; its events
   * are committed in the same append (eager dispatch of the next step to the worker that
   * reported the previous one). `followed` tells whether it applied.
   *
   * `owned` (shared mode: the caller read from orbit_owners that this process owns it, and set
   * the epoch) loads it from history when memory does not hold it; should it have left memory
   * since, the owner is read again first.
   */
  command(
    id: string,
    cmd: Command,
    follow?: (s: ExecutionState) => Command | null,
    inbox?: number[],
    owned = false,
  ): Promise<
    {
      accepted: boolean;
      state: ExecutionState;
      followed: boolean;
      events: readonly HistoryEvent[];
    } | null
  > {
    return this.serial(id, async () => {
      if (this.#suspect.has(id)) await this.#resync(id);
      if (!this.#active.has(id) && this.#continuing.has(id)) {
        // Between a run that continued as new and its next run: a cancel starts the next run
        // cancelled (a chain that continues at once would otherwise never be caught running);
        // anything else waits for the next run.
        if (cmd.type === "cancel") {
          const next = await this.#continuePending(id, cmd.reason, inbox);
          if (next) return { accepted: true, state: next, followed: false, events: [] };
        } else await this.#continuePending(id);
      }
      if (!this.#active.has(id)) {
        if (this.#loadsHere) await this.#loadOne(id);
        else if (owned) await this.#loadOwned(id);
      }
      const a = this.#active.get(id);
      if (!a) return null;
      const now = this.clock.now();
      const ctx = this.#ctx(now);
      const d = await decide(a.def, a.state, cmd, ctx, follow);
      const followed = d.followed;
      if (d.events.length === 0) {
        return { accepted: d.accepted, state: a.state, followed, events: [] };
      }
      const item = this.#item(a.state, d.state, d.events, now, false, inbox);
      try {
        await this.committer.append(item);
      } catch (e) {
        // Memory stays as it was: the engine changes state only after a commit. The commit
        // may have landed all the same; the execution is rebuilt from history before it
        // moves again. Fenced in shared mode: another node owns it, memory lets it go. A task
        // taken by another server, or an inbox entry gone: nothing was written, memory is
        // right.
        if (e instanceof TaskTakenError || e instanceof InboxGoneError) throw e;
        if (!(e instanceof FencedError)) {
          this.#failed(id, e, {
            item,
            prev: a.state,
            next: d.state,
            def: a.def,
            events: d.events,
            // An inbox `dispatched` records what a claim handed to a worker already.
            delivered: cmd.type === "dispatch" && (inbox?.length ?? 0) > 0,
          });
        } else this.#fenced(id, e);
        throw storageError(e);
      }
      this.#install(id, a.state, d.state, a.def, d.events);
      if (d.state.continued) await this.#continue(d.state, a.def);
      return { accepted: d.accepted, state: d.state, followed, events: d.events };
    });
  }

  async cancel(id: string, reason: string): Promise<ExecutionRow> {
    const r = await this.command(id, { type: "cancel", reason });
    if (r === null && this.remote) {
      const f = await this.remote.forward(id, { type: "cancel", reason });
      if (f?.row) return f.row;
    }
    if (r === null) {
      const row = await this.store.getExecution(id);
      if (!row) throw notFound("UNKNOWN_EXECUTION", `execution ${id} does not exist`);
      if (row.status !== "running") {
        throw conflict("EXECUTION_FINISHED", `execution ${id} is already ${row.status}`, {
          status: row.status,
        });
      }
      throw notFound("UNKNOWN_EXECUTION", `execution ${id} is not running on this server`);
    }
    return rowOf(r.state, this.clock.now());
  }

  /**
   * Applies a worker's result; `accepted` false when the step no longer waits for it. With
   * `follow`, a dispatch decided on the new state is committed together with the result.
   */
  async report(
    token: string,
    result: { output: unknown } | { error: ErrorInfo },
    follow?: (s: ExecutionState) => Command | null,
    take?: EagerSession,
  ): Promise<
    {
      accepted: boolean;
      state: ExecutionState | null;
      followed: boolean;
      tasks?: TaskPayload[];
    }
  > {
    const id = executionOfToken(token);
    if (id === null) {
      throw invalid("INVALID_TOKEN", "a task token has the form <execution id>/<uuid>");
    }
    const cmd: Command = "error" in result
      ? { type: "fail", token, error: result.error }
      : { type: "complete", token, output: result.output };
    const own = this.opts.ownership;
    const held = own?.epochOf(id);
    let r = await this.command(id, cmd, follow);
    if (r && !r.accepted && r.events.length === 0 && own && this.remote) {
      // Refused with no write, so no fence was met: memory may be that of an owner that lost
      // the execution (paused, or its heartbeat wedged, and not reconciled yet), which does not
      // know the new owner's tokens. Refused only once the owner is confirmed; otherwise the
      // execution is let go and the result goes to its owner.
      const o = await own.ownerOf(id);
      if (!o || o.node_id !== own.nodeId || (held !== undefined && o.epoch !== held)) {
        if (this.#active.has(id)) {
          this.#fenced(id, ownerFencedError(id, o ?? { node_id: null, epoch: null }, held ?? 0));
        }
        r = null;
      } else if (((await this.remote.drainOwned?.(id)) ?? 0) > 0) {
        // Owned here: the attempt's dispatch may still be an entry of this node's inbox
        // (another server's claim wrote it); applied now, the result is decided again.
        r = await this.command(id, cmd, follow);
      }
    }
    if (r === null && this.remote) {
      const f = await this.remote.forward(id, cmd, take);
      if (f) {
        if (!f.accepted) this.metrics.resultsIgnored.inc();
        else if ("error" in result) this.metrics.tasksFailed.inc();
        else this.metrics.tasksSucceeded.inc();
        return { accepted: f.accepted, state: null, followed: false, tasks: f.tasks ?? [] };
      }
      // Nobody owns it: it finished, or it was taken over here meanwhile.
      r = await this.command(id, cmd, follow);
    }
    if (r === null) {
      if (!(await this.store.getExecution(id))) {
        throw notFound("UNKNOWN_TASK", `no execution ${id} for this task token`);
      }
      this.metrics.resultsIgnored.inc();
      return { accepted: false, state: null, followed: false };
    }
    if (!r.accepted) this.metrics.resultsIgnored.inc();
    else if ("error" in result) this.metrics.tasksFailed.inc();
    else this.metrics.tasksSucceeded.inc();
    return r;
  }

  /** Waits until the execution is no longer running, at most `ms`; returns its row. */
  /** A standby runs nothing: it re-reads the row every second until it closes or time is up. */
  async #pollUntilClosed(
    row: ExecutionRow,
    ms: number,
    signal?: AbortSignal,
  ): Promise<ExecutionRow> {
    const end = this.clock.now() + ms;
    while ((row.status === "running" || row.status === "continued") && !signal?.aborted) {
      const left = end - this.clock.now();
      if (left <= 0) break;
      // Shared mode: NOTIFY orbit_done wakes the wait at once; the timer is the safety net.
      await new Promise<void>((r) => {
        const t = setTimeout(done, Math.min(1000, left));
        const off = this.opts.ownership?.onDone(row.execution_id, done);
        signal?.addEventListener("abort", done);
        function done() {
          clearTimeout(t);
          off?.();
          signal?.removeEventListener("abort", done);
          r();
        }
      });
      if (this.#active.has(row.execution_id)) {
        return await this.wait(row.execution_id, Math.max(0, end - this.clock.now()), signal);
      }
      row = (await this.store.getExecution(row.execution_id)) ?? row;
    }
    return row;
  }

  async wait(id: string, ms: number, signal?: AbortSignal): Promise<ExecutionRow> {
    const end = this.clock.now() + ms;
    // One that is not held may be running all the same (left to the store): load it.
    // In shared mode it is read from the database until it closes (#pollUntilClosed), here or
    // on its owner; something that moves it loads it on its owner.
    const read = this.#loadsHere && !this.#active.has(id)
      ? await this.serial(id, () => this.#loadOne(id))
      : undefined;
    // A running execution is in memory here: no read before or after (its row when it closes
    // is the one just committed), which saves two queries per wait on the hot path. So is one
    // whose next run (continue-as-new) is about to start.
    if (!this.opts.readOnly && (this.#active.has(id) || this.#continuing.has(id))) {
      const closed = await new Promise<ExecutionRow | null>((resolve) => {
        const set = this.#waiters.get(id) ?? new Set();
        this.#waiters.set(id, set);
        const done = (row: ExecutionRow | null = null) => {
          clearTimeout(timer);
          set.delete(done);
          if (set.size === 0) this.#waiters.delete(id);
          signal?.removeEventListener("abort", onAbort);
          resolve(row);
        };
        const onAbort = () => done();
        const timer = setTimeout(done, ms);
        set.add(done);
        signal?.addEventListener("abort", onAbort);
      });
      if (closed) return closed;
      const a = this.#active.get(id);
      if (a) return rowOf(a.state, this.clock.now());
    }
    const row = read !== undefined && !this.#active.has(id)
      ? read
      : await this.store.getExecution(id);
    if (!row) throw notFound("UNKNOWN_EXECUTION", `execution ${id} does not exist`);
    // A standby runs nothing, and in shared mode another node may run it: read until it closes.
    if (this.opts.readOnly || this.opts.ownership) {
      // What is left of the wait (memory may have let it go: dropped in shared mode).
      return await this.#pollUntilClosed(row, Math.max(0, end - this.clock.now()), signal);
    }
    return row;
  }

  /**
   * Loads executions from history that this node owns (shared mode, with the epochs already
   * set in the ownership from orbit_owners): an inbox entry or a forwarded command for one that
   * is not held, and the due ones of a takeover or resume (`adopt`). Already held ones are
   * left as they are.
   */
  async load(ids: string[]): Promise<{ executions: number; in_flight: number }> {
    let executions = 0;
    let inFlight = 0;
    for (const id of ids) {
      await this.serial(id, async () => {
        if (this.#active.has(id)) return;
        await this.#loadOne(id, (state) => {
          executions++;
          inFlight += inFlightCount(state);
        });
      });
    }
    return { executions, in_flight: inFlight };
  }

  /**
   * Loads one execution from history unless memory holds it (runs inside `serial`): the one
   * path by which an execution comes back, at a shared-mode takeover and whenever something
   * happens to one that was left to the store. Answers the row read (null: no such
   * execution), or undefined when memory held it.
   */
  async #loadOne(
    id: string,
    loaded?: (state: ExecutionState) => void,
  ): Promise<ExecutionRow | null | undefined> {
    if (this.#active.has(id)) return undefined;
    if (this.#suspect.has(id)) {
      // A commit of it failed with an unknown outcome (a start that may have landed): the
      // rebuild marks a landed dispatch uncertain, which a plain load would not, and does not
      // count it out of the executions left to the store (it never was one).
      await this.#resync(id);
      return this.#active.has(id) ? undefined : await this.store.getExecution(id);
    }
    const row = await this.store.getExecution(id);
    if (!row || (row.status !== "running" && row.status !== "continued")) return row;
    if (this.#active.has(id)) return undefined;
    const def = await this.defs.get(row.workflow, row.version);
    if (!def) {
      log.engine.error("cannot load execution: its definition is missing", {
        execution_id: id,
        workflow: row.workflow,
        version: row.version,
      });
      return row;
    }
    const state = replay(await readRun(this.store, row.run_id));
    if (this.#active.has(id)) return undefined;
    loaded?.(state);
    if (this.#lazy && row.status === "running" && this.#idle > 0) this.#idle--;
    this.metrics.executionsLoaded.inc();
    this.#install(id, null, state, def, []);
    if (state.continued) await this.#continue(state, def);
    return row;
  }

  /**
   * Shared mode's resume and takeover: executions this node now owns (epochs set in the
   * ownership), with their status and next wake-up (`workflow_executions.wake_at_ms`). Every
   * one loads; with a bounded cache only those with work in flight, a timer due within
   * WAKE_AHEAD_MS, or a `continued` run to start, as at a single server's start. The rest are
   * counted as running and load on demand (their epoch is read again then). Answers how many
   * were adopted (`executions`), how many of them memory holds now (`loaded`) and their
   * attempts in flight.
   */
  async adopt(
    rows: Array<{ execution_id: string; status: string | null; wake_at_ms: number | null }>,
  ): Promise<{ executions: number; in_flight: number; loaded: number }> {
    if (!this.#lazy) {
      const r = await this.load(rows.map((r) => r.execution_id));
      return { ...r, loaded: r.executions };
    }
    const horizon = this.clock.now() + WAKE_AHEAD_MS;
    const due: string[] = [];
    let left = 0;
    for (const r of rows) {
      const id = r.execution_id;
      if (this.#active.has(id)) continue;
      // Counted now, before any load: a load of a running one (here, or by a command that
      // reaches it first) takes it back from the count.
      if (r.status === "running") this.#idle++;
      if (r.status !== "running" || (r.wake_at_ms !== null && r.wake_at_ms <= horizon)) {
        due.push(id);
      } else {
        this.opts.ownership?.release(id);
        left++;
      }
    }
    const r = await this.load(due);
    return { executions: r.executions + left, in_flight: r.in_flight, loaded: r.executions };
  }

  /**
   * Shared mode: the number of running executions this node owns, read from orbit_owners
   * (after a silence, when another node may have taken some that memory did not hold).
   */
  recount(owned: number): void {
    if (this.#lazy) this.#idle = Math.max(0, owned - this.#active.size);
  }

  /**
   * Starts the bounded cache's wake-up poll and sweep (once; nothing without a cache). A single
   * server's `recover` starts it; shared mode after its resume.
   */
  startCache(): void {
    if (!this.#lazy || this.#wakePoll !== undefined || this.#stopped) return;
    this.#wakePoll = setInterval(() => {
      this.#pollWakeups();
      this.#sweep();
    }, WAKE_POLL_MS);
    this.#scheduleSweep();
  }

  /**
   * Starts the audit of memory against the history (lib/executions/audit.ts): every few
   * seconds, executions whose queued task has waited with memory unchanged are checked.
   */
  startAudit(): void {
    if (this.#audit !== undefined || this.#stopped || this.opts.readOnly) return;
    this.#audit = new MemoryAudit(this, {
      readHistory: (run, after, limit) => this.store.readHistory(run, after, limit),
      behind: (id) => this.#markSuspect(id, undefined, 0),
      metrics: this.metrics,
      ownership: this.opts.ownership ?? null,
      now: () => this.clock.now(),
    });
    this.#audit.start();
  }

  /**
   * Shared mode: loads an execution this node owns that memory does not hold (an inbox entry,
   * a forwarded command), at the epoch already set or, if none is, the one orbit_owners names
   * for this process. Answers whether memory holds it now (false: another node, or another
   * process of this node id, owns it).
   */
  async loadOwned(id: string): Promise<boolean> {
    if (!this.#active.has(id)) await this.serial(id, () => this.#loadOwned(id));
    return this.#active.has(id);
  }

  /**
   * The epoch this process may use for `id`, from its ownership row `o`; null when the row is
   * not this process's. Only the process that obtained an epoch uses it: a row that names this
   * node id for another process of it is reclaimed first (Ownership.reclaim).
   */
  async #epochOf(
    id: string,
    o: { node_id: string; epoch: number; instance: string | null } | null,
  ): Promise<number | null> {
    const own = this.opts.ownership!;
    if (!o || o.node_id !== own.nodeId) return null;
    return o.instance === own.instance ? o.epoch : await own.reclaim(id);
  }

  /** `loadOwned` inside `serial`. */
  async #loadOwned(id: string): Promise<void> {
    const own = this.opts.ownership;
    if (!own || this.#active.has(id)) return;
    if (own.epochOf(id) === undefined) {
      const epoch = await this.#epochOf(id, await own.ownerOf(id));
      if (epoch === null || this.#active.has(id)) return;
      own.hold(id, epoch);
    }
    await this.#loadOne(id);
  }

  /**
   * Loads running executions from history (start-up): every one, or with a bounded cache
   * those with work in flight or a timer due soon (the rest load on demand).
   */
  async recover(): Promise<{ executions: number; in_flight: number }> {
    const lazy = this.#lazy;
    const loaded = lazy
      ? await this.store.loadRunningDue(this.clock.now() + WAKE_AHEAD_MS)
      : await this.store.loadRunning();
    let inFlight = 0;
    for (const { row, events } of loaded) {
      const def = await this.defs.get(row.workflow, row.version);
      if (!def) {
        log.engine.error("cannot recover execution: its definition is missing", {
          execution_id: row.execution_id,
          workflow: row.workflow,
          version: row.version,
        });
        continue;
      }
      const state = replay(events);
      inFlight += inFlightCount(state);
      this.metrics.executionsLoaded.inc();
      this.#install(row.execution_id, null, state, def, []);
    }
    await this.#recoverContinued();
    if (lazy) {
      this.#idle = Math.max(0, (await this.store.countRunning()) - this.#active.size);
      this.startCache();
    }
    this.startAudit();
    return { executions: this.#active.size, in_flight: inFlight };
  }

  /**
   * Loads the executions left to the store whose next timer comes due within WAKE_AHEAD_MS;
   * their timers are armed by the load. Pages through every such row; one poll at a time. In
   * shared mode only those this node owns, at the epoch the same read found.
   */
  async #pollWakeups(): Promise<void> {
    if (this.#polling || this.#stopped) return;
    this.#polling = true;
    try {
      const before = this.clock.now() + WAKE_AHEAD_MS;
      const own = this.opts.ownership;
      let after: WakingRow | null = null;
      for (;;) {
        const page: Array<WakingRow & { epoch?: number }> = own
          ? await own.listWaking(before, after, 1000)
          : await this.store.listWaking(before, after, 1000);
        for (const w of page) {
          if (this.#stopped) return;
          if (this.#active.has(w.execution_id)) continue;
          await this.serial(w.execution_id, () => {
            if (own && w.epoch !== undefined && !this.#active.has(w.execution_id)) {
              own.hold(w.execution_id, w.epoch);
            }
            return this.#loadOne(w.execution_id);
          });
        }
        if (page.length < 1000) break;
        after = page[page.length - 1]!;
      }
    } catch (e) {
      log.engine.warn("cannot load executions whose timers come due; retrying in 1 s", {
        error: (e as Error).message,
      });
    } finally {
      this.#polling = false;
    }
  }

  #scheduleSweep(): void {
    if (this.#sweepQueued || this.#stopped) return;
    this.#sweepQueued = true;
    setTimeout(() => this.#sweep(), 0);
  }

  /**
   * Past the cache's size, lets idle executions go, least recently changed first, down to
   * nine tenths of it. Idle: nothing in flight and no timer within the horizon (see
   * lib/executions/cache.ts), no command running or queued, nobody waiting on it, not being
   * rebuilt. Memory holds no more of it than its timers (cleared); the store has the rest.
   */
  #sweep(): void {
    this.#sweepQueued = false;
    const cap = this.opts.cacheExecutions ?? null;
    if (cap === null || !this.#lazy || this.#stopped || this.#active.size <= cap) return;
    let over = this.#active.size - Math.floor(cap * 0.9);
    const now = this.clock.now();
    for (const [id, a] of this.#active) {
      if (over <= 0) break;
      if (this.#chains.has(id) || this.#waiters.has(id) || this.#suspect.has(id)) continue;
      if (!evictable(a.state, now)) continue;
      for (const t of a.timers) clearTimeout(t);
      this.#active.delete(id);
      // Shared mode: the epoch is read again from orbit_owners when it loads.
      this.opts.ownership?.release(id);
      this.#idle++;
      this.metrics.executionsEvicted.inc();
      over--;
    }
  }

  /**
   * Continue-as-new commits the run's end, then the next run's start. A crash between the
   * two leaves the row `continued`: start the next run now, from the ended run's history.
   */
  async #recoverContinued(): Promise<void> {
    let cursor: string | undefined;
    do {
      const page = await this.store.listExecutions({
        status: "continued",
        limit: 500,
        ...(cursor ? { cursor } : {}),
      });
      for (const row of page.executions) {
        const def = await this.defs.get(row.workflow, row.version);
        if (!def) continue;
        const ended = replay(await readRun(this.store, row.run_id));
        await this.serial(row.execution_id, () => this.#continue(ended, def));
      }
      cursor = page.next_cursor ?? undefined;
    } while (cursor);
  }

  /**
   * Starts the next run of a run that ended with continue-as-new (same execution id); with
   * `cancel`, the next run starts cancelled (a cancel that came between the two runs). Answers
   * the next run's state, or null when it did not start (nothing to continue, or the commit
   * failed). A next run that itself ends with continue-as-new in its first append (a run that
   * continues at once) is continued in a later turn of its execution's chain, not here: a
   * cancel or a signal that queued meanwhile goes first, and a chain that continues for ever
   * holds no request up.
   */
  async #continue(
    ended: ExecutionState,
    def: WorkflowDoc,
    cancel?: string,
    inbox?: number[],
  ): Promise<ExecutionState | null> {
    const id = ended.execution_id;
    const pending = this.#continuing.get(id);
    // Already started from memory (a queued turn that came after a direct one).
    if (pending && pending.ended.run_id !== ended.run_id) return null;
    const cmd = continuation(ended);
    if (!cmd) return null;
    const now = this.clock.now();
    const d = await decide(
      def,
      null,
      cancel !== undefined ? { ...cmd, cancel } : cmd,
      this.#ctx(now),
    );
    // Shared mode: the inbox entry of a cancel applied here goes with the commit it causes.
    const item = this.#item(ended, d.state, d.events, now, false, inbox);
    try {
      await this.committer.append(item);
    } catch (e) {
      if (e instanceof InboxGoneError) {
        this.#continuing.set(id, { ended, def });
        throw e;
      }
      // Memory no longer takes it for a next run to start: the resync below (or the owner
      // that fenced this node) does.
      this.#continuing.delete(id);
      if (e instanceof FencedError) {
        this.#fenced(id, e);
        return null;
      }
      // The row stays `continued` unless the commit landed after all: the resync commits the
      // same next run again (its run id and events), which either lands or finds that it had
      // (recovery after a restart starts it again from the row). A new decision could start a
      // second next run.
      log.engine.error("cannot start the next run after continue-as-new; retrying", {
        execution_id: id,
        error: (e as Error).message,
      });
      // Refused whole, the rebuild from history starts the next run again.
      this.#failed(id, e, {
        item,
        prev: null,
        next: d.state,
        def,
        events: d.events,
        delivered: false,
      }, true);
      return null;
    }
    log.engine.info("execution continued as new", {
      execution_id: id,
      run_id: d.state.run_id,
      run: d.state.run_number,
    });
    this.#continuing.delete(id);
    this.#install(id, null, d.state, def, d.events);
    if (d.state.continued) {
      this.serial(id, () => this.#continuePending(id)).catch((e) => {
        log.engine.error("cannot start the next run after continue-as-new", {
          execution_id: id,
          error: (e as Error).message,
        });
      });
    }
    return d.state;
  }

  /** The next run of a run memory saw end with continue-as-new, if it has not started yet. */
  async #continuePending(
    id: string,
    cancel?: string,
    inbox?: number[],
  ): Promise<ExecutionState | null> {
    const p = this.#continuing.get(id);
    if (!p || this.#stopped) return null;
    return await this.#continue(p.ended, p.def, cancel, inbox);
  }

  stop(): void {
    this.#stopped = true;
    clearInterval(this.#wakePoll);
    this.#audit?.stop();
    for (const { timer } of this.#suspect.values()) if (timer) clearTimeout(timer);
    for (const a of this.#active.values()) for (const t of a.timers) clearTimeout(t);
    for (const set of this.#waiters.values()) for (const w of [...set]) w();
  }

  /**
   * Records that an attempt's outcome is unknown (StepAttemptUncertain, then a redelivery),
   * in the background; a failed append is retried every second until it is recorded or no
   * longer applies. Nothing else would ever move such an attempt. Resolves after the first
   * try.
   */
  uncertain(id: string, token: string, reason: string): Promise<void> {
    return this.command(id, { type: "uncertain", token, reason }).then(() => {}, (e) => {
      if (this.#stopped) return;
      log.engine.error("cannot record an uncertain attempt; retrying in 1 s", {
        execution_id: id,
        error: (e as Error).message,
      });
      setTimeout(() => {
        if (!this.#stopped) this.uncertain(id, token, reason);
      }, 1000);
    });
  }

  /**
   * The start of an id that exists: answers its row, and loads it into memory when it runs
   * but memory does not hold it (the commit of an earlier attempt of this start landed
   * although it reported an error).
   */
  async #adopt(id: string): Promise<ExecutionRow | null> {
    // With a bounded cache a running execution may be left to the store: its row answers,
    // unless a failed commit may have put memory behind the history.
    if (this.#lazy && !this.#active.has(id) && !this.#suspect.has(id)) {
      return await this.store.getExecution(id);
    }
    if (!this.#active.has(id)) await this.#resync(id);
    const a = this.#active.get(id);
    if (a) return rowOf(a.state, this.clock.now());
    return await this.store.getExecution(id);
  }

  /**
   * After an append failed (not fenced): in doubt when it may have committed (a lost
   * connection); rebuilt from history when another append of the run got there first (the
   * history is ahead of memory); nothing more when the database refused it whole (memory is
   * right), unless `rebuild` asks for the rebuild all the same.
   */
  #failed(id: string, e: unknown, append: NonNullable<Doubt["append"]>, rebuild = false): void {
    if (e instanceof HistoryConflictError) this.#markSuspect(id);
    else if (mayHaveCommitted(e)) this.#markSuspect(id, append);
    else if (rebuild) this.#markSuspect(id);
  }

  /**
   * Marks an execution whose append has an unknown outcome (`append`; none: resolved, only the
   * rebuild is left), and keeps resolving it in the background until that works.
   */
  #markSuspect(id: string, append?: Doubt["append"], delayMs = 50): void {
    if (this.#stopped || this.opts.readOnly) return;
    const old = this.#suspect.get(id);
    if (old?.timer) clearTimeout(old.timer);
    const doubt: Doubt = {
      timer: null,
      append: append ?? old?.append,
      delivered: append ? false : old?.delivered,
    };
    doubt.timer = setTimeout(() => {
      if (this.#stopped || this.#suspect.get(id) !== doubt) return;
      doubt.timer = null;
      this.serial(id, () => this.#suspect.has(id) ? this.#resync(id) : Promise.resolve())
        .catch((e) => {
          log.engine.warn("cannot resolve a commit with an unknown outcome; retrying in 1 s", {
            execution_id: id,
            error: (e as Error).message,
          });
        });
    }, delayMs);
    this.#suspect.set(id, doubt);
  }

  /**
   * Resolves an append whose outcome is unknown by committing the same append again (runs
   * inside `serial`). The first attempt may still be in flight on a connection this process
   * gave up on, so no read can tell whether it will land; its events' primary key (run, seq)
   * can: exactly one of the two commits, and the second answers only after the first has
   * committed or rolled back. Answers true when that settles it: this commit landed (memory
   * installs the append as if the first had answered, and marks its dispatches uncertain:
   * no worker got them), or another server owns the execution now (fenced). False: the first
   * attempt landed (the history has the events) or a refusal that does not tell (the inbox
   * entries it applied are gone, its task row is taken): the caller rebuilds memory from the
   * history, which answers by then. Throws while the outcome is still unknown.
   */
  async #recommit(id: string, append: NonNullable<Doubt["append"]>): Promise<boolean> {
    try {
      await this.committer.append(append.item);
    } catch (e) {
      if (e instanceof FencedError) {
        this.#suspect.delete(id);
        this.#fenced(id, e);
        return true;
      }
      // The first attempt landed (its events, its row, its inbox deletions are there), or a
      // refusal that does not say: a task row found taken may have been taken by the first
      // attempt while this one waited for its lock, an inbox entry gone deleted by it. Either
      // way this statement answered after the first one was decided: the history tells.
      if (
        e instanceof HistoryConflictError || e instanceof DuplicateExecutionError ||
        e instanceof InboxGoneError || e instanceof TaskTakenError
      ) {
        return false;
      }
      throw e;
    }
    this.#suspect.delete(id);
    this.#held(append.item);
    log.engine.warn("committed again an append whose outcome was unknown", {
      execution_id: id,
      events: append.events.length,
    });
    this.#install(id, append.prev, append.next, append.def, append.events);
    if (!append.delivered) this.#uncertainDispatches(id, append.next, append.events);
    if (append.next.continued) await this.#continue(append.next, append.def);
    return true;
  }

  /** Dispatches committed by a request that failed: no worker got them; they go out again. */
  #uncertainDispatches(id: string, state: ExecutionState, events: readonly HistoryEvent[]): void {
    for (const e of events) {
      if (e.type !== "StepDispatched" || state.phase === "closed") continue;
      const token = (e as { token?: string }).token;
      if (!token) continue;
      this.uncertain(
        id,
        token,
        "the dispatch was committed, but the request that made it failed before the worker " +
          "got the task",
      );
    }
  }

  /**
   * Brings memory level with the stored history after an append whose outcome is unknown
   * (runs inside `serial`): first the append is resolved (#recommit); when the earlier
   * attempt landed after all, or when no append is in doubt (a start of an id memory does not
   * hold), the execution is rebuilt from its history and installed as if that commit had
   * answered, so waiters, timers, the queue and the observers see the landed events. A
   * dispatch among them was never handed to its worker (the request that made it failed): it
   * is marked uncertain at once, and redelivered with the same idempotency key. Throws when
   * the store cannot be reached; the execution then stays marked.
   */
  async #resync(id: string): Promise<void> {
    const doubt = this.#suspect.get(id);
    if (doubt?.timer) clearTimeout(doubt.timer);
    try {
      await this.#settleDoubt(id, doubt);
    } catch (e) {
      // Still unknown, or the history (or the owner) cannot be read: tried again in the
      // background, also when the doubt was resolved and only the rebuild failed (memory may
      // still be behind a landed append: it must not stay so).
      if (!this.#suspect.has(id) && !this.#stopped && !this.opts.readOnly) {
        this.#suspect.set(id, {
          timer: null,
          delivered: doubt?.delivered ?? doubt?.append?.delivered,
        });
      }
      if (this.#suspect.has(id)) this.#markSuspect(id, undefined, 1000);
      throw e;
    }
  }

  async #settleDoubt(id: string, doubt: Doubt | undefined): Promise<void> {
    if (doubt?.append) {
      if (await this.#recommit(id, doubt.append)) return;
      // Landed earlier: the history is complete now; what is left is the rebuild.
      doubt.delivered = doubt.append.delivered;
      doubt.append = undefined;
    }
    const row = await this.store.getExecution(id);
    const a = this.#active.get(id);
    this.#suspect.delete(id);
    if (!row) return; // a start that did not land
    // The row's last_seq is the history's newest seq (reads take it from the events: a steady
    // append leaves the row alone), so an equal one means nothing of the append landed.
    if (a && row.run_id === a.state.run_id && row.last_seq === a.state.last_seq) {
      log.engine.debug("a commit with an unknown outcome did not land", {
        execution_id: id,
        last_seq: row.last_seq,
      });
      return;
    }
    if (!a && row.status !== "running" && row.status !== "continued") return;
    const own = this.opts.ownership;
    if (own && (row.status === "running" || row.status === "continued")) {
      // Shared mode: rebuild only what this node still owns, at the epoch it holds now.
      const epoch = await this.#epochOf(id, await own.ownerOf(id));
      if (epoch === null) {
        if (a) this.drop(id);
        return;
      }
      own.hold(id, epoch);
    }
    const def = await this.defs.get(row.workflow, row.version);
    if (!def) {
      log.engine.error("cannot rebuild execution: its definition is missing", {
        execution_id: id,
        workflow: row.workflow,
        version: row.version,
      });
      return;
    }
    let events: HistoryEvent[];
    try {
      events = await readRun(this.store, row.run_id);
    } catch (e) {
      this.#suspect.set(id, { timer: null, delivered: doubt?.delivered });
      throw e;
    }
    const state = replay(events);
    const landed = a && a.state.run_id === row.run_id
      ? events.filter((e) => e.seq > a.state.last_seq)
      : events;
    log.engine.warn("rebuilt execution from history after a commit with an unknown outcome", {
      execution_id: id,
      landed_events: landed.length,
    });
    this.#install(id, a?.state ?? null, state, def, landed);
    if (!doubt?.delivered) this.#uncertainDispatches(id, state, landed);
    if (state.continued) await this.#continue(state, def);
  }

  #install(
    id: string,
    prev: ExecutionState | null,
    next: ExecutionState,
    def: WorkflowDoc,
    events: readonly HistoryEvent[],
  ): void {
    const old = this.#active.get(id);
    if (old) { for (const t of old.timers) clearTimeout(t); }
    if (next.phase === "closed") {
      this.#active.delete(id);
      if (next.status !== "continued") this.opts.ownership?.release(id);
      else if (!this.#stopped) this.#continuing.set(id, { ended: next, def });
      this.metrics.executionsClosed.inc({ status: next.status });
      log.engine.info(`execution ${next.status}`, { execution_id: id });
      const set = next.status === "continued" ? undefined : this.#waiters.get(id);
      // The row committed with the closing event: its updated_ms is the closing time.
      const row = set ? rowOf(next, next.closed_ms ?? this.clock.now()) : null;
      if (set) { for (const w of [...set]) w(row); }
    } else {
      const entry: Active = { state: next, def, timers: [] };
      // Map order is the order of change: the sweep lets the least recently changed go first.
      this.#active.delete(id);
      this.#active.set(id, entry);
      const cap = this.opts.cacheExecutions ?? null;
      if (cap !== null && this.#active.size > cap) this.#scheduleSweep();
      if (!this.#stopped) {
        for (const w of wakeups(next)) entry.timers.push(this.#arm(id, w.at, w.cmd));
      }
    }
    this.observer?.installed(prev, next, events);
    for (const o of this.#observers) o.installed(prev, next, events);
  }

  #arm(id: string, at: number, cmd: Command): ReturnType<typeof setTimeout> {
    const delay = Math.max(0, Math.min(at - this.clock.now(), 2 ** 31 - 1));
    return setTimeout(() => {
      if (this.#stopped) return;
      if (at > this.clock.now()) {
        // Clock skew or a delay beyond setTimeout's range: look again later.
        const entry = this.#active.get(id);
        entry?.timers.push(this.#arm(id, at, cmd));
        return;
      }
      this.command(id, cmd).catch((e) => {
        log.engine.error("timer command failed; retrying in 1 s", {
          execution_id: id,
          command: cmd.type,
          error: (e as Error).message,
        });
        const entry = this.#active.get(id);
        entry?.timers.push(this.#arm(id, this.clock.now() + 1000, cmd));
      });
    }, delay);
  }
}
