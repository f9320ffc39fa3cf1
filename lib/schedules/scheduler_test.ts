/**
 * The scheduler in process: a real runtime on a fresh SQLite file, a clock the test moves, and
 * passes run by hand (`start({ loop: false })`, then `pass()`), so every policy is checked at
 * exact times. `Stuck` stays running (no worker serves its task); `Quick` completes at once.
 */
import assert from "node:assert/strict";
import { Runtime } from "../runtime.ts";
import { Scheduler } from "./scheduler.ts";
import { openSqliteStore } from "../store/sqlite.ts";
import { FencedError, type Store } from "../store/store.ts";
import { occurrenceId, type Schedule } from "./schedules.ts";

const STUCK = {
  ir: "orbit-ir/1",
  name: "Stuck",
  version: "1.0.0",
  steps: [{ id: "wait", task: "nobody.serves", contract: "1" }],
};
const QUICK = {
  ir: "orbit-ir/1",
  name: "Quick",
  version: "1.0.0",
  steps: [{ id: "done", return: "{% $input %}" }],
};

/** Occurrences every 10 s: o(0), o(1), … */
const o = (i: number) => Date.parse("2026-06-01T12:00:00Z") + i * 10_000;

interface Env {
  rt: Runtime;
  store: Store;
  clock: { t: number };
  /** The execution ids of schedule `s`, in time order. */
  executions(prefix?: string): Promise<Array<{ id: string; status: string }>>;
  /** A second scheduler on the same store (another process, or the same one restarted). */
  scheduler(owner: string, opts?: { term?: () => number | null }): Scheduler;
}

function schedulerTest(name: string, fn: (env: Env) => Promise<void>): void {
  Deno.test({
    name,
    sanitizeOps: false,
    sanitizeResources: false,
    fn: async () => {
      const dir = await Deno.makeTempDir({ prefix: "orbit-scheduler-test-" });
      const store = await openSqliteStore(`${dir}/orbit.db`);
      await store.migrate();
      const clock = { t: o(0) - 5_000 };
      const rt = new Runtime(store, {
        sessionTimeoutMs: 30_000,
        maxActiveExecutions: null,
        clock: { now: () => clock.t, newId: () => crypto.randomUUID() },
      });
      try {
        await rt.definitions.deploy(STUCK);
        await rt.definitions.deploy(QUICK);
        await rt.scheduler.start({ loop: false });
        await fn({
          rt,
          store,
          clock,
          executions: async (prefix = "s@") => {
            const page = await store.listExecutions({ limit: 1000 });
            return page.executions.filter((x) => x.execution_id.startsWith(prefix))
              .map((x) => ({ id: x.execution_id, status: x.status }))
              .sort((a, b) => (a.id < b.id ? -1 : 1));
          },
          scheduler: (owner, opts = {}) =>
            new Scheduler(
              { store, executions: rt.executions, metrics: rt.metrics, clock: rt.clock },
              { owner, ...opts },
            ),
        });
      } finally {
        await rt.stop();
        await Deno.remove(dir, { recursive: true });
      }
    },
  });
}

async function create(env: Env, over: Partial<Schedule> & Record<string, unknown>) {
  return await env.rt.schedules.create({
    schedule_id: "s",
    workflow: "Stuck",
    every_s: 10,
    ...over,
  });
}

/** Runs a pass at `at`. */
async function passAt(env: Env, at: number, scheduler = env.rt.scheduler) {
  env.clock.t = at;
  return await scheduler.pass();
}

const id = (i: number) => occurrenceId("s", o(i));

