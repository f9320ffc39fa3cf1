/**
 * Schedules (SPEC §6): the schedule object, its validation, and the pure policy the scheduler
 * (`scheduler.ts`) applies: when occurrences are, which due occurrences fire (catch-up), what
 * an occurrence does while earlier ones still run (overlap), and the deterministic execution id
 * of an occurrence. Nothing here reads a clock or does I/O: every time is a parameter.
 *
 * ```ts
 * import { nextOccurrence, occurrenceId, parseSchedule } from "./schedules.ts";
 * const now = Date.parse("2026-03-28T12:00:00Z");
 * const r = parseSchedule({ schedule_id: "morning", workflow: "Report", cron: "0 9 * * *",
 *   timezone: "Europe/Stockholm" }, now);
 * if (r.ok) {
 *   const at = nextOccurrence(r.schedule, now)!;
 *   console.log(occurrenceId("morning", at)); // morning@2026-03-29T07:00:00.000Z
 * }
 * ```
 *
 * Occurrences of `every_s` are aligned to the Unix epoch (every 60 s fires at each whole
 * minute, whenever the schedule was created), so their ids are the same on every server. Cron
 * expressions have 5 fields (minutes) or 6 (seconds first), read in `timezone` (IANA name,
 * default UTC) with croner, daylight-saving changes included.
 */
import { Cron } from "croner";
import { z } from "zod";
import { NAME_RE, SEMVER_RE } from "../engine/ir.ts";

export const OVERLAP_POLICIES = ["skip", "buffer_one", "allow_all", "cancel_other"] as const;
export const CATCH_UP_POLICIES = ["skip", "one", "all"] as const;
export type OverlapPolicy = typeof OVERLAP_POLICIES[number];
export type CatchUpPolicy = typeof CATCH_UP_POLICIES[number];

/** Letters, digits, `_ . -`; no `@` (it separates the id from the time in execution ids). */
export const SCHEDULE_ID_RE = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;

/** Defaults of the optional policy fields. */
export const DEFAULTS = { overlap: "skip", catch_up: "one", catch_up_window_s: 3600 } as const;

/**
 * An occurrence the scheduler reaches later than this after its time, while it was running,
 * counts as missed (the process stalled) and follows the catch-up policy.
 */
export const LATE_AFTER_MS = 2_000;

/** At most this many occurrences are handled per schedule in one pass; the next pass goes on. */
export const MAX_STEPS_PER_PASS = 100;

/** Missed occurrences before the catch-up window are counted one by one up to this many. */
const MAX_COUNTED = 100_000;

/** The SPEC §6 schedule object, with its defaults applied. */
export interface Schedule {
  schedule_id: string;
  workflow: string;
  version?: string;
  input?: unknown;
  every_s?: number;
  cron?: string;
  timezone?: string;
  overlap: OverlapPolicy;
  catch_up: CatchUpPolicy;
  catch_up_window_s: number;
  paused: boolean;
}

/** What decides when a schedule's occurrences are. */
export type Timing = Pick<Schedule, "every_s" | "cron" | "timezone">;

export interface Problem {
  path: string;
  message: string;
}

const MAX_SECONDS = 10 * 366 * 86_400;

function isTimeZone(tz: string): boolean {
  try {
    new Intl.DateTimeFormat("en-US", { timeZone: tz });
    return true;
  } catch {
    return false;
  }
}

/** Parsed cron expressions by `timezone|expression` (parsing is the costly part). */
const crons = new Map<string, Cron>();

function cronOf(expr: string, timezone?: string): Cron {
  const key = `${timezone ?? "UTC"}|${expr}`;
  let c = crons.get(key);
  if (!c) {
    c = new Cron(expr, { timezone: timezone ?? "UTC", paused: true, mode: "5-or-6-parts" });
    if (crons.size >= 1000) crons.clear();
    crons.set(key, c);
  }
  return c;
}

const seconds = (max: number) =>
  z.number().int("must be a whole number of seconds").max(max, `must be at most ${max}`);

const scheduleSchema = z.strictObject({
  schedule_id: z.string().regex(
    SCHEDULE_ID_RE,
    "must be 1-128 letters, digits, _ . or - (starting with a letter or digit)",
  ),
  workflow: z.string().regex(NAME_RE, "must be a workflow name"),
  version: z.string().regex(
    SEMVER_RE,
    "must be a semantic version such as 1.0.0 (each number at most 15 digits)",
  ).optional(),
  input: z.unknown().optional(),
  every_s: seconds(MAX_SECONDS).min(1, "must be at least 1").optional(),
  cron: z.string().min(1, "must not be empty").max(256, "must be at most 256 characters")
    .optional(),
  timezone: z.string().max(64).refine(isTimeZone, "must be an IANA time zone such as Europe/Paris")
    .optional(),
  overlap: z.enum(OVERLAP_POLICIES, { message: `must be one of ${OVERLAP_POLICIES.join(", ")}` })
    .default(DEFAULTS.overlap),
  catch_up: z.enum(CATCH_UP_POLICIES, {
    message: `must be one of ${CATCH_UP_POLICIES.join(", ")}`,
  }).default(DEFAULTS.catch_up),
  catch_up_window_s: seconds(MAX_SECONDS).min(0, "must be 0 or more")
    .default(DEFAULTS.catch_up_window_s),
  paused: z.boolean().default(false),
});

