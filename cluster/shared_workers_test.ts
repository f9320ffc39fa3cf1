/**
 * SharedWorkers' claim path on a real PostgreSQL, with the engine faked: what the worker is
 * told about an attempt is what the history recorded for its dispatch.
 */
import assert from "node:assert/strict";
import { SharedWorkers, type SharedWorkersOptions } from "./shared/workers.ts";
import type postgres from "postgres";
import type { Executions } from "../lib/executions/executions.ts";
import { Metrics } from "../lib/metrics.ts";
import { postgresClient } from "../lib/store/postgres.ts";
import { migratedDatabase } from "../tests/support/pg.ts";
import { REQUEUE_TASK, TOUCH_SESSIONS } from "../sql/postgres/shared/mod.ts";
import { Driver, task, workflow } from "../lib/engine/testing.ts";
import { waitFor } from "../tests/support/server.ts";
import { OWN_TASK_HEAD_START_MS } from "../lib/executions/shared_changes.ts";
import { FOREIGN_TASK_DELAY_MS } from "./shared/claims.ts";
import { tasksAnnounced, tasksPayload } from "./shared/notify.ts";

/** A SharedWorkers on `nodeId` over `sql`, with the engine faked by `executions`. */
function sharedWorkers(executions: Executions, sql: SharedWorkersOptions["sql"], nodeId: string) {
  return new SharedWorkers(executions, new Metrics(), {
    nodeId,
    sessionTimeoutMs: 30_000,
    now: () => Date.now(),
    newId: () => crypto.randomUUID(),
    sql,
    drainInbox: () => Promise.resolve(),
    notify: () => {},
    healthySince: () => 0,
  });
}

/**
 * The engine faked for SharedWorkers: no executions held, none elsewhere, every owned load
 * found; `parts` replaces or adds what a test needs (`command`, `stateOf`, `remote`, …).
 */
function fakeExecutions(parts: Record<string, unknown> = {}): Executions {
  return {
    observer: null,
    active: new Map(),
    remote: null,
    loadOwned: () => Promise.resolve(true),
    stateOf: () => undefined,
    settle: () => Promise.resolve(),
    inDoubt: () => false,
    ...parts,
  } as unknown as Executions;
}

/**
 * `real`'s statements, each seen first by `see` (which may throw to refuse it) and, once it has
 * answered, by `answered`.
 */
function intercept(
  real: postgres.Sql,
  see: (text: string) => void,
  answered: (text: string) => void = () => {},
): SharedWorkersOptions["sql"] {
  return {
    unsafe: (text, params, options) => {
      try {
        see(text);
      } catch (e) {
        return Promise.reject(e);
      }
      const r = real.unsafe(text, params, options);
      r.then(() => answered(text), () => {});
      return r;
    },
  };
}

/** `real`, counting its claim statements (q.claimTasks). */
function countingClaims(
  real: postgres.Sql,
): { sql: SharedWorkersOptions["sql"]; claims: () => number } {
  let n = 0;
  const sql = intercept(real, (text) => {
    if (text.trimStart().startsWith("WITH reg")) n++;
  });
  return { sql, claims: () => n };
}

