/**
 * The one dispatcher on its own, with the engine driven by the pure decide (lib/engine/testing.ts),
 * the memory session store, and a counted TaskClaims standing in for shared mode's claim
 * statement: the same poll path serves a single server (no claims) and shared mode (claims).
 */
import assert from "node:assert/strict";
import type { Command } from "../engine/decide.ts";
import { Driver, task, workflow } from "../engine/testing.ts";
import type { Executions } from "../executions/executions.ts";
import { Metrics } from "../metrics.ts";
import { waitFor } from "../../tests/support/server.ts";
import { Dispatcher, TAKEN_HOLD_MS, type TaskClaims } from "./dispatcher.ts";
import { TaskTakenError } from "../store/store.ts";
import { WorkerSessions } from "./sessions.ts";

const T = { sanitizeOps: false, sanitizeResources: false };

/** The engine faked over one Driver: commands are decided and installed at once. */
function engine(d: Driver, dispatcher: () => Dispatcher | null): Executions {
  return {
    observer: null,
    remote: null,
    holds: () => true,
    stateOf: (id: string) => (id === d.executionId ? d.state ?? undefined : undefined),
    command: async (_id: string, cmd: Command) => {
      const prev = d.state;
      const r = await d.send(cmd);
      if (r.accepted) dispatcher()?.installed(prev, d.state!, r.events);
      return { accepted: r.accepted, state: d.state, events: r.events };
    },
    uncertain: () => Promise.resolve(),
  } as unknown as Executions;
}

function setup(
  claims?: TaskClaims,
  now: () => number = () => Date.now(),
  wrap: (e: Executions) => Executions = (e) => e,
) {
  const d = new Driver(workflow([task("a")]));
  let dispatcher: Dispatcher | null = null;
  const opts = { sessionTimeoutMs: 60_000, now, newId: d.newId };
  dispatcher = new Dispatcher(wrap(engine(d, () => dispatcher)), new Metrics(), opts, {
    sessions: new WorkerSessions(opts),
    ...(claims ? { claims } : {}),
  });
  const session = dispatcher.register({
    worker_id: "w-1",
    runtime: "typescript",
    tasks: [{ name: "t.a", contract: "1" }],
    concurrency: 4,
  }) as string;
  return { d, w: dispatcher, session };
}

/** Lets every pending timer of 0 ms and promise job run. */
const settle = () => new Promise((r) => setTimeout(r, 0));

Deno.test({
  ...T,
  name: "dispatcher: with claims, the polls of a session stand in line and only the first " +
    "claims again on a wake-up; the next claims when the first leaves",
  fn: async () => {
    let claimed = 0;
    const { w, session } = setup({
      claim: () => {
        claimed++;
        return Promise.resolve([]);
      },
      recheckMs: 60_000,
    });
    const stop = [new AbortController(), new AbortController(), new AbortController()];
    const polls = stop.map((c) => w.poll(session, 1, 30_000, c.signal));
    // Each poll's first look claims (a poll that just arrived does not know the line is busy).
    await waitFor(() => claimed === 3, "three first claims");
    await waitFor(() => w.sessions.get(session)?.polling === 3, "three polls");
    await settle();
    w.wake();
    await waitFor(() => claimed === 4, "the first poll's claim");
    await settle();
    await settle();
    assert.equal(claimed, 4, "only the first poll of the line claims on a wake-up");
    stop[0]!.abort();
    assert.deepEqual(await polls[0], []);
    await waitFor(() => claimed === 5, "the next poll in line claims");
    await settle();
    assert.equal(claimed, 5);
    for (const c of stop) c.abort();
    await Promise.all(polls);
    w.stop();
  },
});

