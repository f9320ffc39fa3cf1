/**
 * The group committer's pacing (issue 39): a busy server spaces its commits, an idle one commits
 * at once. CommitPacer is pure (the clock is passed in); the committer is driven with a store
 * that only records when each commit started.
 */
import assert from "node:assert/strict";
import { CommitPacer, GroupCommitter } from "./committer.ts";
import { Metrics } from "../metrics.ts";
import type { AppendItem, Store } from "../store/store.ts";

Deno.test("commit pacer: an idle server commits at once", () => {
  const p = new CommitPacer(10, 2);
  p.started(100);
  assert.equal(p.busy, false);
  assert.equal(p.delayMs(101), 0);
  // Turns run on time, or within a timer's millisecond: still not busy.
  for (let i = 0; i < 50; i++) p.observe(i % 2);
  assert.equal(p.busy, false);
  assert.equal(p.delayMs(101), 0);
});

Deno.test("commit pacer: late turns make the server busy; then a commit waits for the pace", () => {
  const p = new CommitPacer(10, 2);
  p.observe(1.5);
  assert.equal(p.busy, false, "one late turn is not enough");
  for (let i = 0; i < 10; i++) p.observe(8);
  assert.equal(p.busy, true);
  assert.ok(p.lagMs > 2 && p.lagMs <= 8, `lag ${p.lagMs}`);
  // Nothing committed yet: no previous start to space from.
  assert.equal(p.delayMs(0), 0);
  p.started(1000);
  assert.equal(p.delayMs(1000), 10);
  assert.equal(p.delayMs(1004), 6);
  assert.equal(p.delayMs(1010), 0);
  assert.equal(p.delayMs(1500), 0, "a commit long after the last one starts at once");
  // Negative lateness (a timer that fired early) counts as on time.
  for (let i = 0; i < 30; i++) p.observe(-5);
  assert.equal(p.busy, false, "turns on time again: not busy any more");
  assert.equal(p.delayMs(1001), 0);
});

Deno.test("commit pacer: pace 0 turns pacing off however late the turns run", () => {
  const p = new CommitPacer(0, 2);
  for (let i = 0; i < 10; i++) p.observe(50);
  p.started(10);
  assert.equal(p.busy, false);
  assert.equal(p.delayMs(10), 0);
});

/** A store whose commits take `ms` and record when they started and what they carried. */
function recordingStore(ms: number) {
  const starts: number[] = [];
  const sizes: number[] = [];
  const store = {
    async commit(items: AppendItem[]) {
      starts.push(performance.now());
      sizes.push(items.length);
      await new Promise((r) => setTimeout(r, ms));
    },
  } as unknown as Store;
  return { store, starts, sizes };
}

function item(i: number): AppendItem {
  return { row: { execution_id: `e-${i}` }, events: [] } as unknown as AppendItem;
}

class AlwaysBusy extends CommitPacer {
  override get busy(): boolean {
    return true;
  }
}

Deno.test("group committer: a busy server starts its commits a pace apart and gathers the appends", async () => {
  const { store, starts, sizes } = recordingStore(5);
  const c = new GroupCommitter(store, new Metrics(), 1, new AlwaysBusy(150, 2));
  const first = c.append(item(0));
  await first;
  // Appends that arrive while the first commit's pace runs go together in the second commit.
  const rest = [1, 2, 3, 4].map((i) => c.append(item(i)));
  await Promise.all(rest);
  await c.idle();
  assert.deepEqual(sizes, [1, 4]);
  const gap = starts[1]! - starts[0]!;
  assert.ok(gap >= 149, `second commit started ${gap.toFixed(1)} ms after the first`);
});

Deno.test("group committer: an idle server commits each append at once", async () => {
  const { store, starts, sizes } = recordingStore(1);
  // Busy only from 10 s of lateness on: a loaded test machine's late turns do not count here
  // (the pacer's own tests above cover when it counts a server busy).
  const c = new GroupCommitter(store, new Metrics(), 1, new CommitPacer(150, 10_000));
  for (let i = 0; i < 3; i++) {
    const t0 = performance.now();
    await c.append(item(i));
    // Far below the pace: the commit did not wait for it.
    assert.ok(performance.now() - t0 < 100, `append ${i} took ${performance.now() - t0} ms`);
  }
  assert.deepEqual(sizes, [1, 1, 1]);
  assert.equal(starts.length, 3);
});