Deno.test({
  name: "a queued row from before an uncertain attempt is cancelled by its owner's claim; the " +
    "current unit's row goes out as the redelivery",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    // Found by the chaos suite (shared mode, a dispatch commit cut by a black-holed database
    // link): the dispatch landed although it reported an error, so its row (unit .../0) went
    // back on the queue with the first delivery's payload; the rebuild then marked the attempt
    // uncertain and queued its redelivery (unit .../1). Dispatching the stale row, the oldest,
    // took the current unit's row with the stale row's token in the commit, which failed on
    // orbit_tasks_token_idx and requeued the stale row for the next claim, for ever (review).
    const url = await migratedDatabase();
    const sql = postgresClient(url, { max: 2, applicationName: "orbit-test" });
    const dispatches: unknown[] = [];
    // The engine's state: attempt 1 of `charge` was dispatched once (the landed commit) and is
    // queued again, so the unit it waits for is r-1/charge/1/1.
    const state = {
      execution_id: "e-1",
      run_id: "r-1",
      steps: {
        charge: {
          id: "charge",
          attempt: 1,
          tokens: { "e-1/first": {} },
          redelivery: true,
          deadline_ms: null,
        },
      },
    };
    const executions = fakeExecutions({
      stateOf: () => state,
      command: (id: string, cmd: { type: string; step: string }) => {
        dispatches.push([id, cmd.type, cmd.step]);
        return Promise.resolve({ accepted: true, state });
      },
    });
    const workers = sharedWorkers(executions, sql, "node-1");
    try {
      await sql`INSERT INTO orbit_owners (execution_id, root_id, node_id, epoch, since_ms)
        VALUES ('e-1', 'e-1', 'node-1', 1, 0)`;
      const payload = (redelivery: boolean) => ({
        execution_id: "e-1",
        step: "charge",
        attempt: 1,
        task: "payments.charge",
        contract: "1",
        input: {},
        idempotency_key: "k-1",
        redelivery,
        deadline_ms: null,
      });
      await sql`INSERT INTO orbit_tasks (execution_id, task_name, contract_version, state,
          enqueued_ms, payload, run_id, step, attempt, unit)
        VALUES ('e-1', 'payments.charge', '1', 'queued', 0, ${sql.json(payload(false))}, 'r-1',
          'charge', 1, 'r-1/charge/1/0'),
        ('e-1', 'payments.charge', '1', 'queued', 1, ${sql.json(payload(true))}, 'r-1',
          'charge', 1, 'r-1/charge/1/1')`;
      const session = await workers.register({
        worker_id: "w-1",
        runtime: "typescript",
        tasks: [{ name: "payments.charge", contract: "1" }],
        concurrency: 1,
      });
      // The oldest row is the stale one: cancelled, not dispatched.
      assert.deepEqual(await workers.poll(session, 1, 0), []);
      assert.deepEqual(dispatches, []);
      const rows = await sql<{ unit: string; state: string }[]>`
        SELECT unit, state FROM orbit_tasks ORDER BY unit`;
      assert.deepEqual(rows.map((r) => [r.unit, r.state]), [
        ["r-1/charge/1/0", "cancelled"],
        ["r-1/charge/1/1", "queued"],
      ]);
      // The next claim takes the current unit's row.
      const tasks = await workers.poll(session, 1, 0);
      assert.equal(tasks.length, 1);
      assert.deepEqual(dispatches, [["e-1", "dispatch", "charge"]]);
      assert.equal(tasks[0]!.redelivery, true, "the worker hears the recorded redelivery");
      assert.equal(tasks[0]!.idempotency_key, "k-1");
    } finally {
      workers.stop();
      await sql.end({ timeout: 5 });
    }
  },
});

// ---------------------------------------------------------------------------------------------
// The claim prefers tasks of executions this node owns (sql/postgres/shared.ts, claimTasks):
// a worker slot pinned to a server keeps that server's executions on it. A foreign row is at
// most OWN_TASK_HEAD_START_MS behind this node's own rows, so nobody is starved.

const A = "node-a";
const B = "node-b";