/** The checks across members: one timing, a time zone only with cron, a cron that fires. */
function timingProblems(o: Record<string, unknown>, now: number): Problem[] {
  const problems: Problem[] = [];
  const { every_s: every, cron, timezone: tz } = o;
  if (every !== undefined && cron !== undefined) {
    problems.push({ path: "$.cron", message: "give either every_s or cron, not both" });
  } else if (every === undefined && cron === undefined) {
    problems.push({ path: "$.every_s", message: "give every_s (seconds) or cron (an expression)" });
  }
  if (tz !== undefined && cron === undefined) {
    problems.push({
      path: "$.timezone",
      message: "only a cron schedule has a time zone (every_s counts from the epoch)",
    });
  }
  // With a time zone that is no zone (reported by the schema), the expression is read in UTC.
  const zone = typeof tz === "string" && isTimeZone(tz) ? tz : undefined;
  if (typeof cron === "string" && cron.length > 0 && cron.length <= 256) {
    try {
      if (cronOf(cron, zone).nextRun(new Date(now)) === null) {
        problems.push({ path: "$.cron", message: "has no future occurrence" });
      }
    } catch (e) {
      const why = (e as Error).message.replace(/^CronPattern: /, "");
      problems.push({ path: "$.cron", message: `is not a cron expression: ${why}` });
    }
  }
  return problems;
}

function jsonPath(path: ReadonlyArray<PropertyKey>): string {
  return "$" + path.map((p) => (typeof p === "number" ? `[${p}]` : `.${String(p)}`)).join("");
}

/**
 * Validates a schedule object (the body of `POST /v1/schedules`, or a PATCH merged into the
 * stored one) at `now`. Answers the schedule with defaults applied, or every problem with its
 * JSON path.
 */
export function parseSchedule(
  raw: unknown,
  now: number,
): { ok: true; schedule: Schedule } | { ok: false; problems: Problem[] } {
  if (raw === null || typeof raw !== "object" || Array.isArray(raw)) {
    return { ok: false, problems: [{ path: "$", message: "a schedule must be a JSON object" }] };
  }
  const r = scheduleSchema.safeParse(raw);
  const problems = r.success
    ? []
    : r.error.issues.flatMap((i) =>
      i.code === "unrecognized_keys"
        ? i.keys.map((k) => ({ path: jsonPath([...i.path, k]), message: `unknown key "${k}"` }))
        : [{ path: jsonPath(i.path), message: i.message }]
    );
  problems.push(...timingProblems(raw as Record<string, unknown>, now));
  if (problems.length > 0 || !r.success) return { ok: false, problems };
  return { ok: true, schedule: r.data as Schedule };
}

/**
 * Applies a PATCH to a schedule object: members present replace, `null` removes an optional
 * member. Setting `cron` drops `every_s`; setting `every_s` drops `cron` and `timezone` (they are
 * alternatives). The result is validated with `parseSchedule` by the caller.
 */
export function mergePatch(current: Schedule, patch: Record<string, unknown>): unknown {
  const out: Record<string, unknown> = { ...current };
  if (patch.cron !== undefined && patch.cron !== null) delete out.every_s;
  if (patch.every_s !== undefined && patch.every_s !== null) {
    delete out.cron;
    delete out.timezone;
  }
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = v;
  }
  return out;
}

/** True when two schedules' occurrences are at different times. */
export function timingChanged(a: Timing, b: Timing): boolean {
  return a.every_s !== b.every_s || a.cron !== b.cron || a.timezone !== b.timezone;
}

/** The first occurrence strictly after `afterMs`, or null when there is none. */
export function nextOccurrence(t: Timing, afterMs: number): number | null {
  if (t.every_s !== undefined) {
    const p = t.every_s * 1000;
    return (Math.floor(afterMs / p) + 1) * p;
  }
  if (t.cron === undefined) return null;
  const next = cronOf(t.cron, t.timezone).nextRun(new Date(afterMs));
  return next === null ? null : next.getTime();
}

/** The first `n` occurrences after `afterMs` (fewer when the schedule ends). */
export function nextOccurrences(t: Timing, afterMs: number, n: number): number[] {
  const out: number[] = [];
  let at: number | null = afterMs;
  while (out.length < n && (at = nextOccurrence(t, at)) !== null) out.push(at);
  return out;
}

/** The execution id of an occurrence: `<schedule_id>@<occurrence time, ISO 8601>`. */
export function occurrenceId(scheduleId: string, atMs: number): string {
  return `${scheduleId}@${new Date(atMs).toISOString()}`;
}

