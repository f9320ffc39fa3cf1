/**
 * The scheduler: fires schedule occurrences (SPEC §6) by the pure policy of `schedules.ts`.
 *
 * State model (per `orbit_schedules` row): `next_fire_ms` is the next occurrence to handle and
 * the version of the row. A pass (about once a second, and at the next due time by a timer)
 * reads the rows with work, then for each:
 * 1. claims it: a compare-and-set on the next_fire_ms it read, that sets `claimed_by` (this
 *    scheduler's owner id) and `claimed_until_ms` (now + lease). Of several schedulers exactly
 *    one wins; the others skip the row.
 * 2. plans the due occurrences (catch-up), applies the overlap policy to each against the
 *    schedule's running executions, and starts the chosen ones with the deterministic id
 *    `<schedule_id>@<ISO time>` (a second start of one occurrence is a no-op). Before each start
 *    (and each cancel_other) it renews the claim: a compare-and-set on (schedule_id, claimed_by,
 *    the claimed next_fire_ms) that extends the lease to now + lease. A renewal that fails (the
 *    claim expired and was taken, a PATCH moved the row, a new leader dropped it) ends the pass:
 *    it starts nothing more, and its advance lands only if the claim is still its own;
 * 3. advances: a second compare-and-set, by the claim's owner only, that adds the fired and
 *    skipped counts, stores the buffered occurrence and the next one, and releases the claim.
 *
 * Trust window and failure handling: a claim lives `leaseMs` (30 s). A scheduler that dies
 * between 1 and 3 leaves its claim; the row is taken again once the claim expires, or at once
 * by a new leader, which drops every claim on start (`start({ dropClaims: true })`, which a
 * single server does too: it is the only scheduler there is). The occurrences it had started
 * are started again as no-ops and counted then, since its advance never landed; those the next
 * plan does not fire (missed by then, so caught up or skipped by the policy) exist already and
 * are counted fired, not skipped: they ran. A start that
 * fails for a reason that may pass (429, a storage error) ends the schedule's pass there; the
 * next pass takes the occurrence again (by then perhaps missed, so by the catch-up policy).
 *
 * Why the renewal: a claimer that paused (GC, a frozen VM) longer than the lease after planning
 * would otherwise start from its stale plan an occurrence that the scheduler that took the
 * expired claim meanwhile counted skipped (or, with overlap `skip`, run two at once). With the
 * renewal, every start follows a renewal by at most the time the start takes, and no other
 * scheduler can claim the row within the lease after it. The window that remains: a pause
 * between a renewal and the commit of the start after it longer than the lease (a start stuck
 * in the committer for 30 s, or the two nodes' clocks that far apart). The occurrence then
 * starts after another scheduler planned the row: it may run although counted skipped, or
 * beside another one. The renewal after it (or the advance) finds the claim gone and the pass
 * stops there; nothing in the scheduler can undo a start that committed.
 *
 * Cluster hook: `opts.term` returns the term this server leads; every claim, advance and count
 * is then checked against the cluster term in the same statement (the store throws FencedError
 * and writes nothing once another server leads). A standby does not run a scheduler; a new
 * leader calls `start()` after its election and `stop()` when it steps down.
 */
import { getLogger } from "@logtape/logtape";
import type { Executions } from "../executions/executions.ts";
import type { Metrics } from "../metrics.ts";
import { OrbitError } from "../errors.ts";
import {
  nextOccurrence,
  occurrenceId,
  overlapAction,
  parseOccurrenceId,
  planDue,
  type Schedule,
  scheduleOf,
} from "./schedules.ts";
import { FencedError, type ScheduleRow, type Store } from "../store/store.ts";

const log = getLogger(["orbit_runtime", "scheduler"]);

/** Rows read per pass; a full batch makes the next pass start at once. */
const DUE_BATCH = 100;

/** Existing occurrences read per pass among those its plan does not fire (see #startedBefore). */
const EXISTING_BATCH = 1_000;

export interface SchedulerDeps {
  store: Store;
  executions: Pick<Executions, "start" | "cancel">;
  metrics: Metrics;
  clock: { now(): number };
}