/** A SharedWorkers on node A over a fresh database, with the engine faked. */
async function claimSetup() {
  const url = await migratedDatabase();
  const sql = postgresClient(url, { max: 2, applicationName: "orbit-test" });
  const dispatched: string[] = [];
  const executions = fakeExecutions({
    command: (id: string, cmd: { step: string }) => {
      dispatched.push(id);
      return Promise.resolve({
        accepted: true,
        state: {
          execution_id: id,
          steps: { [cmd.step]: { redelivery: false, deadline_ms: null } },
        },
      });
    },
  });
  const workers = sharedWorkers(executions, sql, A);
  let n = 0;
  /** A queued task row of execution `id`, owned by `owner`, enqueued at `at`. */
  const queue = async (
    id: string,
    owner: string,
    at: number,
    opts: { task?: string; contract?: string; language?: string | null } = {},
  ) => {
    const task = opts.task ?? "payments.charge";
    const contract = opts.contract ?? "1";
    n++;
    await sql`INSERT INTO orbit_owners (execution_id, root_id, node_id, epoch, since_ms)
      VALUES (${id}, ${id}, ${owner}, 1, 0) ON CONFLICT DO NOTHING`;
    const payload = {
      execution_id: id,
      step: "s",
      attempt: 1,
      task,
      contract,
      input: {},
      idempotency_key: `k-${n}`,
      redelivery: false,
      deadline_ms: null,
    };
    await sql`INSERT INTO orbit_tasks (execution_id, task_name, contract_version, language, state,
        enqueued_ms, payload, run_id, step, attempt, unit)
      VALUES (${id}, ${task}, ${contract}, ${opts.language ?? null}, 'queued', ${at},
        ${sql.json(payload)}, ${`r-${id}`}, 's', 1, ${`r-${id}/s/1/${n}`})`;
  };
  const session = (tasks = [{ name: "payments.charge", contract: "1" }], runtime = "typescript") =>
    workers.register({ worker_id: "w-1", runtime, tasks, concurrency: 8 });
  const inbox = async () => [
    ...await sql<{ node_id: string; execution_id: string; kind: string; token: string }[]>`
      SELECT node_id, execution_id, kind, payload->>'token' AS token FROM orbit_inbox
      ORDER BY seq`,
  ];
  const close = async () => {
    workers.stop();
    await sql.end({ timeout: 5 });
  };
  return { sql, workers, queue, session, inbox, dispatched, close };
}

Deno.test({
  name: "claim: this node's own row comes before a slightly older row owned elsewhere",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const t = await claimSetup();
    try {
      const base = 1_000_000;
      // B's row waited 50 ms longer: within the head start, A's own row goes first.
      await t.queue("b-1", B, base - 50);
      await t.queue("a-1", A, base);
      const s = await t.session();
      const first = await t.workers.poll(s, 1, 0);
      assert.deepEqual(first.map((x) => x.execution_id), ["a-1"]);
      assert.deepEqual(t.dispatched, ["a-1"], "A records its own dispatch");
      assert.deepEqual(await t.inbox(), [], "nothing forwarded for an own row");
      // Then the foreign row, as before.
      const second = await t.workers.poll(s, 1, 0);
      assert.deepEqual(second.map((x) => x.execution_id), ["b-1"]);
    } finally {
      await t.close();
    }
  },
});

Deno.test({
  name: "claim: a foreign row older than the head start goes before this node's younger rows",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const t = await claimSetup();
    try {
      const base = 1_000_000;
      // Waited more than the head start longer than A's rows: overdue.
      await t.queue("b-old", B, base - OWN_TASK_HEAD_START_MS - 300);
      await t.queue("b-new", B, base - 50); // 50 ms more: behind A's own rows
      await t.queue("a-1", A, base);
      await t.queue("a-2", A, base + 10);
      const s = await t.session();
      const got = await t.workers.poll(s, 2, 0);
      assert.deepEqual(got.map((x) => x.execution_id).sort(), ["a-1", "b-old"]);
      const rest = await t.workers.poll(s, 2, 0);
      assert.deepEqual(rest.map((x) => x.execution_id).sort(), ["a-2", "b-new"]);
      // Both foreign rows still told their owner.
      const inbox = await t.inbox();
      assert.deepEqual(inbox.map((e) => [e.node_id, e.execution_id, e.kind]), [
        [B, "b-old", "dispatched"],
        [B, "b-new", "dispatched"],
      ]);
    } finally {
      await t.close();
    }
  },
});