/** The schedule id and occurrence time of an occurrence's execution id, or null. */
export function parseOccurrenceId(id: string): { schedule_id: string; at_ms: number } | null {
  const i = id.indexOf("@");
  if (i <= 0) return null;
  const scheduleId = id.slice(0, i);
  const iso = id.slice(i + 1);
  const at = Date.parse(iso);
  if (!SCHEDULE_ID_RE.test(scheduleId) || !Number.isFinite(at)) return null;
  return new Date(at).toISOString() === iso ? { schedule_id: scheduleId, at_ms: at } : null;
}

/** One due occurrence and whether it fires (else it is counted skipped). */
export interface Step {
  at: number;
  fire: boolean;
  /** True when the occurrence was missed (it fires only by the catch-up policy). */
  missed: boolean;
}

export interface Plan {
  /** Missed occurrences before the window (or all missed, with catch_up skip), counted only. */
  skippedBefore: number;
  /** The due occurrences after those, in time order, at most MAX_STEPS_PER_PASS. */
  steps: Step[];
  /** next_fire_ms after the steps: the first occurrence not handled (it may still be due). */
  next: number | null;
}

/**
 * Which due occurrences of a schedule fire at `now` (catch-up). `startedAt` is when this
 * scheduler started firing (the server's start, or its election as leader).
 *
 * An occurrence is missed when it passed before `startedAt` (the server was down, or another
 * leader was failing) or more than LATE_AFTER_MS before `now` (this one stalled). The others
 * are on time and always fire. Of the missed ones, catch_up `skip` fires none; `one` fires only
 * the latest within `catch_up_window_s` of now; `all` fires every one within the window. Every
 * occurrence that does not fire is counted skipped.
 */
export function planDue(
  s: Timing & Pick<Schedule, "catch_up" | "catch_up_window_s">,
  nextFire: number | null,
  now: number,
  startedAt: number,
): Plan {
  if (nextFire === null || nextFire > now) return { skippedBefore: 0, steps: [], next: nextFire };
  const missedBefore = Math.max(startedAt, now - LATE_AFTER_MS);
  const windowStart = now - s.catch_up_window_s * 1000;
  // Below `countOnly` every occurrence is missed and skipped whatever else holds.
  const countOnly = s.catch_up === "skip" ? missedBefore : Math.min(missedBefore, windowStart);
  let skippedBefore = 0;
  let at: number | null = nextFire;
  if (at < countOnly) {
    skippedBefore = countBefore(s, at, countOnly);
    at = nextOccurrence(s, countOnly - 1);
  }
  const steps: Step[] = [];
  while (at !== null && at <= now && steps.length < MAX_STEPS_PER_PASS) {
    const following = nextOccurrence(s, at);
    const missed = at < missedBefore;
    let fire = true;
    if (missed) {
      // In the window here (earlier ones were counted above); `skip` never gets here.
      fire = s.catch_up === "all" || following === null || following >= missedBefore;
    }
    steps.push({ at, fire, missed });
    at = following;
  }
  return { skippedBefore, steps, next: at };
}

/** How many occurrences lie in [from, to), `from` being one (counted up to MAX_COUNTED). */
function countBefore(t: Timing, from: number, to: number): number {
  if (t.every_s !== undefined) return Math.ceil((to - from) / (t.every_s * 1000));
  let n = 0;
  for (let at: number | null = from; at !== null && at < to && n < MAX_COUNTED;) {
    n++;
    at = nextOccurrence(t, at);
  }
  return n;
}

/** What one occurrence does, given the schedule's executions that are still running. */
export type OverlapAction = "start" | "skip" | "buffer" | "cancel_then_start";

/**
 * The overlap policy. With nothing running every policy starts. Otherwise: `skip` counts the
 * occurrence skipped; `buffer_one` keeps it to start when the running one ends, unless one is
 * buffered already (then it is skipped); `allow_all` starts it anyway; `cancel_other` cancels
 * the running ones, then starts it.
 */
export function overlapAction(
  policy: OverlapPolicy,
  running: number,
  buffered: boolean,
): OverlapAction {
  if (running === 0) return "start";
  switch (policy) {
    case "skip":
      return "skip";
    case "buffer_one":
      return buffered ? "skip" : "buffer";
    case "allow_all":
      return "start";
    case "cancel_other":
      return "cancel_then_start";
  }
}

/** The spec column of `orbit_schedules`: the schedule without its id and pause flag. */
export function specOf(s: Schedule): Record<string, unknown> {
  const { schedule_id: _id, paused: _paused, ...spec } = s;
  return spec;
}

/** The schedule object of a stored row's columns. */
export function scheduleOf(
  scheduleId: string,
  spec: Record<string, unknown>,
  paused: boolean,
): Schedule {
  return {
    schedule_id: scheduleId,
    ...(spec as Omit<Schedule, "schedule_id" | "paused">),
    paused,
  };
}