schedulerTest(
  "an occurrence starts once with its deterministic id, counted and advanced",
  async (env) => {
    const view = await create(env, { workflow: "Quick", input: { n: 1 } });
    assert.equal(view.next_fire_ms, o(0));
    assert.deepEqual(await passAt(env, o(0) - 1), { next: o(0), more: false });
    assert.deepEqual(await env.executions(), []);
    assert.deepEqual(await passAt(env, o(0) + 3), { next: o(1), more: false });
    await passAt(env, o(0) + 4);
    assert.deepEqual(await env.executions(), [{ id: id(0), status: "completed" }]);
    const s = await env.rt.schedules.get("s");
    assert.deepEqual([s.fired, s.skipped, s.next_fire_ms, s.last_execution_id], [
      1,
      0,
      o(1),
      id(0),
    ]);
    assert.equal((await env.store.getSchedule("s"))?.claimed_by, null, "the claim was released");
    assert.equal(env.rt.metrics.schedulesFired.get(), 1);
    assert.deepEqual((await env.store.getExecution(id(0)))?.output, { n: 1 });
  },
);

schedulerTest("overlap skip counts an occurrence skipped while one still runs", async (env) => {
  await create(env, { overlap: "skip" });
  await passAt(env, o(0));
  await passAt(env, o(1));
  await passAt(env, o(2));
  assert.deepEqual(await env.executions(), [{ id: id(0), status: "running" }]);
  let s = await env.rt.schedules.get("s");
  assert.deepEqual([s.fired, s.skipped], [1, 2]);
  await env.rt.executions.cancel(id(0), "test");
  await passAt(env, o(3));
  s = await env.rt.schedules.get("s");
  assert.deepEqual([s.fired, s.skipped], [2, 2]);
  assert.deepEqual((await env.executions()).map((x) => x.id), [id(0), id(3)]);
});

schedulerTest("overlap buffer_one keeps one occurrence until the running one ends", async (env) => {
  await create(env, { overlap: "buffer_one" });
  await passAt(env, o(0));
  await passAt(env, o(1));
  await passAt(env, o(2));
  let s = await env.rt.schedules.get("s");
  assert.deepEqual([s.fired, s.skipped, s.buffered_ms], [1, 1, o(1)]);
  // Still running: the buffered one waits.
  await passAt(env, o(2) + 500);
  assert.equal((await env.executions()).length, 1);
  await env.rt.executions.cancel(id(0), "test");
  await passAt(env, o(2) + 900);
  s = await env.rt.schedules.get("s");
  assert.deepEqual([s.fired, s.skipped, s.buffered_ms, s.next_fire_ms], [2, 1, null, o(3)]);
  assert.deepEqual(await env.executions(), [
    { id: id(0), status: "cancelled" },
    { id: id(1), status: "running" },
  ]);
});

schedulerTest("overlap allow_all starts every occurrence", async (env) => {
  await create(env, { overlap: "allow_all" });
  for (let i = 0; i < 3; i++) await passAt(env, o(i));
  assert.deepEqual((await env.executions()).map((x) => x.status), [
    "running",
    "running",
    "running",
  ]);
  assert.equal((await env.rt.schedules.get("s")).fired, 3);
});

schedulerTest("overlap cancel_other cancels the running one, then starts", async (env) => {
  await create(env, { overlap: "cancel_other" });
  await passAt(env, o(0));
  await passAt(env, o(1));
  assert.deepEqual(await env.executions(), [
    { id: id(0), status: "cancelled" },
    { id: id(1), status: "running" },
  ]);
  const s = await env.rt.schedules.get("s");
  assert.deepEqual([s.fired, s.skipped], [2, 0]);
});

for (
  const [catch_up, fired] of [
    ["skip", [0, 6]],
    ["one", [0, 5, 6]],
    ["all", [0, 2, 3, 4, 5, 6]],
  ] as const
) {
  schedulerTest(`catch_up ${catch_up} after a restart across due occurrences`, async (env) => {
    // Window 35 s: at the restart (o(5) + 4 s) it reaches back to o(2); o(1) is too old.
    await create(env, { workflow: "Quick", catch_up, catch_up_window_s: 35, overlap: "allow_all" });
    await passAt(env, o(0));
    await env.rt.scheduler.stop(); // the server goes down before o(1)…
    env.clock.t = o(5) + 4_000; // …and comes back after o(5)
    const restarted = env.scheduler("restarted");
    await restarted.start({ loop: false });
    await passAt(env, o(5) + 4_100, restarted);
    await passAt(env, o(6), restarted);
    assert.deepEqual((await env.executions()).map((x) => x.id), fired.map(id));
    const s = await env.rt.schedules.get("s");
    assert.equal(s.fired, fired.length);
    assert.equal(s.fired + s.skipped, 7, "every occurrence o(0)…o(6) fired or skipped");
  });
}