Deno.test({
  name: "claim: contracts, language and limit hold with the preference; foreign rows are forwarded",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const t = await claimSetup();
    try {
      const base = 1_000_000;
      // Own rows this session must not get, oldest of all.
      await t.queue("a-contract", A, base - 900, { contract: "2" });
      await t.queue("a-python", A, base - 900, { language: "python" });
      await t.queue("a-other", A, base - 900, { task: "mail.send" });
      // What it serves: a foreign row 100 ms older than two own rows.
      await t.queue("b-1", B, base - 100, { language: "any" });
      await t.queue("a-1", A, base, { language: "typescript" });
      await t.queue("a-2", A, base + 1);
      const s = await t.session();
      const first = await t.workers.poll(s, 1, 0);
      assert.deepEqual(first.map((x) => x.execution_id), ["a-1"]);
      const second = await t.workers.poll(s, 5, 0);
      assert.deepEqual(second.map((x) => x.execution_id).sort(), ["a-2", "b-1"]);
      assert.equal(await t.workers.poll(s, 5, 0).then((x) => x.length), 0, "nothing else");
      // The token names the execution; the foreign row's dispatch went to B's inbox.
      const b = second.find((x) => x.execution_id === "b-1")!;
      assert.match(b.token, /^b-1\/[0-9a-f-]{36}$/);
      const inbox = await t.inbox();
      assert.deepEqual(inbox, [
        { node_id: B, execution_id: "b-1", kind: "dispatched", token: b.token },
      ]);
      assert.deepEqual(t.dispatched.sort(), ["a-1", "a-2"]);
      const [left] = await t.sql<{ n: number }[]>`
        SELECT count(*)::int AS n FROM orbit_tasks WHERE state = 'queued'`;
      assert.equal(left!.n, 3, "the rows of other contracts, languages and tasks stay queued");
    } finally {
      await t.close();
    }
  },
});

Deno.test({
  name: "claim: rows another node queued for its own polling workers are looked for here " +
    "FOREIGN_TASK_DELAY_MS later; rows announced open at once",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const t = await claimSetup();
    try {
      const s = await t.session();
      // An empty claim: the session's next claim waits for news of rows owned elsewhere.
      assert.deepEqual(await t.workers.poll(s, 1, 0), []);

      // Open (put back, or queued by a node no worker polls): the waiting poll claims at once.
      const open = t.workers.poll(s, 1, 5_000);
      await t.queue("b-open", B, Date.now());
      let at = performance.now();
      t.workers.wakeRemote();
      assert.deepEqual((await open).map((x) => x.execution_id), ["b-open"]);
      const openMs = performance.now() - at;
      assert.ok(openMs < FOREIGN_TASK_DELAY_MS, `claimed after ${openMs} ms`);
      assert.deepEqual(await t.workers.poll(s, 1, 0), []);

      // Served (B's own workers poll B and take it as their slots free): left to B a while,
      // however many announcements come meanwhile; then claimed and forwarded as usual.
      const served = t.workers.poll(s, 1, 5_000);
      await t.queue("b-served", B, Date.now());
      at = performance.now();
      for (let i = 0; i < 5; i++) t.workers.wakeForeign();
      assert.deepEqual((await served).map((x) => x.execution_id), ["b-served"]);
      const servedMs = performance.now() - at;
      assert.ok(servedMs >= FOREIGN_TASK_DELAY_MS - 1, `claimed after ${servedMs} ms`);
      assert.deepEqual((await t.inbox()).map((e) => [e.node_id, e.execution_id, e.kind]), [
        [B, "b-open", "dispatched"],
        [B, "b-served", "dispatched"],
      ]);
    } finally {
      await t.close();
    }
  },
});

Deno.test({
  name: "orbit_tasks payloads: own, served by the owner's workers, open",
  fn: () => {
    assert.equal(tasksAnnounced(tasksPayload(A, true), A), "own");
    assert.equal(tasksAnnounced(tasksPayload(A, false), A), "own");
    assert.equal(tasksAnnounced(tasksPayload(B, true), A), "served");
    assert.equal(tasksAnnounced(tasksPayload(B, false), A), "open");
    assert.equal(tasksAnnounced("", A), "open", "rows put back");
    assert.equal(tasksAnnounced(B, A), "served", "a server of an earlier version names itself");
  },
});

