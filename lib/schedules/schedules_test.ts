/** The pure schedule policy: occurrences, validation, catch-up, overlap, deterministic ids. */
import assert from "node:assert/strict";
import { EXECUTION_ID_RE } from "../executions/types.ts";
import {
  LATE_AFTER_MS,
  MAX_STEPS_PER_PASS,
  mergePatch,
  nextOccurrence,
  nextOccurrences,
  occurrenceId,
  overlapAction,
  type OverlapPolicy,
  parseOccurrenceId,
  parseSchedule,
  planDue,
  type Schedule,
  timingChanged,
} from "./schedules.ts";

const T = (iso: string) => Date.parse(iso);
const iso = (ms: number) => new Date(ms).toISOString();
const NOW = T("2026-06-01T12:00:00Z");

function schedule(over: Partial<Schedule> = {}): Schedule {
  const r = parseSchedule({ schedule_id: "s", workflow: "W", every_s: 10, ...over }, NOW);
  if (!r.ok) throw new Error(JSON.stringify(r.problems));
  return r.schedule;
}

// ---------------------------------------------------------------------------------------------
// Occurrences

Deno.test("nextOccurrence() of every_s is aligned to the epoch and strictly after", () => {
  const s = { every_s: 60 };
  assert.equal(iso(nextOccurrence(s, T("2026-06-01T12:00:30.500Z"))!), "2026-06-01T12:01:00.000Z");
  assert.equal(iso(nextOccurrence(s, T("2026-06-01T12:01:00Z"))!), "2026-06-01T12:02:00.000Z");
  assert.equal(iso(nextOccurrence(s, T("2026-06-01T12:00:59.999Z"))!), "2026-06-01T12:01:00.000Z");
  assert.deepEqual(
    nextOccurrences({ every_s: 7 }, 0, 3),
    [7_000, 14_000, 21_000],
  );
});

Deno.test("nextOccurrence() of a cron reads it in its time zone, across DST changes", () => {
  const s = { cron: "0 9 * * *", timezone: "Europe/Stockholm" };
  // CET (UTC+1) until 2026-03-29, CEST (UTC+2) until 2026-10-25.
  assert.deepEqual(nextOccurrences(s, T("2026-03-27T12:00:00Z"), 3).map(iso), [
    "2026-03-28T08:00:00.000Z",
    "2026-03-29T07:00:00.000Z",
    "2026-03-30T07:00:00.000Z",
  ]);
  assert.deepEqual(nextOccurrences(s, T("2026-10-24T12:00:00Z"), 2).map(iso), [
    "2026-10-25T08:00:00.000Z",
    "2026-10-26T08:00:00.000Z",
  ]);
  // The same expression without a zone is UTC.
  assert.equal(
    iso(nextOccurrence({ cron: "0 9 * * *" }, T("2026-03-28T12:00:00Z"))!),
    "2026-03-29T09:00:00.000Z",
  );
  // Weekdays in New York.
  assert.deepEqual(
    nextOccurrences(
      { cron: "30 8 * * 1-5", timezone: "America/New_York" },
      T("2026-06-05T13:00:00Z"),
      2,
    ).map(iso),
    ["2026-06-08T12:30:00.000Z", "2026-06-09T12:30:00.000Z"],
  );
});

Deno.test("nextOccurrence() of a six-field cron has seconds first", () => {
  assert.deepEqual(
    nextOccurrences({ cron: "*/15 * * * * *" }, T("2026-06-01T12:00:00.500Z"), 3).map(iso),
    ["2026-06-01T12:00:15.000Z", "2026-06-01T12:00:30.000Z", "2026-06-01T12:00:45.000Z"],
  );
});

// ---------------------------------------------------------------------------------------------
// Deterministic ids

