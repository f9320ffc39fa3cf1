/**
 * The `orbit_schedules` part of the one store conformance suite (`store_conformance.ts` calls
 * it, so every driver runs it): definitions, the due query, the two compare-and-sets of an
 * occurrence (claim, advance) and the claim's renewal, counts, dropping claims, the term fence,
 * and the running and existing executions of a schedule.
 */
import assert from "node:assert/strict";
import { FencedError, type ScheduleRow, type Store } from "../store.ts";
import { createItem } from "./fixtures.ts";

/** A schedule row with test defaults. */
export function scheduleRow(id: string, over: Partial<ScheduleRow> = {}): ScheduleRow {
  return {
    schedule_id: id,
    spec: { workflow: "Order", every_s: 60, overlap: "skip", catch_up: "one", input: { n: 1 } },
    workflow: "Order",
    paused: false,
    next_fire_ms: 60_000,
    buffered_ms: null,
    last_fired_ms: null,
    fired: 0,
    skipped: 0,
    claimed_by: null,
    claimed_until_ms: null,
    created_ms: 1_000,
    updated_ms: 1_000,
    ...over,
  };
}

type Test = (title: string, fn: (store: Store) => Promise<void>) => void;

/** Registers the schedule tests through the suite's `test` (a fresh, migrated store each). */
export function runScheduleConformance(test: Test): void {
  test("createSchedule() inserts once; getSchedule() answers the row", async (store) => {
    const a = scheduleRow("a", { spec: { nested: { list: [1, "x", null] }, tz: "é" } });
    assert.equal(await store.createSchedule(a), true);
    assert.equal(await store.createSchedule(scheduleRow("a", { workflow: "Other" })), false);
    assert.deepEqual(await store.getSchedule("a"), a);
    assert.equal(await store.getSchedule("b"), null);
  });

  test("listSchedules() orders by id; deleteSchedule() removes one", async (store) => {
    for (const id of ["b", "a", "c"]) await store.createSchedule(scheduleRow(id));
    assert.deepEqual((await store.listSchedules()).map((s) => s.schedule_id), ["a", "b", "c"]);
    assert.equal(await store.deleteSchedule("b"), true);
    assert.equal(await store.deleteSchedule("b"), false);
    assert.deepEqual((await store.listSchedules()).map((s) => s.schedule_id), ["a", "c"]);
  });

  test("updateSchedule() writes the definition and moves next_fire_ms only when asked", async (store) => {
    await store.createSchedule(scheduleRow("a", { fired: 3, skipped: 2 }));
    const spec = { workflow: "Ship", cron: "0 * * * *" };
    const kept = await store.updateSchedule("a", { spec, workflow: "Ship", paused: true, now: 5 });
    assert.deepEqual(kept, {
      ...scheduleRow("a", { fired: 3, skipped: 2 }),
      spec,
      workflow: "Ship",
      paused: true,
      updated_ms: 5,
    });
    const moved = await store.updateSchedule("a", {
      spec,
      workflow: "Ship",
      paused: false,
      next_fire_ms: 90_000,
      now: 6,
    });
    assert.equal(moved?.next_fire_ms, 90_000);
    assert.equal(moved?.paused, false);
    const none = await store.updateSchedule("a", {
      spec,
      workflow: "Ship",
      paused: false,
      next_fire_ms: null,
      now: 7,
    });
    assert.equal(none?.next_fire_ms, null);
    assert.deepEqual(await store.getSchedule("a"), none);
    assert.equal(
      await store.updateSchedule("zz", { spec, workflow: "Ship", paused: false, now: 8 }),
      null,
    );
  });

  test("dueSchedules() answers due and buffered schedules nobody else holds", async (store) => {
    await store.createSchedule(scheduleRow("due-late", { next_fire_ms: 100 }));
    await store.createSchedule(scheduleRow("due-now", { next_fire_ms: 500 }));
    await store.createSchedule(scheduleRow("future", { next_fire_ms: 501 }));
    await store.createSchedule(scheduleRow("buffered", { next_fire_ms: 9_000, buffered_ms: 400 }));
    await store.createSchedule(scheduleRow("paused", { next_fire_ms: 100, paused: true }));
    await store.createSchedule(scheduleRow("none", { next_fire_ms: null }));
    const held = { claimed_by: "other", claimed_until_ms: 600 };
    await store.createSchedule(scheduleRow("held", { next_fire_ms: 200, ...held }));
    await store.createSchedule(
      scheduleRow("mine", { next_fire_ms: 300, ...held, claimed_by: "me" }),
    );
    await store.createSchedule(scheduleRow("expired", { ...held, claimed_until_ms: 499 }));
    const ids = async (now: number, limit = 100) =>
      (await store.dueSchedules(now, "me", limit)).map((s) => s.schedule_id);
    assert.deepEqual(await ids(500), ["due-late", "mine", "due-now", "buffered"]);
    assert.deepEqual(await ids(500, 2), ["due-late", "mine"]);
    assert.deepEqual(await ids(60_000), [
      "due-late",
      "held",
      "mine",
      "due-now",
      "future",
      "buffered",
      "expired",
    ]);
    assert.deepEqual(await ids(50), ["buffered"]);
  });

  test("nextScheduleFireMs() is the earliest occurrence of schedules not paused", async (store) => {
    assert.equal(await store.nextScheduleFireMs(), null);
    await store.createSchedule(scheduleRow("a", { next_fire_ms: 700 }));
    await store.createSchedule(scheduleRow("b", { next_fire_ms: 300, paused: true }));
    await store.createSchedule(scheduleRow("c", { next_fire_ms: null }));
    assert.equal(await store.nextScheduleFireMs(), 700);
  });

  test("claimSchedule() is a compare-and-set on next_fire_ms that one owner wins", async (store) => {
    await store.createSchedule(scheduleRow("a", { next_fire_ms: 100 }));
    const claim = { schedule_id: "a", next_fire_ms: 100, until_ms: 1_100, now: 150 };
    assert.equal(await store.claimSchedule({ ...claim, next_fire_ms: 99, owner: "x" }), false);
    assert.equal(await store.claimSchedule({ ...claim, owner: "x" }), true);
    assert.equal(await store.claimSchedule({ ...claim, owner: "y" }), false);
    // The owner's own live claim does not keep it out (a pass that failed half-way).
    assert.equal(await store.claimSchedule({ ...claim, owner: "x", until_ms: 1_200 }), true);
    const row = await store.getSchedule("a");
    assert.equal(row?.claimed_by, "x");
    assert.equal(row?.claimed_until_ms, 1_200);
    // Expired: another owner takes it.
    assert.equal(await store.claimSchedule({ ...claim, owner: "y", now: 1_201 }), true);
    assert.equal((await store.getSchedule("a"))?.claimed_by, "y");
    await store.createSchedule(scheduleRow("p", { next_fire_ms: 100, paused: true }));
    assert.equal(await store.claimSchedule({ ...claim, schedule_id: "p", owner: "x" }), false);
    await store.createSchedule(scheduleRow("n", { next_fire_ms: null, buffered_ms: 50 }));
    assert.equal(
      await store.claimSchedule({ ...claim, schedule_id: "n", next_fire_ms: null, owner: "x" }),
      true,
    );
    assert.equal(await store.claimSchedule({ ...claim, schedule_id: "zz", owner: "x" }), false);
  });

  test("advanceSchedule() counts, moves on and releases, for the claim's owner only", async (store) => {
    await store.createSchedule(
      scheduleRow("a", { next_fire_ms: 100, fired: 1, last_fired_ms: 40 }),
    );
    const claim = { schedule_id: "a", next_fire_ms: 100, owner: "x", until_ms: 9_000, now: 100 };
    assert.equal(await store.claimSchedule(claim), true);
    const advance = {
      schedule_id: "a",
      owner: "x",
      claimed_next_fire_ms: 100,
      next_fire_ms: 160,
      buffered_ms: 100,
      last_fired_ms: null,
      fired: 2,
      skipped: 3,
    };
    assert.equal(await store.advanceSchedule({ ...advance, owner: "y" }), false);
    assert.equal(await store.advanceSchedule(advance), true);
    assert.deepEqual(
      await store.getSchedule("a"),
      scheduleRow("a", {
        next_fire_ms: 160,
        buffered_ms: 100,
        fired: 3,
        skipped: 3,
        last_fired_ms: 40,
      }),
    );
    assert.equal(await store.advanceSchedule(advance), false, "the claim was released");

    // A PATCH moved next_fire_ms while the claim was held: its value stays, the counts land.
    assert.equal(await store.claimSchedule({ ...claim, next_fire_ms: 160 }), true);
    const row = (await store.getSchedule("a"))!;
    await store.updateSchedule("a", { ...row, next_fire_ms: 5_000, now: 170 });
    assert.equal(
      await store.advanceSchedule({
        ...advance,
        claimed_next_fire_ms: 160,
        next_fire_ms: 220,
        buffered_ms: null,
        last_fired_ms: 160,
        fired: 1,
        skipped: 0,
      }),
      true,
    );
    const after = await store.getSchedule("a");
    assert.equal(after?.next_fire_ms, 5_000);
    assert.equal(after?.fired, 4);
    assert.equal(after?.buffered_ms, null);
    assert.equal(after?.last_fired_ms, 160);
    assert.equal(after?.claimed_by, null);
    assert.equal(after?.claimed_until_ms, null);
  });

  test("renewScheduleClaim() extends the owner's claim while the row is as claimed", async (store) => {
    await store.createSchedule(scheduleRow("a", { next_fire_ms: 100 }));
    const claim = { schedule_id: "a", next_fire_ms: 100, owner: "x", until_ms: 130, now: 100 };
    const renewal = { schedule_id: "a", owner: "x", claimed_next_fire_ms: 100, until_ms: 150 };
    assert.equal(await store.renewScheduleClaim(renewal), false, "no claim: nothing to renew");
    assert.equal((await store.getSchedule("a"))?.claimed_until_ms, null);
    assert.equal(await store.claimSchedule(claim), true);
    assert.equal(await store.renewScheduleClaim(renewal), true);
    assert.equal((await store.getSchedule("a"))?.claimed_until_ms, 150);
    // Renewed, the claim keeps another owner out past its first lease.
    assert.equal(
      await store.claimSchedule({ ...claim, owner: "y", until_ms: 170, now: 140 }),
      false,
    );
    assert.equal(await store.renewScheduleClaim({ ...renewal, owner: "y" }), false, "not y's");
    assert.equal(
      await store.renewScheduleClaim({ ...renewal, claimed_next_fire_ms: 90 }),
      false,
      "a claim taken at another next_fire_ms",
    );
    // An expired claim nobody took is still the owner's: the renewal extends it.
    assert.equal(await store.renewScheduleClaim({ ...renewal, until_ms: 200 }), true);
    // Taken once expired, it is the taker's; the first owner's renewal writes nothing.
    assert.equal(
      await store.claimSchedule({ ...claim, owner: "y", until_ms: 240, now: 201 }),
      true,
    );
    assert.equal(await store.renewScheduleClaim({ ...renewal, until_ms: 260 }), false);
    let row = await store.getSchedule("a");
    assert.deepEqual([row?.claimed_by, row?.claimed_until_ms], ["y", 240]);
    // A PATCH that moved next_fire_ms, an advance, or dropped claims end the renewals.
    const y = { ...renewal, owner: "y", until_ms: 250 };
    await store.updateSchedule("a", {
      spec: {},
      workflow: "Order",
      paused: false,
      next_fire_ms: 110,
      now: 5,
    });
    assert.equal(await store.renewScheduleClaim(y), false);
    assert.equal(await store.renewScheduleClaim({ ...y, claimed_next_fire_ms: 110 }), true);
    await store.dropScheduleClaims();
    assert.equal(await store.renewScheduleClaim({ ...y, claimed_next_fire_ms: 110 }), false);
    row = await store.getSchedule("a");
    assert.deepEqual([row?.claimed_by, row?.claimed_until_ms], [null, null]);
    await store.createSchedule(scheduleRow("n", { next_fire_ms: null }));
    const none = { schedule_id: "n", next_fire_ms: null, owner: "x", until_ms: 9, now: 1 };
    assert.equal(await store.claimSchedule(none), true);
    assert.equal(
      await store.renewScheduleClaim({ ...renewal, schedule_id: "n", claimed_next_fire_ms: null }),
      true,
      "a null next_fire_ms compares equal",
    );
    assert.equal(await store.renewScheduleClaim({ ...renewal, schedule_id: "zz" }), false);
    // Fenced like every scheduler write.
    await assert.rejects(
      store.renewScheduleClaim({
        ...renewal,
        schedule_id: "n",
        claimed_next_fire_ms: null,
        term: 7,
      }),
      FencedError,
    );
    assert.equal(
      await store.renewScheduleClaim({
        ...renewal,
        schedule_id: "n",
        claimed_next_fire_ms: null,
        term: 0,
      }),
      true,
    );
  });

  test("countSchedule() adds counts outside a claim", async (store) => {
    await store.createSchedule(scheduleRow("a", { fired: 1, skipped: 1, last_fired_ms: 5 }));
    const count = { fired: 1, skipped: 0, last_fired_ms: 777 };
    assert.equal(await store.countSchedule("a", count), true);
    assert.equal(
      await store.countSchedule("a", { ...count, last_fired_ms: null, skipped: 4 }),
      true,
    );
    const row = await store.getSchedule("a");
    assert.deepEqual([row?.fired, row?.skipped, row?.last_fired_ms], [3, 5, 777]);
    assert.equal(await store.countSchedule("zz", count), false);
  });

  test("dropScheduleClaims() releases every claim", async (store) => {
    await store.createSchedule(scheduleRow("a", { claimed_by: "old", claimed_until_ms: 9e12 }));
    await store.createSchedule(scheduleRow("b", { claimed_by: "old", claimed_until_ms: 9e12 }));
    await store.createSchedule(scheduleRow("c"));
    assert.equal(await store.dropScheduleClaims(), 2);
    for (const s of await store.listSchedules()) {
      assert.equal(s.claimed_by, null);
      assert.equal(s.claimed_until_ms, null);
    }
    assert.equal(await store.dropScheduleClaims(), 0);
    const claim = { schedule_id: "a", next_fire_ms: 60_000, owner: "new", until_ms: 2, now: 1 };
    assert.equal(await store.claimSchedule(claim), true);
  });

  test("schedule writes with a term are fenced by the cluster term", async (store) => {
    await store.createSchedule(scheduleRow("a", { next_fire_ms: 100 }));
    const claim = { schedule_id: "a", next_fire_ms: 100, owner: "x", until_ms: 900, now: 100 };
    const fenced = (e: unknown) =>
      e instanceof FencedError &&
      e.message ===
        "fenced: this server led term 7, but the cluster is at term 0; another server is the leader";
    await assert.rejects(store.claimSchedule({ ...claim, term: 7 }), fenced);
    assert.equal((await store.getSchedule("a"))?.claimed_by, null, "a fenced claim writes nothing");
    // Term 0 is the term of a fresh database: the writes go through.
    assert.equal(await store.claimSchedule({ ...claim, term: 0 }), true);
    const advance = {
      schedule_id: "a",
      owner: "x",
      claimed_next_fire_ms: 100,
      next_fire_ms: 200,
      buffered_ms: null,
      last_fired_ms: 100,
      fired: 1,
      skipped: 0,
    };
    await assert.rejects(store.advanceSchedule({ ...advance, term: 7 }), fenced);
    assert.equal((await store.getSchedule("a"))?.fired, 0);
    const count = { fired: 1, skipped: 0, last_fired_ms: null };
    await assert.rejects(store.countSchedule("a", { ...count, term: 7 }), fenced);
    assert.equal(await store.advanceSchedule({ ...advance, term: 0 }), true);
    assert.equal(await store.countSchedule("a", { ...count, term: 0 }), true);
    const row = await store.getSchedule("a");
    assert.deepEqual([row?.next_fire_ms, row?.fired, row?.claimed_by], [200, 2, null]);
    // A lost compare-and-set under the right term is false, not fenced.
    assert.equal(await store.claimSchedule({ ...claim, term: 0 }), false);
  });

  test("runningScheduleExecutions() answers the schedule's running executions", async (store) => {
    const running = ["s@2026-01-01T00:00:00.000Z", "s@2026-01-01T00:00:01.000Z"];
    await store.commit([
      ...running.map((id) => createItem(id)),
      createItem("s@2026-01-01T00:00:02.000Z", { status: "completed", closed_ms: 3 }),
      createItem("s.b@2026-01-01T00:00:00.000Z"),
      createItem("sA@2026-01-01T00:00:00.000Z"),
      createItem("s"),
      createItem("t@2026-01-01T00:00:00.000Z"),
    ]);
    assert.deepEqual(await store.runningScheduleExecutions("s"), running);
    assert.deepEqual(await store.runningScheduleExecutions("s.b"), [
      "s.b@2026-01-01T00:00:00.000Z",
    ]);
    assert.deepEqual(await store.runningScheduleExecutions("u"), []);
  });

  test("executionIdsBetween() answers the ids of any status in a closed range", async (store) => {
    await store.commit([
      createItem("s@2026-01-01T00:00:00.000Z"),
      createItem("s@2026-01-01T00:00:01.000Z", { status: "completed", closed_ms: 3 }),
      createItem("s@2026-01-01T00:00:02.000Z", { status: "failed", closed_ms: 3 }),
      createItem("s@2026-01-01T00:00:03.000Z"),
      createItem("s.b@2026-01-01T00:00:01.000Z"),
      createItem("sA@2026-01-01T00:00:01.000Z"),
      createItem("t@2026-01-01T00:00:01.000Z"),
    ]);
    const lo = "s@2026-01-01T00:00:01.000Z";
    const hi = "s@2026-01-01T00:00:03.000Z";
    assert.deepEqual(await store.executionIdsBetween(lo, hi, 10), [
      "s@2026-01-01T00:00:01.000Z",
      "s@2026-01-01T00:00:02.000Z",
      "s@2026-01-01T00:00:03.000Z",
    ]);
    assert.deepEqual(await store.executionIdsBetween(lo, hi, 2), [
      "s@2026-01-01T00:00:01.000Z",
      "s@2026-01-01T00:00:02.000Z",
    ]);
    assert.deepEqual(await store.executionIdsBetween(lo, lo, 10), [lo]);
    assert.deepEqual(
      await store.executionIdsBetween(
        "s@2026-01-02T00:00:00.000Z",
        "s@2026-01-03T00:00:00.000Z",
        10,
      ),
      [],
    );
  });
}
