/**
 * The one conformance suite every Store driver passes (River's `riverdrivertest.Exercise`,
 * Hono's `runTest({ newRouter })`). Extend it whenever store behaviour changes; backend-only
 * behaviour (the PostgreSQL fence, a server restart) is tested beside its driver.
 *
 * ```ts
 * import { runStoreConformance } from "./suite.ts";
 * runStoreConformance("sqlite", () => openSqliteStore(freshPath()), { reopen });
 * ```
 */
import assert from "node:assert/strict";
import type { ExecutionStatus, HistoryEvent } from "../../engine/events.ts";
import {
  type AppendItem,
  type DefinitionRow,
  DuplicateExecutionError,
  type ExecutionRow,
  HistoryConflictError,
  InvalidCursorError,
  type Store,
} from "../store.ts";
import { runScheduleConformance } from "./schedules.ts";
import { historyProblems } from "../history_check.ts";
import { appendItem, createItem } from "./fixtures.ts";
export { appendItem, createItem, execRow } from "./fixtures.ts";

export interface ConformanceOptions {
  /** A new store on the same database as `store` (which may be closed by then). */
  reopen?: (store: Store) => Promise<Store>;
}

function definition(name: string, version: string, created_ms: number): DefinitionRow {
  const document = { ir: "orbit-ir/1", name, version, steps: [{ id: "a", task: "t" }] };
  return { name, version, ir: "orbit-ir/1", document, hash: `h-${name}-${version}`, created_ms };
}