schedulerTest(
  "a live claim of another scheduler keeps this one out until it expires",
  async (env) => {
    await create(env, { workflow: "Quick", overlap: "allow_all" });
    const other = env.scheduler("other");
    env.clock.t = o(0);
    assert.equal(
      await env.store.claimSchedule({
        schedule_id: "s",
        next_fire_ms: o(0),
        owner: "other",
        until_ms: o(0) + 30_000,
        now: o(0),
      }),
      true,
    );
    await passAt(env, o(0) + 10);
    assert.deepEqual(await env.executions(), []);
    // The other one died holding it; after the lease, this one takes the row. By then o(0)…o(2)
    // were missed (catch_up one: only o(2) fires) and o(3) is on time.
    await passAt(env, o(0) + 30_001);
    assert.deepEqual((await env.executions()).map((x) => x.id), [id(2), id(3)]);
    const s = await env.rt.schedules.get("s");
    assert.deepEqual([s.fired, s.skipped], [2, 2]);
    // A new leader drops the claims left in the table at once.
    await env.store.claimSchedule({
      schedule_id: "s",
      next_fire_ms: o(4),
      owner: "other",
      until_ms: o(9),
      now: o(4),
    });
    await other.start({ loop: false });
    assert.equal((await env.store.getSchedule("s"))?.claimed_by, null);
  },
);

schedulerTest(
  "an occurrence started before a crash is started once and counted once",
  async (env) => {
    await create(env, { workflow: "Quick" });
    env.clock.t = o(0);
    // A scheduler claimed o(0) and started it, then died before its advance.
    await env.store.claimSchedule({
      schedule_id: "s",
      next_fire_ms: o(0),
      owner: "dead",
      until_ms: o(0) + 30_000,
      now: o(0),
    });
    await env.rt.executions.start({ workflow: "Quick", execution_id: id(0) });
    const next = env.scheduler("next");
    await next.start({ loop: false }); // drops the dead one's claim
    await passAt(env, o(0) + 1_000, next);
    assert.deepEqual((await env.executions()).map((x) => x.id), [id(0)]);
    assert.equal((await env.rt.schedules.get("s")).fired, 1);
  },
);

schedulerTest("a scheduler fenced by a newer term starts nothing", async (env) => {
  await create(env, { workflow: "Quick" });
  const deposed = env.scheduler("deposed", { term: () => 3 });
  await deposed.start({ loop: false, dropClaims: false });
  await passAt(env, o(0), deposed);
  assert.deepEqual(await env.executions(), []);
  await assert.rejects(
    env.store.claimSchedule({
      schedule_id: "s",
      next_fire_ms: o(0),
      owner: "deposed",
      until_ms: o(1),
      now: o(0),
      term: 3,
    }),
    FencedError,
  );
  const leader = env.scheduler("leader", { term: () => 0 });
  await leader.start({ loop: false });
  await passAt(env, o(0) + 1, leader);
  assert.deepEqual((await env.executions()).map((x) => x.id), [id(0)]);
});

