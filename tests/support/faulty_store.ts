/**
 * A store wrapper that injects faults into commits and reads, for property tests of the
 * engine shell (tests/ambiguous_commit_test.ts, the chaos suite's in-process part).
 *
 * A commit fault is either `before` (the commit fails without writing: a connection refused)
 * or `after` (the commit is written, then the call fails as if the connection dropped after
 * COMMIT was sent: the ambiguous case). The plan is a function of the call, so a test can be
 * seeded and replayed.
 */
import type { AppendItem, Store } from "../../lib/store/store.ts";

export type CommitFault = "ok" | "before" | "after";

export interface FaultPlan {
  /** Decides the fate of the n-th commit call (0-based). */
  commit?: (n: number, items: AppendItem[]) => CommitFault;
  /** True: the n-th read (getExecution, readHistory) fails without reading. */
  read?: (n: number) => boolean;
}

/** The error a dropped connection raises (postgres.js's code). */
export function connectionLost(): Error {
  return Object.assign(new Error("write CONNECTION_CLOSED 127.0.0.1:5432 (injected)"), {
    code: "CONNECTION_CLOSED",
  });
}

export interface FaultyStore extends Store {
  readonly injected: { before: number; after: number; reads: number };
  plan: FaultPlan;
}

/** Wraps `inner`; every method not named here passes through. */
export function faultyStore(inner: Store, plan: FaultPlan = {}): FaultyStore {
  let commits = 0;
  let reads = 0;
  const injected = { before: 0, after: 0, reads: 0 };
  const readFault = () => {
    const n = reads++;
    if (w.plan.read?.(n)) {
      injected.reads++;
      throw connectionLost();
    }
  };
  const w: FaultyStore = Object.create(inner);
  Object.defineProperties(w, {
    injected: { value: injected },
    plan: { value: plan, writable: true },
    kind: { value: inner.kind },
  });
  w.commit = async (items: AppendItem[]) => {
    const fault = w.plan.commit?.(commits++, items) ?? "ok";
    if (fault === "before") {
      injected.before++;
      throw connectionLost();
    }
    await inner.commit(items);
    if (fault === "after") {
      injected.after++;
      throw connectionLost();
    }
  };
  w.getExecution = (id: string) => {
    readFault();
    return inner.getExecution(id);
  };
  w.readHistory = (runId: string, afterSeq: number, limit: number) => {
    readFault();
    return inner.readHistory(runId, afterSeq, limit);
  };
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
