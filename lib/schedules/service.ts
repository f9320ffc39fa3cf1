/**
 * Schedule operations the routes perform: create, read, list, PATCH, delete, trigger, pause
 * and resume. Each validates, writes the row through the store and wakes the scheduler; the
 * scheduler (`scheduler.ts`) alone claims occurrences and advances them.
 *
 * ```ts
 * const view = await rt.schedules.create({ workflow: "Report", every_s: 60 });
 * await rt.schedules.trigger(view.schedule_id); // one occurrence now, counted as fired
 * ```
 */
import type { Definitions } from "../definitions.ts";
import type { Executions } from "../executions/executions.ts";
import type { Clock } from "../executions/types.ts";
import type { Metrics } from "../metrics.ts";
import type { Scheduler } from "./scheduler.ts";
import type { ExecutionRow, ScheduleRow, Store } from "../store/store.ts";
import { conflict, invalid, notFound, type OrbitError } from "../errors.ts";
import { validateAgainst } from "../jsonschema.ts";
import {
  mergePatch,
  nextOccurrence,
  occurrenceId,
  parseSchedule,
  type Problem,
  type Schedule,
  SCHEDULE_ID_RE,
  scheduleOf,
  specOf,
  timingChanged,
} from "./schedules.ts";

/** A schedule as the API shows it: the SPEC §6 object plus its state. */
export type ScheduleView = Schedule & {
  next_fire_ms: number | null;
  fired: number;
  skipped: number;
  buffered_ms: number | null;
  last_fired_ms: number | null;
  /** The execution of the latest start. */
  last_execution_id: string | null;
  created_ms: number;
  updated_ms: number;
};

export function viewOf(row: ScheduleRow): ScheduleView {
  return {
    ...scheduleOf(row.schedule_id, row.spec, row.paused),
    next_fire_ms: row.paused ? null : row.next_fire_ms,
    fired: row.fired,
    skipped: row.skipped,
    buffered_ms: row.buffered_ms,
    last_fired_ms: row.last_fired_ms,
    last_execution_id: row.last_fired_ms === null
      ? null
      : occurrenceId(row.schedule_id, row.last_fired_ms),
    created_ms: row.created_ms,
    updated_ms: row.updated_ms,
  };
}

function invalidSchedule(problems: Problem[]): OrbitError {
  return invalid("INVALID_SCHEDULE", `schedule has ${problems.length} problem(s)`, { problems });
}

function unknownSchedule(id: string): OrbitError {
  return notFound("UNKNOWN_SCHEDULE", `schedule ${id.slice(0, 200)} does not exist`);
}

export class ScheduleService {
  constructor(
    readonly store: Store,
    readonly definitions: Definitions,
    readonly executions: Pick<Executions, "start">,
    readonly scheduler: Pick<Scheduler, "wake">,
    readonly clock: Clock,
    readonly metrics: Metrics,
    /** The cluster term for the trigger's count (see Scheduler's `term`). */
    readonly term: () => number | null | undefined = () => undefined,
  ) {}

  /** Creates a schedule (201); 409 SCHEDULE_EXISTS, 404 UNKNOWN_WORKFLOW, 422 INVALID_SCHEDULE. */
  async create(raw: unknown): Promise<ScheduleView> {
    const now = this.clock.now();
    if (raw && typeof raw === "object" && !Array.isArray(raw) && !("schedule_id" in raw)) {
      // A generated id: the workflow's name and a random suffix.
      const workflow = (raw as { workflow?: unknown }).workflow;
      const base = typeof workflow === "string" && SCHEDULE_ID_RE.test(workflow)
        ? workflow.slice(0, 110)
        : "schedule";
      raw = {
        schedule_id: `${base}-${this.clock.newId().replaceAll("-", "").slice(0, 12)}`,
        ...raw,
      };
    }
    const s = await this.#validate(raw, now);
    const row: ScheduleRow = {
      schedule_id: s.schedule_id,
      spec: specOf(s),
      workflow: s.workflow,
      paused: s.paused,
      next_fire_ms: nextOccurrence(s, now),
      buffered_ms: null,
      last_fired_ms: null,
      fired: 0,
      skipped: 0,
      claimed_by: null,
      claimed_until_ms: null,
      created_ms: now,
      updated_ms: now,
    };
    if (!(await this.store.createSchedule(row))) {
      throw conflict("SCHEDULE_EXISTS", `schedule ${s.schedule_id} already exists`, {
        schedule_id: s.schedule_id,
      });
    }
    this.scheduler.wake();
    return viewOf(row);
  }