Deno.test("occurrenceId() is <schedule_id>@<ISO 8601> and an execution id", () => {
  const at = T("2026-06-01T12:00:10Z");
  const id = occurrenceId("nightly-report", at);
  assert.equal(id, "nightly-report@2026-06-01T12:00:10.000Z");
  assert.equal(occurrenceId("nightly-report", at), id, "the same occurrence, the same id");
  assert.match(id, EXECUTION_ID_RE);
  assert.match(occurrenceId("x".repeat(128), at), EXECUTION_ID_RE);
  assert.deepEqual(parseOccurrenceId(id), { schedule_id: "nightly-report", at_ms: at });
  assert.equal(parseOccurrenceId("no-at-sign"), null);
  assert.equal(parseOccurrenceId("s@2026-06-01"), null);
  assert.equal(parseOccurrenceId("s@yesterday"), null);
});

// ---------------------------------------------------------------------------------------------
// Validation

Deno.test("parseSchedule() applies the defaults", () => {
  assert.deepEqual(schedule(), {
    schedule_id: "s",
    workflow: "W",
    every_s: 10,
    overlap: "skip",
    catch_up: "one",
    catch_up_window_s: 3600,
    paused: false,
  });
  const c = schedule({ every_s: undefined, cron: "0 9 * * 1", timezone: "Asia/Tokyo" });
  assert.equal(c.cron, "0 9 * * 1");
  assert.equal(c.timezone, "Asia/Tokyo");
});

Deno.test("parseSchedule() answers every problem with its JSON path", () => {
  const r = parseSchedule({
    schedule_id: "a@b",
    workflow: "1bad",
    version: "one",
    every_s: 1.5,
    overlap: "sometimes",
    catch_up: "never",
    catch_up_window_s: -1,
    paused: "no",
    colour: "red",
  }, NOW);
  assert.equal(r.ok, false);
  const paths = !r.ok ? r.problems.map((p) => p.path).sort() : [];
  assert.deepEqual(paths, [
    "$.catch_up",
    "$.catch_up_window_s",
    "$.colour",
    "$.every_s",
    "$.overlap",
    "$.paused",
    "$.schedule_id",
    "$.version",
    "$.workflow",
  ]);
  const problem = (raw: Record<string, unknown>) => {
    const p = parseSchedule({ schedule_id: "s", workflow: "W", ...raw }, NOW);
    assert.equal(p.ok, false, JSON.stringify(raw));
    return !p.ok ? p.problems : [];
  };
  assert.deepEqual(problem({}), [
    { path: "$.every_s", message: "give every_s (seconds) or cron (an expression)" },
  ]);
  assert.deepEqual(problem({ every_s: 5, cron: "* * * * *" }), [
    { path: "$.cron", message: "give either every_s or cron, not both" },
  ]);
  assert.deepEqual(problem({ every_s: 5, timezone: "UTC" }), [
    {
      path: "$.timezone",
      message: "only a cron schedule has a time zone (every_s counts from the epoch)",
    },
  ]);
  assert.deepEqual(problem({ cron: "* * * * *", timezone: "Mars/Olympus" }), [
    { path: "$.timezone", message: "must be an IANA time zone such as Europe/Paris" },
  ]);
  const [bad] = problem({ cron: "61 * * * *" });
  assert.equal(bad?.path, "$.cron");
  assert.match(bad!.message, /^is not a cron expression: .*minute/);
  assert.equal(problem({ cron: "* * *" })[0]?.path, "$.cron");
  assert.deepEqual(problem({ cron: "0 0 1 1 * 2020" }).map((p) => p.path), ["$.cron"]);
  assert.deepEqual(problem({ every_s: 0 }).map((p) => p.path), ["$.every_s"]);
  assert.equal(parseSchedule([], NOW).ok, false);
  assert.equal(parseSchedule(null, NOW).ok, false);
});