Deno.test({
  name: "a claimed row whose dispatch failed goes back on the queue even if the database " +
    "refuses the first tries",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    // Found by the end-to-end test that restarts PostgreSQL under the cluster: the dispatch
    // commit failed (ECONNRESET), and so did putting its row back on the queue; the row stayed
    // claimed by a live node, which only a takeover looks at, and the order never moved again.
    const url = await migratedDatabase();
    const real = postgresClient(url, { max: 2, applicationName: "orbit-test" });
    let refuse = 2;
    const sql = intercept(real, (text) => {
      if (text !== REQUEUE_TASK || refuse === 0) return;
      refuse--;
      throw Object.assign(new Error("connect ECONNREFUSED"), { code: "ECONNREFUSED" });
    });
    const executions = fakeExecutions({
      command: () => Promise.reject(new Error("STORAGE_ERROR: read ECONNRESET")),
    });
    const workers = sharedWorkers(executions, sql, "node-1");
    try {
      await real`INSERT INTO orbit_owners (execution_id, root_id, node_id, epoch, since_ms)
        VALUES ('e-1', 'e-1', 'node-1', 1, 0)`;
      await real`INSERT INTO orbit_tasks (execution_id, task_name, contract_version, state,
          enqueued_ms, payload, run_id, step, attempt, unit)
        VALUES ('e-1', 'payments.charge', '1', 'queued', 0, ${real.json({ task: "x" })}, 'r-1',
          'charge', 1, 'r-1/charge/1/0')`;
      const session = await workers.register({
        worker_id: "w-1",
        runtime: "typescript",
        tasks: [{ name: "payments.charge", contract: "1" }],
        concurrency: 1,
      });
      assert.deepEqual(await workers.poll(session, 1, 0), []);
      const state = async () =>
        (await real`SELECT state, token FROM orbit_tasks WHERE unit = 'r-1/charge/1/0'`)[0];
      assert.equal((await state())!.state, "claimed", "the first requeue was refused");
      const deadline = Date.now() + 10_000;
      while ((await state())!.state !== "queued") {
        assert.ok(Date.now() < deadline, "the row went back on the queue");
        await new Promise((r) => setTimeout(r, 100));
      }
      assert.equal(refuse, 0);
      assert.equal((await state())!.token, null);
    } finally {
      workers.stop();
      await real.end({ timeout: 5 });
    }
  },
});

Deno.test({
  name: "the polls of one session waiting on a server look again one at a time, not each " +
    "once per second",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    // A worker holds one poll per concurrency slot. With every waiting poll re-checking every
    // second and on every notification, an idle worker of concurrency N cost N claim
    // statements per second per server.
    const url = await migratedDatabase();
    const real = postgresClient(url, { max: 4, applicationName: "orbit-test" });
    const { sql, claims } = countingClaims(real);
    const dispatched: string[] = [];
    const executions = fakeExecutions({
      command: (id: string, cmd: { step: string }) => {
        dispatched.push(id);
        return Promise.resolve({
          accepted: true,
          state: { execution_id: id, steps: { [cmd.step]: { redelivery: false } } },
        });
      },
    });
    const workers = sharedWorkers(executions, sql, "node-1");
    try {
      const session = await workers.register({
        worker_id: "w-1",
        runtime: "typescript",
        tasks: [{ name: "t.one", contract: "1" }],
        concurrency: 8,
      });
      const polls = Array.from({ length: 8 }, () => workers.poll(session, 1, 2600));
      // Each poll looks once when it comes; then only the first of the line looks again.
      await new Promise((r) => setTimeout(r, 2300));
      assert.ok(claims() >= 8, `every poll looked once: ${claims()}`);
      assert.ok(claims() <= 11, `${claims()} claims for 8 idle polls in 2.3 s (8 + 2 re-checks)`);

      // A task arrives: one notification, one look, one poll answered; the next in line looks
      // at once (nothing more is queued) and waits.
      await real`INSERT INTO orbit_owners (execution_id, root_id, node_id, epoch, since_ms)
        VALUES ('e-1', 'e-1', 'node-1', 1, 0)`;
      await real`INSERT INTO orbit_tasks (execution_id, task_name, contract_version, state,
          enqueued_ms, payload, run_id, step, attempt, unit)
        VALUES ('e-1', 't.one', '1', 'queued', 0, ${real.json({ task: "t.one" })}, 'r-1',
          'a', 1, 'r-1/a/1/0')`;
      const before = claims();
      // Announced as rows this node's memory does not hold are (NOTIFY orbit_tasks from the
      // database): a row inserted behind its back, as here, is not in its queue.
      workers.wakeRemote();
      const answered = await Promise.race(polls.map((p, i) => p.then((t) => ({ i, t }))));
      assert.equal(answered.t.length, 1);
      assert.equal(answered.t[0]!.execution_id, "e-1");
      assert.deepEqual(dispatched, ["e-1"]);
      await new Promise((r) => setTimeout(r, 100));
      assert.ok(claims() - before <= 3, `${claims() - before} claims for one notification`);
      const all = await Promise.all(polls);
      assert.equal(all.flat().length, 1, "the task was handed out once");
    } finally {
      workers.stop();
      await real.end({ timeout: 5 });
    }
  },
});