export interface SchedulerOptions {
  /** The `claimed_by` of this scheduler's claims: the node id, or a per-process id. */
  owner: string;
  /** How long a claim lives (default 30 s). */
  leaseMs?: number;
  /** The longest wait between passes (default 1 s). */
  pollMs?: number;
  /** The term this server leads, checked with every claim and advance; null for none. */
  term?: () => number | null | undefined;
}

/** What became of one occurrence's start; "lost" when the claim was gone before it. */
type StartOutcome = "started" | "refused" | "retry" | "lost";

export class Scheduler {
  readonly #deps: SchedulerDeps;
  readonly #owner: string;
  readonly #leaseMs: number;
  readonly #pollMs: number;
  readonly #term: () => number | null | undefined;
  #startedAt: number | null = null;
  #looping = false;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #current: Promise<void> | null = null;
  #again = false;

  constructor(deps: SchedulerDeps, opts: SchedulerOptions) {
    this.#deps = deps;
    this.#owner = opts.owner;
    this.#leaseMs = opts.leaseMs ?? 30_000;
    this.#pollMs = opts.pollMs ?? 1_000;
    this.#term = opts.term ?? (() => undefined);
  }

  /** The owner id written into `claimed_by`. */
  get owner(): string {
    return this.#owner;
  }

  /**
   * Starts firing: drops the claims left in the table (they belong to a previous process or
   * leader), takes now as the time from which occurrences are on time, and with `loop` runs
   * passes by timer (without, a test calls `pass()`).
   */
  async start(opts: { dropClaims?: boolean; loop?: boolean } = {}): Promise<void> {
    if (opts.dropClaims ?? true) {
      const dropped = await this.#deps.store.dropScheduleClaims();
      if (dropped > 0) {
        log.info("dropped schedule claims left by an earlier scheduler", { dropped });
      }
    }
    this.#startedAt = this.#deps.clock.now();
    if (opts.loop ?? true) {
      this.#looping = true;
      this.#run();
    }
  }

