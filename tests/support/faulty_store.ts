/**
 * A store wrapper that injects faults into commits and reads, for property tests of the
 * engine shell (tests/ambiguous_commit_test.ts, the chaos suite's in-process part).
 *
 * A commit fault is one of:
 * - `before`: the commit fails without writing (a connection refused, SQLITE_BUSY, an I/O
 *   error before the transaction: the plan's `error` says which error the call raises);
 * - `after`: the commit is written, then the call fails as if the connection dropped after
 *   COMMIT was sent (the ambiguous case);
 * - `inflight-first` / `inflight-last`: the call fails at once, as when the client gives up on
 *   a connection, but the statement is still in flight on the database's side and lands later:
 *   just before the next call that concerns one of its executions runs (`-first`: that call
 *   sees it), or just after the next read of one of them has answered (`-last`: the read did
 *   not see it; a commit of the same events made before it lands makes it fail on the primary
 *   key and roll back, as PostgreSQL does to the late statement).
 * The plan is a function of the call, so a test can be seeded and replayed.
 */
import type { AppendItem, Store } from "../../lib/store/store.ts";

export type CommitFault = "ok" | "before" | "after" | "inflight-first" | "inflight-last";

export interface FaultPlan {
  /** Decides the fate of the n-th commit call (0-based). */
  commit?: (n: number, items: AppendItem[]) => CommitFault;
  /** True: the n-th read (getExecution, readHistory) fails without reading. */
  read?: (n: number) => boolean;
  /** The error an injected fault raises (default: a lost PostgreSQL connection). */
  error?: () => Error;
}

/** The error a dropped connection raises (postgres.js's code). */
export function connectionLost(): Error {
  return Object.assign(new Error("write CONNECTION_CLOSED 127.0.0.1:5432 (injected)"), {
    code: "CONNECTION_CLOSED",
  });
}

/**
 * A refusal by PostgreSQL itself (serialization_failure, 40001): the transaction rolled back,
 * nothing was written, and the error says so.
 */
export function serializationFailure(): Error {
  return Object.assign(new Error("could not serialize access (injected)"), { code: "40001" });
}

/** SQLite's "database is locked" (SQLITE_BUSY, 5) as node:sqlite raises it. */
export function sqliteBusy(): Error {
  return Object.assign(new Error("database is locked (injected)"), {
    code: "ERR_SQLITE_ERROR",
    errcode: 5,
    errstr: "database is locked",
  });
}

/** SQLite's disk I/O error (SQLITE_IOERR, 10) as node:sqlite raises it. */
export function sqliteIoError(): Error {
  return Object.assign(new Error("disk I/O error (injected)"), {
    code: "ERR_SQLITE_ERROR",
    errcode: 10,
    errstr: "disk I/O error",
  });
}

export interface FaultyStore extends Store {
  readonly injected: {
    before: number;
    after: number;
    reads: number;
    /** In-flight commits, and how many of them landed late (the others met a conflict). */
    inflight: number;
    landedLate: number;
  };
  plan: FaultPlan;
}

/** Wraps `inner`; every method not named here passes through. */
export function faultyStore(inner: Store, plan: FaultPlan = {}): FaultyStore {
  let commits = 0;
  let reads = 0;
  const injected = { before: 0, after: 0, reads: 0, inflight: 0, landedLate: 0 };
  const fail = () => (w.plan.error ?? connectionLost)();
  /** Statements still in flight, and when they land. */
  let inflight: Array<{ items: AppendItem[]; when: "first" | "last" }> = [];
  /** Whether a statement concerns the execution or run `key`. */
  const concerns = (items: AppendItem[], key: string) =>
    items.some((i) => i.row.execution_id === key || i.row.run_id === key);
  const land = async (when: "first" | "last", keys: string[]) => {
    const now = inflight.filter((f) => f.when === when && keys.some((k) => concerns(f.items, k)));
    if (now.length === 0) return;
    inflight = inflight.filter((f) => !now.includes(f));
    for (const f of now) {
      try {
        await inner.commit(f.items);
        injected.landedLate++;
      } catch { /* a commit of the same events won: the late statement rolls back */ }
    }
  };
  /**
   * Every call, with the executions or runs it concerns (`read`: it reads them): in-flight
   * statements land around it as planned.
   */
  const around = async <T>(keys: string[], read: boolean, call: () => Promise<T>): Promise<T> => {
    const pending = read ? inflight.filter((f) => f.when === "last") : [];
    await land("first", keys);
    try {
      return await call();
    } finally {
      if (pending.length > 0) await land("last", keys);
    }
  };
  const readFault = () => {
    const n = reads++;
    if (w.plan.read?.(n)) {
      injected.reads++;
      throw fail();
    }
  };
  const w: FaultyStore = Object.create(inner);
  Object.defineProperties(w, {
    injected: { value: injected },
    plan: { value: plan, writable: true },
    kind: { value: inner.kind },
  });
  w.commit = (items: AppendItem[]) =>
    around(items.map((i) => i.row.execution_id), false, async () => {
      const fault = w.plan.commit?.(commits++, items) ?? "ok";
      if (fault === "before") {
        injected.before++;
        throw fail();
      }
      if (fault === "inflight-first" || fault === "inflight-last") {
        injected.inflight++;
        inflight.push({ items, when: fault === "inflight-first" ? "first" : "last" });
        throw fail();
      }
      const result = await inner.commit(items);
      if (fault === "after") {
        injected.after++;
        throw fail();
      }
      return result;
    });
  w.getExecution = (id: string) =>
    around([id], true, () => {
      readFault();
      return inner.getExecution(id);
    });
  w.readHistory = (runId: string, afterSeq: number, limit: number) =>
    around([runId], true, () => {
      readFault();
      return inner.readHistory(runId, afterSeq, limit);
    });
  // Methods read through the prototype would run with `this` = the wrapper; bind them.
  for (const k of Object.getOwnPropertyNames(Object.getPrototypeOf(inner))) {
    const v = (inner as unknown as Record<string, unknown>)[k];
    if (k !== "constructor" && typeof v === "function" && !Object.hasOwn(w, k)) {
      (w as unknown as Record<string, unknown>)[k] = (v as (...a: unknown[]) => unknown).bind(
        inner,
      );
    }
  }
  return w;
}

/** A small seeded PRNG (mulberry32), so a failing seed can be replayed. */
/** A commit as the `execution/type` of its events, in order. */
export const commitShape = (items: AppendItem[]): string[] =>
  items.flatMap((i) => i.events.map((e) => `${i.row.execution_id}/${e.type}`));

/** What `recordCommits` saw, and the commit it fails next. */
export interface CommitLog {
  /** Each commit as the `execution/type` of its events, in order. */
  commits: string[][];
  /** A commit whose events include this `execution/type` fails without writing. */
  failOn: string | null;
}

/** Sets the store's commit plan to one that records every commit and fails as `failOn` says. */
export function recordCommits(store: FaultyStore): CommitLog {
  const log: CommitLog = { commits: [], failOn: null };
  store.plan = {
    commit: (_n, items) => {
      const shape = commitShape(items);
      log.commits.push(shape);
      return log.failOn !== null && shape.includes(log.failOn) ? "before" : "ok";
    },
  };
  return log;
}

export { prng as rng } from "../../lib/engine/testing.ts";