  async get(id: string): Promise<ScheduleView> {
    return viewOf(await this.#load(id));
  }

  async list(workflow?: string): Promise<ScheduleView[]> {
    const rows = await this.store.listSchedules();
    return rows.filter((r) => workflow === undefined || r.workflow === workflow).map(viewOf);
  }

  /**
   * PATCH: members present replace, `null` removes an optional one; the result is validated
   * as a whole. A change of timing (every_s, cron, timezone) or a resume moves the next
   * occurrence to the first one after now.
   */
  async update(id: string, patch: unknown): Promise<ScheduleView> {
    const row = await this.#load(id);
    if (patch === null || typeof patch !== "object" || Array.isArray(patch)) {
      throw invalidSchedule([{ path: "$", message: "a PATCH body must be a JSON object" }]);
    }
    const p = patch as Record<string, unknown>;
    if ("schedule_id" in p && p.schedule_id !== id) {
      throw invalidSchedule([{ path: "$.schedule_id", message: "cannot be changed" }]);
    }
    const now = this.clock.now();
    const before = scheduleOf(id, row.spec, row.paused);
    const s = await this.#validate(mergePatch(before, p), now);
    const move = timingChanged(before, s) || (before.paused && !s.paused);
    return await this.#write(id, s, move ? nextOccurrence(s, now) : undefined, now);
  }

  async remove(id: string): Promise<void> {
    if (!SCHEDULE_ID_RE.test(id) || !(await this.store.deleteSchedule(id))) {
      throw unknownSchedule(id);
    }
  }

  async pause(id: string): Promise<ScheduleView> {
    const row = await this.#load(id);
    if (row.paused) return viewOf(row);
    const s = scheduleOf(id, row.spec, true);
    return await this.#write(id, s, undefined, this.clock.now());
  }

  /** Resumes from now on: occurrences that passed while paused are not caught up. */
  async resume(id: string): Promise<ScheduleView> {
    const row = await this.#load(id);
    if (!row.paused) return viewOf(row);
    const now = this.clock.now();
    const s = scheduleOf(id, row.spec, false);
    return await this.#write(id, s, nextOccurrence(s, now), now);
  }

  /**
   * Starts one occurrence now (paused or not, whatever the overlap policy), counted as fired.
   * Answers the execution and whether it was created (an id that exists is returned as is).
   */
  async trigger(id: string): Promise<{ created: boolean; row: ExecutionRow }> {
    const s = scheduleOf(id, (await this.#load(id)).spec, false);
    const at = this.clock.now();
    const r = await this.executions.start({
      workflow: s.workflow,
      ...(s.version !== undefined ? { version: s.version } : {}),
      ...(s.input !== undefined ? { input: s.input } : {}),
      execution_id: occurrenceId(id, at),
    });
    if (r.created) {
      const counted = await this.store.countSchedule(id, {
        fired: 1,
        skipped: 0,
        last_fired_ms: at,
        term: this.term(),
      });
      if (counted) this.metrics.schedulesFired.inc();
    }
    return r;
  }

  async #load(id: string): Promise<ScheduleRow> {
    // An id create refuses is never stored (and a NUL is not even a PostgreSQL string).
    const row = SCHEDULE_ID_RE.test(id) ? await this.store.getSchedule(id) : null;
    if (!row) throw unknownSchedule(id);
    return row;
  }

  async #write(
    id: string,
    s: Schedule,
    next: number | null | undefined,
    now: number,
  ): Promise<ScheduleView> {
    const row = await this.store.updateSchedule(id, {
      spec: specOf(s),
      workflow: s.workflow,
      paused: s.paused,
      ...(next !== undefined ? { next_fire_ms: next } : {}),
      now,
    });
    if (!row) throw unknownSchedule(id);
    this.scheduler.wake();
    return viewOf(row);
  }

  /** The schedule object, checked: 422 INVALID_SCHEDULE, 404 UNKNOWN_WORKFLOW. */
  async #validate(raw: unknown, now: number): Promise<Schedule> {
    const p = parseSchedule(raw, now);
    if (!p.ok) throw invalidSchedule(p.problems);
    const s = p.schedule;
    // The workflow (and version) must be deployed; its input must fit the input schema.
    const def = await this.definitions.resolve(s.workflow, s.version);
    if (def.input_schema) {
      const problems = validateAgainst(def.input_schema, s.input ?? null, "$.input");
      if (problems.length > 0) throw invalidSchedule(problems);
    }
    return s;
  }
}