/** Registers the suite's tests, each on a fresh database from `open`. */
export function runStoreConformance(
  name: string,
  open: () => Promise<Store>,
  opts: ConformanceOptions = {},
): void {
  const test = (title: string, fn: (store: Store) => Promise<void>) =>
    Deno.test(`${name} store: ${title}`, async () => {
      const store = await open();
      try {
        await store.migrate();
        await fn(store);
      } finally {
        await store.close();
      }
    });

  test("an append whose events exist already raises HistoryConflictError and writes nothing; every history stays whole", async (store) => {
    const a = createItem("a");
    const b = createItem("b");
    await store.commit([a, b]);
    const a2 = appendItem(a.row, 2);
    const b2 = { ...appendItem(b.row, 1), steady: true };
    await store.commit([a2, b2]);
    // The same append again (an append in doubt, committed again to resolve it), alone and in a
    // batch with another execution's append: refused whole, the other's events not written.
    await assert.rejects(store.commit([a2]), HistoryConflictError);
    const b3 = appendItem(b2.row, 1);
    await assert.rejects(store.commit([b3, a2]), HistoryConflictError);
    assert.equal((await store.getExecution("b"))?.last_seq, 2);
    await store.commit([b3]);
    for (const id of ["a", "b"]) {
      const row = (await store.getExecution(id))!;
      const events = await store.readHistory(row.run_id, 0, 100);
      assert.deepEqual(historyProblems(row, events), [], id);
    }
    // The check fails loudly on a gap: the history without its second event.
    const row = (await store.getExecution("a"))!;
    const events = await store.readHistory(row.run_id, 0, 100);
    assert.match(historyProblems(row, [events[0]!, ...events.slice(2)]).join(), /gap/);
  });

  test("migrate() twice is idempotent", async (store) => {
    await store.migrate();
    await store.migrate();
    await store.commit([createItem("a")]);
    assert.equal((await store.getExecution("a"))?.status, "running");
  });

  if (opts.reopen) {
    const reopen = opts.reopen;
    Deno.test(`${name} store: migrate() from two stores at once applies it once`, async () => {
      const first = await open();
      const second = await reopen(first);
      try {
        await Promise.all([first.migrate(), second.migrate(), first.migrate()]);
        await first.commit([createItem("a")]);
        assert.equal((await second.getExecution("a"))?.execution_id, "a");
      } finally {
        await first.close();
        await second.close();
      }
    });

    test("a store reopened after close keeps committed data", async (store) => {
      const a = createItem("a");
      await store.putDefinition(definition("Order", "1.0.0", 5));
      await store.commit([a, appendItem(a.row, 2)]);
      await store.close();
      const again = await reopen(store);
      try {
        await again.migrate();
        assert.equal((await again.getExecution("a"))?.last_seq, 3);
        assert.equal((await again.readHistory(a.row.run_id, 0, 10)).length, 3);
        assert.equal((await again.getDefinition("Order", "1.0.0"))?.hash, "h-Order-1.0.0");
      } finally {
        await again.close();
      }
    });
  }

  test("putDefinition() stores once and answers the stored row for a duplicate", async (store) => {
    const def = definition("Order", "1.0.0", 10);
    assert.deepEqual(await store.putDefinition(def), { created: true, stored: def });
    const other = { ...definition("Order", "1.0.0", 20), hash: "other", document: { x: 1 } };
    assert.deepEqual(await store.putDefinition(other), { created: false, stored: def });
    assert.deepEqual(await store.getDefinition("Order", "1.0.0"), def);
    assert.equal(await store.getDefinition("Order", "9.9.9"), null);
    assert.equal(await store.getDefinition("Nope", "1.0.0"), null);
  });

  test("listDefinitions() orders by name, then created_ms", async (store) => {
    const defs = [
      definition("B", "2.0.0", 30),
      definition("A", "1.1.0", 20),
      definition("B", "1.0.0", 10),
      definition("A", "1.0.0", 40),
    ];
    for (const d of defs) await store.putDefinition(d);
    const all = await store.listDefinitions();
    assert.deepEqual(all.map((d) => `${d.name}@${d.version}`), [
      "A@1.1.0",
      "A@1.0.0",
      "B@1.0.0",
      "B@2.0.0",
    ]);
    assert.deepEqual((await store.listDefinitions("B")).map((d) => d.version), ["1.0.0", "2.0.0"]);
    assert.deepEqual(await store.listDefinitions("C"), []);
  });

  test("commit() writes the items of several executions in one call", async (store) => {
    const a = createItem("a");
    const b = createItem("b", { created_ms: 5 });
    await store.commit([a, b]);
    const a2 = appendItem(a.row, 2);
    const b2 = appendItem(b.row, 1, { status: "completed", output: { ok: true }, closed_ms: 9 });
    const c = createItem("c");
    await store.commit([a2, b2, c]);
    assert.deepEqual(await store.getExecution("a"), a2.row);
    assert.deepEqual(await store.getExecution("b"), b2.row);
    assert.deepEqual(await store.getExecution("c"), c.row);
    assert.deepEqual(await store.readHistory(a.row.run_id, 0, 100), [...a.events, ...a2.events]);
    assert.deepEqual(await store.readHistory(b.row.run_id, 0, 100), [...b.events, ...b2.events]);
    await store.commit([]);
  });

  test("commit() of steady items moves last_seq and updated_ms, the rest as it was", async (store) => {
    const a = createItem("a", { created_ms: 7 });
    await store.commit([a]);
    const a2 = { ...appendItem(a.row, 2), steady: true };
    await store.commit([a2]);
    assert.deepEqual(await store.getExecution("a"), a2.row);
    // A full item, then a steady one after it, in one batch.
    const a3 = appendItem(a2.row, 1, { status: "continued" });
    const a4 = { ...appendItem(a3.row, 1), steady: true };
    await store.commit([a3, a4]);
    assert.deepEqual(await store.getExecution("a"), a4.row);
    assert.deepEqual(
      (await store.readHistory(a.row.run_id, 0, 10)).map((e) => e.seq),
      [1, 2, 3, 4, 5],
    );
    const a5 = appendItem(a4.row, 1, { status: "completed", output: { ok: 1 }, closed_ms: 99 });
    await store.commit([a5]);
    assert.deepEqual(await store.getExecution("a"), a5.row);
    const listed = await store.listExecutions({ limit: 10, status: "completed" });
    assert.deepEqual(listed.executions.map((r) => r.execution_id), ["a"]);
  });

  test("commit() with a duplicate create writes nothing at all", async (store) => {
    const a = createItem("a");
    await store.commit([a]);
    const fresh = createItem("fresh");
    const more = appendItem(a.row, 2);
    await assert.rejects(
      store.commit([fresh, more, createItem("a", { workflow: "Other" })]),
      (e: unknown) => e instanceof DuplicateExecutionError && e.executionId === "a",
    );
    assert.equal(await store.getExecution("fresh"), null);
    assert.deepEqual(await store.readHistory(fresh.row.run_id, 0, 10), []);
    assert.deepEqual(await store.getExecution("a"), a.row);
    assert.deepEqual(await store.readHistory(a.row.run_id, 0, 10), a.events);
  });

  test("commit() with two creates of one id in a batch writes nothing", async (store) => {
    await assert.rejects(
      store.commit([createItem("x"), createItem("y"), createItem("x")]),
      DuplicateExecutionError,
    );
    assert.equal(await store.getExecution("x"), null);
    assert.equal(await store.getExecution("y"), null);
  });

  test("commit() of an existing seq fails and writes nothing", async (store) => {
    const a = createItem("a");
    await store.commit([a]);
    const again = appendItem({ ...a.row, last_seq: 0 }, 1);
    await assert.rejects(store.commit([createItem("b"), again]));
    assert.equal(await store.getExecution("b"), null);
    assert.deepEqual(await store.readHistory(a.row.run_id, 0, 10), a.events);
  });

  test("commit() takes a create and later appends of one execution in one batch", async (store) => {
    const a = createItem("a");
    const a2 = appendItem(a.row, 2);
    const a3 = appendItem(a2.row, 1, { status: "failed", error: { code: "E" }, closed_ms: 7 });
    await store.commit([a, a2, a3]);
    assert.deepEqual(await store.getExecution("a"), a3.row);
    assert.equal((await store.readHistory(a.row.run_id, 0, 10)).length, 4);
  });

  test("events round-trip exactly", async (store) => {
    const a = createItem("a", { input: { text: 'héllo \u{1F680} "q" \\', n: -0.5, big: 2 ** 52 } });
    const row = a.row;
    const events: HistoryEvent[] = [
      {
        seq: 2,
        time_ms: 1_700_000_000_001,
        type: "StepScheduled",
        step: "charge",
        attempt: 1,
        task: "payments.charge",
        contract: "1",
        language: "python",
        input: { amount: 12.75, tags: [], nested: { deep: [null, true, false, { e: {} }] } },
        idempotency_key: "a/charge",
        timeout_ms: null,
        compensation: false,
      },
      {
        seq: 3,
        time_ms: 1_700_000_000_002,
        type: "StepDispatched",
        step: "charge",
        attempt: 1,
        token: "a/6f1c",
        worker_id: "w1",
        worker_session: "sess-1",
        deadline_ms: 1_700_000_030_002,
        redelivery: true,
      },
      {
        seq: 4,
        time_ms: 1_700_000_000_003,
        type: "StepFailed",
        step: "charge",
        attempt: 1,
        error: { code: "DECLINED", message: "card declined", retryable: true, details: [1, "x"] },
        will_retry: true,
      },
      {
        seq: 5,
        time_ms: 1_700_000_000_004,
        type: "TimerStarted",
        timer_id: "t1",
        fire_at_ms: 1_700_000_000_504,
        purpose: "retry",
        step: "charge",
        attempt: 1,
      },
      { seq: 6, time_ms: 1_700_000_000_505, type: "TimerFired", timer_id: "t1", step: "charge" },
      { seq: 7, time_ms: 1_700_000_000_600, type: "WorkflowCompleted", output: "done" },
    ];
    const closed = { ...row, status: "completed" as const, output: "done", last_seq: 7 };
    await store.commit([a, { row: closed, events }]);
    assert.deepEqual(await store.readHistory(row.run_id, 0, 100), [...a.events, ...events]);
    assert.deepEqual(await store.getExecution("a"), closed);
  });

  test("readHistory() pages by afterSeq and limit", async (store) => {
    const a = createItem("a");
    const more = appendItem(a.row, 9);
    await store.commit([a, more]);
    const all = [...a.events, ...more.events];
    assert.deepEqual(await store.readHistory(a.row.run_id, 0, 3), all.slice(0, 3));
    assert.deepEqual(await store.readHistory(a.row.run_id, 3, 3), all.slice(3, 6));
    assert.deepEqual(await store.readHistory(a.row.run_id, 8, 100), all.slice(8));
    assert.deepEqual(await store.readHistory(a.row.run_id, 10, 100), []);
    assert.deepEqual(await store.readHistory("unknown-run", 0, 100), []);
  });

  test("getExecution() answers the row of the last commit, or null", async (store) => {
    const a = createItem("a", { parent_id: "p", root_id: "p", input: null });
    await store.commit([a]);
    assert.deepEqual(await store.getExecution("a"), a.row);
    assert.equal(await store.getExecution("b"), null);
  });

  test("listExecutions() pages newest first, without duplicates or gaps", async (store) => {
    const items: AppendItem[] = [];
    for (let i = 0; i < 23; i++) {
      // Groups of equal created_ms make execution_id decide the order inside a group.
      items.push(createItem(`e${String(i % 7).padStart(2, "0")}-${i}`, {
        created_ms: 1000 + Math.floor(i / 4),
        workflow: i % 3 === 0 ? "Ship" : "Order",
        status: (i % 2 === 0 ? "running" : "completed") as ExecutionStatus,
      }));
    }
    await store.commit(items.slice(0, 10));
    await store.commit(items.slice(10));
    const expected = items.map((i) => i.row).sort((x, y) =>
      y.created_ms - x.created_ms || (x.execution_id < y.execution_id ? 1 : -1)
    );
    const pages = async (q: { workflow?: string; status?: ExecutionStatus }, limit: number) => {
      const seen: ExecutionRow[] = [];
      let cursor: string | undefined;
      for (let n = 0; n < 100; n++) {
        const page = await store.listExecutions({ ...q, limit, cursor });
        assert.ok(page.executions.length <= limit);
        seen.push(...page.executions);
        if (page.next_cursor === null) return seen;
        assert.match(page.next_cursor, /^[A-Za-z0-9_-]+$/);
        cursor = page.next_cursor;
      }
      throw new Error("listExecutions() never ended");
    };
    assert.deepEqual(await pages({}, 4), expected);
    assert.deepEqual(await pages({}, 23), expected);
    assert.deepEqual(await pages({}, 100), expected);
    const filtered = (f: (r: ExecutionRow) => boolean) => expected.filter(f);
    assert.deepEqual(await pages({ workflow: "Ship" }, 3), filtered((r) => r.workflow === "Ship"));
    assert.deepEqual(
      await pages({ status: "running" }, 5),
      filtered((r) => r.status === "running"),
    );
    assert.deepEqual(
      await pages({ workflow: "Order", status: "completed" }, 2),
      filtered((r) => r.workflow === "Order" && r.status === "completed"),
    );
    assert.deepEqual(await pages({ workflow: "None" }, 2), []);
    const first = await store.listExecutions({ limit: 23 });
    assert.equal(first.next_cursor, null);
    await assert.rejects(
      store.listExecutions({ limit: 2, cursor: "not a cursor!" }),
      InvalidCursorError,
    );
    await assert.rejects(
      store.listExecutions({ limit: 2, cursor: btoa("[1]") }),
      InvalidCursorError,
    );
  });

  test("loadRunning() answers running executions with their current-run histories", async (store) => {
    const a = createItem("a", { created_ms: 1 });
    const b = createItem("b", { created_ms: 2 });
    const c = createItem("c", { created_ms: 3 });
    await store.commit([a, b, c]);
    const a2 = appendItem(a.row, 3);
    const b2 = appendItem(b.row, 1, { status: "completed", closed_ms: 4 });
    await store.commit([a2, b2]);
    const a3 = appendItem(a2.row, 2);
    // c continues as new: its row moves to run 2, whose history starts again at seq 1.
    const c2Row = { ...c.row, run_id: "c~r2", last_seq: 0 };
    const c2 = appendItem(c2Row, 2);
    await store.commit([a3, c2]);
    const running = await store.loadRunning();
    assert.deepEqual(running.map((r) => r.row.execution_id), ["a", "c"]);
    assert.deepEqual(running[0], {
      row: a3.row,
      events: [...a.events, ...a2.events, ...a3.events],
    });
    assert.deepEqual(running[1], { row: c2.row, events: c2.events });
    assert.deepEqual(running[0]?.events.map((e) => e.seq), [1, 2, 3, 4, 5, 6]);
  });

  test("wake_at_ms: loadRunningDue() loads in-flight and due executions, listWaking() timers", async (store) => {
    // a: work in flight (0); b: a timer at 1000; c: a timer at 9000; d: waits for a signal
    // (null); e: written without a wake-up (0, loaded at every start); f: closed.
    const wake: Record<string, number | null | undefined> = {
      a: 0,
      b: 1000,
      c: 9000,
      d: null,
      e: undefined,
      f: null,
    };
    const items = Object.entries(wake).map(([id, w], i) => {
      const item = createItem(id, { created_ms: i + 1 });
      if (w !== undefined) item.wake_at_ms = w;
      return item;
    });
    await store.commit(items);
    await store.commit([appendItem(items[5]!.row, 1, { status: "completed", closed_ms: 9 })]);
    const due = await store.loadRunningDue(5000);
    assert.deepEqual(due.map((r) => r.row.execution_id), ["a", "b", "e"]);
    assert.deepEqual(due[1], { row: items[1]!.row, events: items[1]!.events });
    assert.deepEqual((await store.loadRunningDue(10_000)).map((r) => r.row.execution_id), [
      "a",
      "b",
      "c",
      "e",
    ]);
    // listWaking: timers only (not 0), in (wake_at_ms, execution_id) order, paged by keyset.
    assert.deepEqual(await store.listWaking(5000, null, 10), [{
      execution_id: "b",
      wake_at_ms: 1000,
    }]);
    const first = await store.listWaking(10_000, null, 1);
    assert.deepEqual(first, [{ execution_id: "b", wake_at_ms: 1000 }]);
    assert.deepEqual(await store.listWaking(10_000, first[0]!, 1), [
      { execution_id: "c", wake_at_ms: 9000 },
    ]);
    assert.deepEqual(
      await store.listWaking(10_000, { execution_id: "c", wake_at_ms: 9000 }, 1),
      [],
    );
    // An update writes the new wake-up (the timer fired, the execution waits for a signal
    // now); a closed execution is never due, whatever it was written with.
    const b2 = appendItem(items[1]!.row, 1);
    b2.wake_at_ms = null;
    const c2 = appendItem(items[2]!.row, 1, { status: "failed", closed_ms: 10 });
    c2.wake_at_ms = 0;
    await store.commit([b2, c2]);
    assert.deepEqual((await store.loadRunningDue(10_000)).map((r) => r.row.execution_id), [
      "a",
      "e",
    ]);
    assert.deepEqual(await store.listWaking(10_000, null, 10), []);
  });

  test("countRunning() counts running executions only", async (store) => {
    assert.equal(await store.countRunning(), 0);
    const items = ["a", "b", "c", "d"].map((id) => createItem(id));
    await store.commit(items);
    assert.equal(await store.countRunning(), 4);
    const [a, b] = items;
    await store.commit([
      appendItem(a!.row, 1, { status: "completed" }),
      appendItem(b!.row, 1, { status: "cancelled" }),
    ]);
    assert.equal(await store.countRunning(), 2);
  });

  runScheduleConformance(test);
}