schedulerTest("trigger, pause, resume and PATCH move the schedule as documented", async (env) => {
  await create(env, { workflow: "Quick" });
  env.clock.t = o(0) - 2_000;
  const t = await env.rt.schedules.trigger("s");
  assert.equal(t.created, true);
  assert.equal(t.row.execution_id, occurrenceId("s", o(0) - 2_000));
  assert.equal((await env.rt.schedules.get("s")).fired, 1);

  const paused = await env.rt.schedules.pause("s");
  assert.deepEqual([paused.paused, paused.next_fire_ms], [true, null]);
  await passAt(env, o(3));
  assert.equal((await env.executions()).length, 1, "a paused schedule fires nothing");
  // Resuming goes on from now: what passed while paused is not caught up.
  env.clock.t = o(3) + 500;
  assert.equal((await env.rt.schedules.resume("s")).next_fire_ms, o(4));
  await passAt(env, o(4));
  assert.equal((await env.executions()).length, 2);

  const patched = await env.rt.schedules.update("s", { every_s: 60, input: { x: 1 } });
  assert.equal(patched.next_fire_ms, Date.parse("2026-06-01T12:01:00Z"));
  assert.deepEqual(patched.input, { x: 1 });
  const cron = await env.rt.schedules.update("s", { cron: "0 9 * * *", timezone: "Asia/Tokyo" });
  assert.equal(cron.every_s, undefined);
  assert.equal(new Date(cron.next_fire_ms!).toISOString(), "2026-06-02T00:00:00.000Z");
  await assert.rejects(env.rt.schedules.update("s", { overlap: "never" }), {
    code: "INVALID_SCHEDULE",
  });
  await assert.rejects(env.rt.schedules.update("s", { schedule_id: "other" }), {
    code: "INVALID_SCHEDULE",
  });
  await env.rt.schedules.remove("s");
  await assert.rejects(env.rt.schedules.get("s"), { code: "UNKNOWN_SCHEDULE" });
  await assert.rejects(env.rt.schedules.trigger("s"), { code: "UNKNOWN_SCHEDULE" });
});

/** Another scheduler's claim on the occurrence at `at`, as one that died mid-pass left it. */
async function claimedByADeadPass(env: Env, at: number): Promise<void> {
  const claimed = await env.store.claimSchedule({
    schedule_id: "s",
    next_fire_ms: at,
    owner: "dead",
    until_ms: at + 30_000,
    now: at,
    term: null,
  });
  assert.ok(claimed);
}

for (const overlap of ["skip", "cancel_other", "buffer_one"] as const) {
  schedulerTest(
    `overlap ${overlap}: an occurrence started by a pass whose advance never landed is not an overlap with itself`,
    async (env) => {
      await create(env, { workflow: "Stuck", overlap });
      // A pass claimed o(0), started it, and died before its advance.
      env.clock.t = o(0);
      await claimedByADeadPass(env, o(0));
      await env.rt.executions.start({ workflow: "Stuck", execution_id: id(0) });
      // The next scheduler (a restart drops the old claims) plans o(0) again.
      const next = env.scheduler("next");
      await next.start({ loop: false });
      await passAt(env, o(0) + 1_000, next);
      assert.deepEqual(await env.executions(), [{ id: id(0), status: "running" }]);
      const s = await env.rt.schedules.get("s");
      assert.deepEqual([s.fired, s.skipped, s.buffered_ms, s.next_fire_ms], [1, 0, null, o(1)]);
    },
  );
}

for (
  const [catch_up, fired, books] of [
    ["one", [0, 2, 3], [3, 1]],
    ["skip", [0, 3], [2, 2]],
  ] as const
) {
  schedulerTest(
    `catch_up ${catch_up}: an occurrence a dead pass started counts fired when its expired claim is taken`,
    async (env) => {
      await create(env, { workflow: "Quick", overlap: "allow_all", catch_up });
      // A pass (another node) claimed o(0), started it, and died before its advance.
      env.clock.t = o(0);
      await claimedByADeadPass(env, o(0));
      await env.rt.executions.start({ workflow: "Quick", execution_id: id(0) });
      // Shared mode drops no claims: this scheduler takes the row once the claim expired. By
      // then o(0)…o(2) were missed; the plan fires o(2) (one) or none (skip) of them, and o(3).
      await passAt(env, o(0) + 30_001);
      assert.deepEqual((await env.executions()).map((x) => x.id), fired.map(id));
      const s = await env.rt.schedules.get("s");
      // Before the fix o(0), which ran, was counted skipped: one [2, 2], skip [1, 3].
      assert.deepEqual([s.fired, s.skipped], books, "every execution counted fired, once");
      assert.deepEqual([s.next_fire_ms, s.last_execution_id], [o(4), id(3)]);
    },
  );
}