Deno.test("mergePatch() replaces members, removes nulls, and swaps every_s and cron", () => {
  const s = schedule({ version: "1.0.0", input: { a: 1 } });
  const { version: _, ...rest } = s;
  assert.deepEqual(mergePatch(s, { input: { b: 2 }, version: null, overlap: "allow_all" }), {
    ...rest,
    input: { b: 2 },
    overlap: "allow_all",
  });
  const cron = mergePatch(s, { cron: "0 * * * *", timezone: "UTC" }) as Schedule;
  assert.equal(cron.every_s, undefined);
  assert.equal(cron.cron, "0 * * * *");
  const back = mergePatch(cron, { every_s: 30 }) as Schedule;
  assert.deepEqual([back.every_s, back.cron, back.timezone], [30, undefined, undefined]);
  assert.equal(timingChanged(s, cron), true);
  assert.equal(timingChanged(s, { ...s }), false);
  assert.equal(timingChanged(cron, { ...cron, timezone: "Asia/Tokyo" }), true);
});

// ---------------------------------------------------------------------------------------------
// Catch-up

/** Occurrences every 10 s from this one: o(0), o(1), … */
const o = (i: number) => T("2026-06-01T12:00:00Z") + i * 10_000;

function plan(over: Partial<Schedule>, nextFire: number | null, now: number, startedAt: number) {
  const p = planDue(schedule(over), nextFire, now, startedAt);
  return {
    skippedBefore: p.skippedBefore,
    fired: p.steps.filter((s) => s.fire).map((s) => s.at),
    skipped: p.steps.filter((s) => !s.fire).map((s) => s.at),
    next: p.next,
  };
}

Deno.test("planDue() answers nothing before the next occurrence", () => {
  assert.deepEqual(plan({}, o(1), o(1) - 1, o(0)), {
    skippedBefore: 0,
    fired: [],
    skipped: [],
    next: o(1),
  });
  assert.deepEqual(plan({}, null, o(9), o(0)), {
    skippedBefore: 0,
    fired: [],
    skipped: [],
    next: null,
  });
});

Deno.test("planDue() fires an occurrence that is on time, whatever the catch-up policy", () => {
  for (const catch_up of ["skip", "one", "all"] as const) {
    assert.deepEqual(plan({ catch_up }, o(1), o(1) + 3, o(0)), {
      skippedBefore: 0,
      fired: [o(1)],
      skipped: [],
      next: o(2),
    });
  }
});

// The server was down from before o(1) until o(5) + 4 s: o(1)…o(5) were missed.
const down = { nextFire: o(1), startedAt: o(5) + 4_000, now: o(5) + 4_100 };

Deno.test("planDue() with catch_up skip fires none of the occurrences missed while down", () => {
  assert.deepEqual(plan({ catch_up: "skip" }, down.nextFire, down.now, down.startedAt), {
    skippedBefore: 5,
    fired: [],
    skipped: [],
    next: o(6),
  });
  // The next one is on time.
  assert.deepEqual(plan({ catch_up: "skip" }, o(6), o(6) + 5, down.startedAt).fired, [o(6)]);
});

Deno.test("planDue() with catch_up one fires only the latest missed within the window", () => {
  assert.deepEqual(plan({ catch_up: "one" }, down.nextFire, down.now, down.startedAt), {
    skippedBefore: 0,
    fired: [o(5)],
    skipped: [o(1), o(2), o(3), o(4)],
    next: o(6),
  });
  // A window of 25 s reaches back to o(3); older ones are counted only.
  assert.deepEqual(
    plan({ catch_up: "one", catch_up_window_s: 25 }, down.nextFire, down.now, down.startedAt),
    { skippedBefore: 2, fired: [o(5)], skipped: [o(3), o(4)], next: o(6) },
  );
  // A window shorter than the latest missed one's age: none fires.
  assert.deepEqual(
    plan({ catch_up: "one", catch_up_window_s: 3 }, down.nextFire, down.now, down.startedAt),
    { skippedBefore: 5, fired: [], skipped: [], next: o(6) },
  );
});