Deno.test({
  name:
    "a poll set aside for a start's first task gets it even when the poll before it in line leaves",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    // Found by SharedCluster.test_i: the polls of a session stand in line, and when the first
    // leaves the next is woken to look again. A poll set aside for a start's first task woken
    // so ended its wait; the task dispatched to it in the start's commit found no poll of the
    // session waiting and was redelivered (StepAttemptUncertain) although its worker was there.
    const url = await migratedDatabase();
    const real = postgresClient(url, { max: 2, applicationName: "orbit-test" });
    let claims = 0;
    const sql = intercept(real, () => {}, (text) => {
      if (text.trimStart().startsWith("WITH reg")) claims++;
    });
    const uncertain: string[] = [];
    const executions = {
      observer: null,
      active: new Map(),
      remote: null,
      uncertain: (_id: string, token: string) => {
        uncertain.push(token);
        return Promise.resolve();
      },
    } as unknown as Executions;
    const workers = sharedWorkers(executions, sql, "node-1");
    const d = new Driver(workflow([task("a")]));
    await d.start();
    const claimed = (n: number) => waitFor(() => claims >= n, `${n} claims`);
    try {
      const session = await workers.register({
        worker_id: "w-1",
        runtime: "typescript",
        tasks: [{ name: "t.a", contract: "1" }],
        concurrency: 2,
      });
      const first = new AbortController();
      const p1 = workers.poll(session, 1, 10_000, first.signal);
      await claimed(1); // p1 waits, first in line
      const p2 = workers.poll(session, 1, 10_000);
      await claimed(2); // p2 waits behind it
      workers.wake(); // p1 looks again and waits anew: the offer below picks p2
      await claimed(3);
      await new Promise((r) => setTimeout(r, 20));
      const offer = workers.offerFirst(d.s);
      assert.ok(offer, "a poll waits for the task");
      first.abort(); // p1 leaves the line; p2 is first now
      assert.deepEqual(await p1, []);
      await d.send(offer.command); // the start's commit, with the dispatch
      offer.deliver(d.s);
      const tasks = await p2;
      assert.deepEqual(tasks.map((t) => t.step), ["a"]);
      assert.deepEqual(uncertain, []);
    } finally {
      workers.stop();
      await real.end({ timeout: 5 });
    }
  },
});