for (
  const [overlap, after] of [
    ["skip", [2]],
    ["allow_all", [2, 3]],
  ] as const
) {
  schedulerTest(
    `overlap ${overlap}: a claimer paused past its lease starts nothing from its stale plan`,
    async (env) => {
      await create(env, { workflow: "Stuck", overlap }); // catch_up one
      // Node A claims o(0), plans it, reads the running executions (none), then pauses (GC, a
      // frozen VM) before its start: at the first of the renewal (since the fix) or the start.
      let release!: () => void;
      const gate = new Promise<void>((r) => release = r);
      let paused!: () => void;
      const inPause = new Promise<void>((r) => paused = r);
      let once = false;
      const pause = async () => {
        if (once) return;
        once = true;
        paused();
        await gate;
      };
      const store = new Proxy(env.store, {
        get(target, key) {
          if (key === "renewScheduleClaim") {
            return async (...args: Parameters<Store["renewScheduleClaim"]>) => {
              await pause();
              return await target.renewScheduleClaim(...args);
            };
          }
          const v = Reflect.get(target, key);
          return typeof v === "function" ? v.bind(target) : v;
        },
      });
      const executions = {
        start: async (req: Parameters<typeof env.rt.executions.start>[0]) => {
          await pause();
          return await env.rt.executions.start(req);
        },
        cancel: (i: string, r: string) => env.rt.executions.cancel(i, r),
      };
      const a = new Scheduler(
        { store, executions, metrics: env.rt.metrics, clock: env.rt.clock },
        { owner: "A" },
      );
      await a.start({ dropClaims: false, loop: false });
      env.clock.t = o(0);
      const passA = a.pass();
      await inPause;
      // 31 s later node B takes the expired claim: o(0), o(1) were missed and are skipped
      // (catch_up one), o(2) starts, o(3) overlaps it (skip: skipped; allow_all: starts).
      await passAt(env, o(0) + 31_000);
      const b = await env.rt.schedules.get("s");
      assert.deepEqual([b.fired, b.skipped], [after.length, 4 - after.length]);
      // A resumes. Before the fix it started o(0) from its stale plan although B counted it
      // skipped (and, with overlap skip, beside o(2)); its advance was refused, so the books
      // stayed [fired, skipped] as B left them.
      release();
      await passA;
      assert.deepEqual(
        await env.executions(),
        after.map((i) => ({ id: id(i), status: "running" })),
      );
      const s = await env.rt.schedules.get("s");
      assert.deepEqual([s.fired, s.skipped, s.next_fire_ms], [
        after.length,
        4 - after.length,
        o(4),
      ]);
      assert.equal((await env.store.getSchedule("s"))?.claimed_by, null);
    },
  );
}

schedulerTest(
  "a pass that fails mid-way advances only past the occurrences it handled (issue 36)",
  async (env) => {
    await create(env, {
      workflow: "Quick",
      catch_up: "all",
      catch_up_window_s: 3600,
      overlap: "allow_all",
    });
    // Three occurrences due in one pass; the claim's renewal before the second start fails as
    // a lost connection does.
    const renew = env.store.renewScheduleClaim.bind(env.store);
    let renewals = 0;
    env.store.renewScheduleClaim = (r) => {
      if (++renewals === 2) {
        return Promise.reject(Object.assign(new Error("connection lost"), { code: "ECONNRESET" }));
      }
      return renew(r);
    };
    await passAt(env, o(2) + 100); // the pass logs the failure and goes on
    let s = await env.rt.schedules.get("s");
    // o(0) started; o(1) and o(2) are still to do.
    assert.deepEqual([s.fired, s.skipped, s.next_fire_ms], [1, 0, o(1)]);
    env.store.renewScheduleClaim = renew;
    await passAt(env, o(2) + 200);
    s = await env.rt.schedules.get("s");
    assert.deepEqual([s.fired, s.skipped, s.next_fire_ms], [3, 0, o(3)]);
    assert.deepEqual((await env.executions()).map((x) => x.id), [id(0), id(1), id(2)]);
  },
);