Deno.test("planDue() with catch_up all fires every missed occurrence within the window", () => {
  assert.deepEqual(plan({ catch_up: "all" }, down.nextFire, down.now, down.startedAt), {
    skippedBefore: 0,
    fired: [o(1), o(2), o(3), o(4), o(5)],
    skipped: [],
    next: o(6),
  });
  assert.deepEqual(
    plan({ catch_up: "all", catch_up_window_s: 25 }, down.nextFire, down.now, down.startedAt),
    { skippedBefore: 2, fired: [o(3), o(4), o(5)], skipped: [], next: o(6) },
  );
  assert.deepEqual(
    plan({ catch_up: "all", catch_up_window_s: 0 }, down.nextFire, down.now, down.startedAt),
    { skippedBefore: 5, fired: [], skipped: [], next: o(6) },
  );
});

Deno.test("planDue() treats an occurrence reached too late while running as missed", () => {
  // Running since o(0); a stall until o(3) + LATE_AFTER_MS + 1: o(1)…o(3) were missed.
  const now = o(3) + LATE_AFTER_MS + 1;
  assert.deepEqual(plan({ catch_up: "skip" }, o(1), now, o(0)).skippedBefore, 3);
  assert.deepEqual(plan({ catch_up: "one" }, o(1), now, o(0)).fired, [o(3)]);
  assert.deepEqual(plan({ catch_up: "all" }, o(1), now, o(0)).fired, [o(1), o(2), o(3)]);
  // Late by less: the latest one is on time, the earlier ones were missed.
  assert.deepEqual(plan({ catch_up: "skip" }, o(1), o(3) + 10, o(0)), {
    skippedBefore: 2,
    fired: [o(3)],
    skipped: [],
    next: o(4),
  });
});

Deno.test("planDue() handles at most MAX_STEPS_PER_PASS occurrences and goes on next pass", () => {
  const s = { every_s: 1, catch_up: "all" as const };
  const start = T("2026-06-01T00:00:00Z");
  const now = start + 500_000;
  const first = plan(s, start, now, now);
  assert.equal(first.fired.length, MAX_STEPS_PER_PASS);
  assert.equal(first.next, start + MAX_STEPS_PER_PASS * 1000);
  const second = plan(s, first.next, now, now);
  assert.equal(second.fired[0], first.next);
  // Counted only, in one step, however many: 10 days of seconds.
  const skip = plan(
    { every_s: 1, catch_up: "skip" },
    start,
    start + 864_000_000,
    start + 864_000_000,
  );
  assert.equal(skip.skippedBefore, 864_000);
  assert.equal(skip.next, start + 864_001_000);
});

Deno.test("planDue() counts missed cron occurrences before the window", () => {
  const s = {
    every_s: undefined,
    cron: "0 * * * *",
    catch_up: "one" as const,
    catch_up_window_s: 3 * 3600,
  };
  const start = T("2026-06-01T00:00:00Z");
  const now = T("2026-06-02T00:30:00Z");
  const p = plan(s, start, now, now);
  // 00:00 … 21:00 (22) counted only; 22:00 and 23:00 skipped; 00:00 on the 2nd fires.
  assert.equal(p.skippedBefore, 22);
  assert.deepEqual(p.skipped.map(iso), ["2026-06-01T22:00:00.000Z", "2026-06-01T23:00:00.000Z"]);
  assert.deepEqual(p.fired.map(iso), ["2026-06-02T00:00:00.000Z"]);
  assert.equal(iso(p.next!), "2026-06-02T01:00:00.000Z");
});

// ---------------------------------------------------------------------------------------------
// Overlap

Deno.test("overlapAction() starts with nothing running, whatever the policy", () => {
  for (const p of ["skip", "buffer_one", "allow_all", "cancel_other"] as OverlapPolicy[]) {
    assert.equal(overlapAction(p, 0, false), "start");
    assert.equal(overlapAction(p, 0, true), "start");
  }
});

Deno.test("overlapAction() with an occurrence still running follows the policy", () => {
  assert.equal(overlapAction("skip", 1, false), "skip");
  assert.equal(overlapAction("buffer_one", 1, false), "buffer");
  assert.equal(overlapAction("buffer_one", 1, true), "skip", "at most one buffered");
  assert.equal(overlapAction("allow_all", 3, false), "start");
  assert.equal(overlapAction("cancel_other", 2, false), "cancel_then_start");
});