Deno.test({
  name: "a claim whose answer was lost hands its rows out again: an own row goes back on the " +
    "queue, the owner of another row hears the attempt is uncertain",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    // Found by the chaos suite (shared mode, database links dropped and black-holed): the
    // claim statement committed, its answer was lost with the connection, and the row of an
    // execution owned here stayed claimed for a worker that never received it. The history
    // showed the step queued, so neither a claim nor a take handed it out again: the order
    // never finished.
    const url = await migratedDatabase();
    const real = postgresClient(url, { max: 2, applicationName: "orbit-test" });
    const forwards: unknown[] = [];
    const dispatched: string[] = [];
    const executions = fakeExecutions({
      remote: {
        forward: (id: string, cmd: { type: string; token: string }) => {
          forwards.push([id, cmd.type, cmd.token]);
          return Promise.resolve({ accepted: true });
        },
      },
      holds: () => false,
      serial: <T>(_id: string, fn: () => Promise<T>) => fn(),
      command: (id: string, cmd: { step: string }) => {
        dispatched.push(id);
        return Promise.resolve({
          accepted: true,
          state: {
            execution_id: id,
            steps: { [cmd.step]: { redelivery: false, deadline_ms: null } },
          },
        });
      },
    });
    // The first claim commits, and its caller hears that the connection closed.
    let lose = true;
    const lossy: SharedWorkersOptions["sql"] = {
      unsafe: (text, params, options) => {
        const r = real.unsafe(text, params, options);
        if (!lose || !text.includes("SKIP LOCKED")) return r;
        lose = false;
        return r.then(() => Promise.reject(new Error("write CONNECTION_CLOSED 127.0.0.1:5432")));
      },
    };
    const workers = sharedWorkers(executions, lossy, A);
    workers.start();
    try {
      for (const [id, owner] of [["e-own", A], ["e-far", B]] as const) {
        await real`INSERT INTO orbit_owners (execution_id, root_id, node_id, epoch, since_ms)
          VALUES (${id}, ${id}, ${owner}, 1, 0)`;
        const payload = {
          execution_id: id,
          step: "s",
          attempt: 1,
          task: "payments.charge",
          contract: "1",
          input: {},
          idempotency_key: `k-${id}`,
          redelivery: false,
          deadline_ms: null,
        };
        await real`INSERT INTO orbit_tasks (execution_id, task_name, contract_version, state,
            enqueued_ms, payload, run_id, step, attempt, unit)
          VALUES (${id}, 'payments.charge', '1', 'queued', 0, ${real.json(payload)}, ${`r-${id}`},
            's', 1, ${`r-${id}/s/1/0`})`;
      }
      const session = await workers.register({
        worker_id: "w-1",
        runtime: "typescript",
        tasks: [{ name: "payments.charge", contract: "1" }],
        concurrency: 8,
      });
      await assert.rejects(workers.poll(session, 8, 0), /CONNECTION_CLOSED/);
      const rows = async () =>
        Object.fromEntries(
          (await real<{ execution_id: string; state: string; token: string | null }[]>`
            SELECT execution_id, state, token FROM orbit_tasks`).map((r) => [r.execution_id, r]),
        );
      const claimed = await rows();
      assert.equal(claimed["e-own"]!.state, "claimed", "the lost claim committed");
      assert.equal(claimed["e-far"]!.state, "claimed");
      assert.deepEqual(dispatched, [], "nothing was dispatched by the lost claim");

      await waitFor(
        async () => (await rows())["e-own"]!.state === "queued",
        "the own row requeued",
      );
      await waitFor(() => forwards.length > 0, "the other owner told");
      assert.deepEqual(forwards, [["e-far", "uncertain", claimed["e-far"]!.token]]);
      // The far row stays claimed: its owner records the dispatch from the claim's inbox entry
      // and redelivers the attempt on the uncertain command.
      assert.equal((await rows())["e-far"]!.state, "claimed");

      const tasks = await workers.poll(session, 8, 0);
      assert.deepEqual(tasks.map((t) => t.execution_id), ["e-own"]);
      assert.deepEqual(dispatched, ["e-own"]);
    } finally {
      workers.stop();
      await real.end({ timeout: 5 });
    }
  },
});

Deno.test({
  name: "session contacts: one write in flight at a time; what comes meanwhile goes with the next",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    // Found by the chaos suite (shared mode, a PostgreSQL restart): every server started a
    // contact write every 250 ms whether or not the one before had finished; writes waiting for
    // each other's rows piled up on all four request connections of every server, and claims,
    // forwards and /v1/ready's node list waited behind them for seconds.
    const url = await migratedDatabase();
    const real = postgresClient(url, { max: 4, applicationName: "orbit-test" });
    let release!: () => void;
    const held = new Promise<void>((r) => release = r);
    const writes: unknown[] = [];
    let inFlight = 0;
    let most = 0;
    const sql: SharedWorkersOptions["sql"] = {
      unsafe: (text, params, options) => {
        if (text !== TOUCH_SESSIONS) return real.unsafe(text, params, options);
        writes.push(params?.[0]);
        inFlight++;
        most = Math.max(most, inFlight);
        // The first write waits (a row another server's write holds) until released.
        const gate = writes.length === 1 ? held : Promise.resolve();
        return gate.then(() => real.unsafe(text, params, options)).finally(() => inFlight--);
      },
    } as SharedWorkersOptions["sql"];
    const workers = sharedWorkers({ observer: null } as unknown as Executions, sql, "node-1");
    workers.start();
    try {
      const session = await workers.register({
        worker_id: "w-1",
        runtime: "typescript",
        tasks: [{ name: "payments.charge", contract: "1" }],
        concurrency: 1,
      });
      await workers.heartbeat(session, []);
      await waitFor(() => writes.length === 1, "the first contact write");
      const first = Date.now();
      await workers.heartbeat(session, []); // a contact while the first write waits
      // Eight ticks of the 250 ms writer pass without a second write in flight.
      await assert.rejects(
        waitFor(() => writes.length > 1, "a second write while the first waits", 2_000),
      );
      assert.equal(most, 1);
      release();
      const [second] = await waitFor(
        () => writes.length > 1 && writes.slice(1),
        "the write after the first",
      ) as Array<Array<{ id: string; ms: number }>>;
      assert.equal(second![0]!.id, session);
      assert.ok(second![0]!.ms >= first, "the later contact went with the next write");
      assert.equal(most, 1);
    } finally {
      workers.stop();
      await real.end({ timeout: 5 });
    }
  },
});