  /** Stops the timer and waits for a pass in progress. Claims it holds are released by it. */
  async stop(): Promise<void> {
    this.#looping = false;
    clearTimeout(this.#timer);
    await this.#current;
  }

  /** Runs a pass soon (a schedule was created or changed). */
  wake(): void {
    if (this.#looping) this.#run();
  }

  #run(): void {
    if (!this.#looping) return;
    if (this.#current) {
      this.#again = true;
      return;
    }
    clearTimeout(this.#timer);
    this.#current = this.pass().then(
      (r) => {
        if (r.more) return 0;
        const wait = r.next === null ? this.#pollMs : r.next - this.#deps.clock.now();
        return Math.max(0, Math.min(this.#pollMs, wait));
      },
      (e) => {
        log.error("schedule pass failed; trying again", { error: (e as Error).message });
        return this.#pollMs;
      },
    ).then((delay) => {
      this.#current = null;
      if (!this.#looping) return;
      if (this.#again) delay = 0;
      this.#again = false;
      this.#timer = setTimeout(() => this.#run(), delay);
    });
  }

  /**
   * One pass: handles every schedule with work now. Answers the earliest next occurrence and
   * whether work was left for another pass at once.
   */
  async pass(): Promise<{ next: number | null; more: boolean }> {
    const store = this.#deps.store;
    this.#startedAt ??= this.#deps.clock.now();
    const rows = await store.dueSchedules(this.#deps.clock.now(), this.#owner, DUE_BATCH);
    let more = rows.length === DUE_BATCH;
    for (const row of rows) {
      try {
        if (await this.#handle(row)) more = true;
      } catch (e) {
        if (e instanceof FencedError) {
          log.warn("schedule pass fenced; another server leads", { error: e.message });
          return { next: null, more: false };
        }
        log.error("schedule occurrence failed; trying again", {
          schedule_id: row.schedule_id,
          error: (e as Error).message,
        });
      }
    }
    return { next: await store.nextScheduleFireMs(), more };
  }

  /** Claims, fires and advances one schedule; true when occurrences are left due. */
  async #handle(row: ScheduleRow): Promise<boolean> {
    const { store, clock } = this.#deps;
    const now = clock.now();
    const term = this.#term();
    const claimed = await store.claimSchedule({
      schedule_id: row.schedule_id,
      next_fire_ms: row.next_fire_ms,
      owner: this.#owner,
      until_ms: now + this.#leaseMs,
      now,
      term,
    });
    if (!claimed) return false;

    const s = scheduleOf(row.schedule_id, row.spec, row.paused);
    const plan = planDue(s, row.next_fire_ms, now, this.#startedAt!);
    const running = await store.runningScheduleExecutions(s.schedule_id);
    const ranBefore = await this.#startedBefore(s, row.next_fire_ms, plan, now);
    // Renews the claim before a start or a cancel: false when it is no longer this pass's.
    const hold = async () => {
      const held = await store.renewScheduleClaim({
        schedule_id: s.schedule_id,
        owner: this.#owner,
        claimed_next_fire_ms: row.next_fire_ms,
        until_ms: clock.now() + this.#leaseMs,
        term,
      });
      if (!held) {
        log.warn("schedule claim was lost during its pass; starting nothing more", {
          schedule_id: s.schedule_id,
        });
      }
      return held;
    };
    let buffered = row.buffered_ms;
    let fired = 0;
    let skipped = 0;
    let last: number | null = null;
    let next = row.next_fire_ms;
    const ran = (at: number) => {
      fired++;
      last = Math.max(last ?? at, at);
    };
    try {
      let go = true;
      // An occurrence started by an earlier pass whose advance never landed (a lost connection,
      // a crash, a claim that expired) is in `running` already: it does not overlap itself.
      const others = (at: number) => {
        const self = occurrenceId(s.schedule_id, at);
        return running.filter((id) => id !== self);
      };
      const started = (at: number) => {
        const self = occurrenceId(s.schedule_id, at);
        if (!running.includes(self)) running.push(self);
      };
      if (buffered !== null && others(buffered).length === 0) {
        const outcome = await this.#start(s, buffered, "buffered", hold);
        if (outcome === "retry" || outcome === "lost") go = false;
        else {
          if (outcome === "started") {
            ran(buffered);
            started(buffered);
          } else skipped++;
          buffered = null;
        }
      }
      if (go) {
        // The advance in `finally` moves next_fire_ms only past what this pass handled: a
        // statement that throws mid-pass (a lost connection) leaves the occurrence it was on,
        // and those after it, to the next pass (it once moved past them, and one was never
        // started: issue 36's storm).
        next = plan.steps[0]?.at ?? plan.next;
        let handledAll = true;
        // Of the occurrences counted only, those an earlier pass started ran.
        const firstStep = plan.steps[0]?.at ?? plan.next ?? Infinity;
        const ranCounted = ranBefore.filter((at) => at < firstStep).slice(0, plan.skippedBefore);
        skipped += plan.skippedBefore - ranCounted.length;
        for (const at of ranCounted) ran(at);
        for (const step of plan.steps) {
          next = step.at;
          if (!step.fire) {
            if (ranBefore.includes(step.at)) ran(step.at);
            else skipped++;
            continue;
          }
          const overlapping = others(step.at);
          const action = overlapAction(s.overlap, overlapping.length, buffered !== null);
          if (action === "skip") {
            skipped++;
            continue;
          }
          if (action === "buffer") {
            buffered = step.at;
            continue;
          }
          if (action === "cancel_then_start") {
            if (!(await hold())) {
              handledAll = false;
              break;
            }
            await this.#cancel(s, overlapping, step.at);
            running.splice(0, running.length, ...running.filter((id) => !overlapping.includes(id)));
          }
          const why = step.missed ? "catch_up" : "on_time";
          const outcome = await this.#start(s, step.at, why, hold);
          if (outcome === "retry" || outcome === "lost") {
            handledAll = false;
            break;
          }
          if (outcome === "started") {
            ran(step.at);
            started(step.at);
          } else skipped++;
        }
        if (handledAll) next = plan.next;
        const missed = plan.steps.filter((x) => x.missed).length + plan.skippedBefore;
        if (missed > 0) {
          log.info("schedule caught up on missed occurrences", {
            schedule_id: s.schedule_id,
            catch_up: s.catch_up,
            missed,
            started: plan.steps.filter((x) => x.missed && x.fire).length,
            started_before: ranBefore.length,
          });
        }
      }
    } finally {
      const advanced = await store.advanceSchedule({
        schedule_id: s.schedule_id,
        owner: this.#owner,
        claimed_next_fire_ms: row.next_fire_ms,
        next_fire_ms: next,
        buffered_ms: buffered,
        last_fired_ms: last,
        fired,
        skipped,
        term,
      });
      if (advanced) {
        if (fired > 0) this.#deps.metrics.schedulesFired.inc({}, fired);
      } else {
        log.warn("schedule claim was lost before its advance (deleted, or expired and taken)", {
          schedule_id: s.schedule_id,
          fired,
        });
      }
    }
    return next !== null && next <= clock.now();
  }

  /**
   * The occurrences at or after `from` (the claimed next_fire_ms) that the plan counts skipped by
   * catch-up (counted only, or a step that does not fire) and that exist already: an earlier
   * pass claimed the row, started them, and its advance never landed (it died, or paused past
   * its lease and the claim was taken). They ran, so they count fired. Read only when the plan
   * skips something; at most EXISTING_BATCH (more than that are counted skipped). The ids sort
   * by time (ISO 8601 of years 0–9999); a user's id that is not an occurrence of the schedule's
   * timing does not count.
   */
  async #startedBefore(
    s: Schedule,
    from: number | null,
    plan: ReturnType<typeof planDue>,
    now: number,
  ): Promise<number[]> {
    if (from === null || (plan.skippedBefore === 0 && plan.steps.every((x) => x.fire))) return [];
    const ids = await this.#deps.store.executionIdsBetween(
      occurrenceId(s.schedule_id, from),
      occurrenceId(s.schedule_id, now),
      EXISTING_BATCH,
    );
    const out: number[] = [];
    for (const id of ids) {
      const o = parseOccurrenceId(id);
      if (o === null || o.schedule_id !== s.schedule_id) continue;
      if (o.at_ms === from || nextOccurrence(s, o.at_ms - 1) === o.at_ms) out.push(o.at_ms);
    }
    return out;
  }

  /**
   * Starts one occurrence once `hold` renewed the claim ("lost" when it did not: nothing
   * starts). A start of an id that exists counts: its advance never landed.
   */
  async #start(
    s: Schedule,
    at: number,
    why: string,
    hold: () => Promise<boolean>,
  ): Promise<StartOutcome> {
    const executionId = occurrenceId(s.schedule_id, at);
    if (!(await hold())) return "lost";
    // The window that remains (see the module comment): a pause from here to the start's commit
    // longer than the lease lets another scheduler take the claim and plan this occurrence.
    try {
      const r = await this.#deps.executions.start({
        workflow: s.workflow,
        ...(s.version !== undefined ? { version: s.version } : {}),
        ...(s.input !== undefined ? { input: s.input } : {}),
        execution_id: executionId,
      });
      log.debug("schedule occurrence started", {
        schedule_id: s.schedule_id,
        execution_id: executionId,
        why,
        created: r.created,
      });
      return "started";
    } catch (e) {
      const transient = !(e instanceof OrbitError) || e.status === 429 || e.status >= 500;
      log.warn(
        transient
          ? "schedule occurrence not started; trying again"
          : "schedule occurrence refused; counted skipped",
        {
          schedule_id: s.schedule_id,
          execution_id: executionId,
          error: (e as Error).message,
        },
      );
      return transient ? "retry" : "refused";
    }
  }

  /** cancel_other: cancels the running executions; one already finished is no matter. */
  async #cancel(s: Schedule, ids: string[], at: number): Promise<void> {
    const reason = `overlap policy cancel_other of schedule ${s.schedule_id}: occurrence ${
      new Date(at).toISOString()
    } starts`;
    for (const id of ids) {
      try {
        await this.#deps.executions.cancel(id, reason);
      } catch (e) {
        log.warn("cannot cancel a running occurrence", {
          schedule_id: s.schedule_id,
          execution_id: id,
          error: (e as Error).message,
        });
      }
    }
  }
}