Deno.test({
  ...T,
  name: "dispatcher: a task queued here goes to a waiting poll at once, with no claim; " +
    "without claims (one server) the same path serves it",
  fn: async () => {
    for (const shared of [true, false]) {
      let claimed = 0;
      const { d, w, session } = setup(
        shared
          ? {
            claim: () => {
              claimed++;
              return Promise.resolve([]);
            },
            recheckMs: 60_000,
          }
          : undefined,
      );
      const p1 = w.poll(session, 1, 30_000);
      const p2 = w.poll(session, 1, 1_000);
      await waitFor(() => w.sessions.get(session)?.polling === 2, "two polls");
      await settle();
      const before = claimed;
      const r = await d.start();
      w.installed(null, d.state!, r.events);
      const tasks = await p1;
      assert.deepEqual(tasks.map((t) => t.step), ["a"]);
      assert.equal(d.state!.steps["a"]!.status, "dispatched");
      // The task came from the queue; with claims, the poll next in line looked once (a claim)
      // when the first left, as a line does.
      assert.equal(claimed - before, shared ? 1 : 0, "the queued task needed no claim");
      assert.equal(claimed, shared ? 3 : 0);
      assert.deepEqual(await p2, []);
      w.stop();
    }
  },
});

Deno.test({
  ...T,
  name: "dispatcher: pollsHere tells whether a poll waits here or came within the window",
  fn: async () => {
    let now = 1_000_000;
    const { w, session } = setup(undefined, () => now);
    assert.equal(w.pollsHere(10_000), false, "no poll yet");
    const stop = new AbortController();
    const poll = w.poll(session, 1, 30_000, stop.signal);
    await waitFor(() => w.sessions.get(session)?.polling === 1, "the poll waits");
    now += 60_000;
    assert.equal(w.pollsHere(10_000), true, "a poll waits here, however long ago it came");
    stop.abort();
    assert.deepEqual(await poll, []);
    assert.equal(w.pollsHere(10_000), false, "none waits, and the last came 60 s ago");
    assert.equal(w.pollsHere(60_000), true, "within a minute");
    w.stop();
  },
});

Deno.test({
  ...T,
  name: "dispatcher: a take the commit refused (TaskTakenError) keeps its step in the queue, " +
    "out of takes for TAKEN_HOLD_MS, and a later take dispatches it",
  fn: async () => {
    let now = 1_000_000;
    let claimed = 0;
    let refusals = 1;
    const claims: TaskClaims = {
      claim: () => {
        claimed++;
        return Promise.resolve([]);
      },
      recheckMs: 60_000,
    };
    // The first dispatch's commit refuses its take, as the shared store does.
    const refusing = (base: Executions) =>
      ({
        ...base,
        command: (id: string, cmd: Command) => {
          if (cmd.type === "dispatch" && refusals-- > 0) {
            return Promise.reject(new TaskTakenError("an older row of the task waits"));
          }
          return base.command(id, cmd);
        },
      }) as unknown as Executions;
    const { d, w, session } = setup(claims, () => now, refusing);
    const r = await d.start();
    w.installed(null, d.state!, r.events);
    // A poll that ends as soon as it waits: what it took and what it claimed are what count.
    const poll = async () => {
      const stop = new AbortController();
      const p = w.poll(session, 1, 30_000, stop.signal);
      await waitFor(() => claimed > before || w.sessions.get(session)?.polling === 0, "a look");
      stop.abort();
      return await p;
    };
    let before = claimed;
    assert.deepEqual(await poll(), [], "the take was refused");
    assert.equal(claimed, before + 1, "a claim followed the refused take");
    assert.equal(d.state!.steps["a"]!.status, "scheduled");
    before = claimed;
    assert.deepEqual(await poll(), [], "held: not taken again at once");
    assert.equal(claimed, before + 1);
    now += TAKEN_HOLD_MS;
    before = claimed;
    const tasks = await poll();
    assert.deepEqual(tasks.map((t) => t.step), ["a"], "after the hold the queue has it");
    assert.equal(claimed, before, "no claim was needed");
    assert.equal(d.state!.steps["a"]!.status, "dispatched");
    w.stop();
  },
});