Deno.test({
  name: "a claim that found nothing is not repeated until another node announces rows, or a " +
    "second has passed",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    // With the page's worker shape, a slot freed by a result and a poll's first look each ran
    // the claim statement, two thirds of them for nothing: this node's own queued rows are in
    // its memory (taken first), and rows of other nodes' executions are announced.
    const url = await migratedDatabase();
    const real = postgresClient(url, { max: 2, applicationName: "orbit-test" });
    const { sql, claims } = countingClaims(real);
    const executions = fakeExecutions({
      loadOwned: () => Promise.resolve(false),
    });
    const workers = sharedWorkers(executions, sql, "node-1");
    let n = 0;
    const queueElsewhere = async () => {
      n++;
      await real`INSERT INTO orbit_owners (execution_id, root_id, node_id, epoch, since_ms)
        VALUES (${"x-" + n}, ${"x-" + n}, 'node-2', 1, 0)`;
      await real`INSERT INTO orbit_tasks (execution_id, task_name, contract_version, state,
          enqueued_ms, payload, run_id, step, attempt, unit)
        VALUES (${"x-" + n}, 'payments.charge', '1', 'queued', ${n}, ${
        real.json({ task: "payments.charge", contract: "1", input: {}, idempotency_key: "k" })
      }, ${"r-" + n}, 'charge', 1, ${"r-" + n + "/charge/1/0"})`;
    };
    try {
      const session = await workers.register({
        worker_id: "w-1",
        runtime: "typescript",
        tasks: [{ name: "payments.charge", contract: "1" }],
        concurrency: 1,
      });
      assert.deepEqual(await workers.poll(session, 1, 0), []);
      assert.equal(claims(), 1);
      // Queued by another node, its announcement not here yet: no second claim.
      await queueElsewhere();
      assert.deepEqual(await workers.poll(session, 1, 0), []);
      assert.equal(claims(), 1, "an empty claim was repeated with nothing announced");
      // This node's own rows do not count (they are in its memory, taken before a claim).
      workers.wake();
      assert.deepEqual(await workers.poll(session, 1, 0), []);
      assert.equal(claims(), 1);
      // Announced: the next look claims it.
      workers.wakeRemote();
      const [t] = await workers.poll(session, 1, 0);
      assert.equal(t?.execution_id, "x-1");
      assert.equal(claims(), 2);
      // Found nothing again; a row whose announcement is lost goes out at the re-check, a
      // second after that empty claim, by exactly one more claim.
      assert.deepEqual(await workers.poll(session, 1, 0), []);
      assert.equal(claims(), 3);
      const emptyAt = Date.now();
      await queueElsewhere();
      const got = await waitFor(
        async () => {
          const tasks = await workers.poll(session, 1, 0);
          return tasks.length > 0 ? tasks : null;
        },
        "the re-check's claim",
        5000,
      );
      assert.equal(got[0]?.execution_id, "x-2");
      assert.equal(claims(), 4);
      assert.ok(Date.now() - emptyAt >= 900, "the re-check came before a second had passed");
    } finally {
      workers.stop();
      await real.end();
    }
  },
});
