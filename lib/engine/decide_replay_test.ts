/**
 * Determinism and replay under randomized command sequences: whatever a shell, its workers
 * and its clock throw at `decide` — duplicates, late results, early timers, stale deadlines,
 * lost sessions, cancels — the history stays gap-free, replays to the very state `decide`
 * returned, and never applies a step's result twice.
 */
import assert from "node:assert/strict";
import type { Command } from "./decide.ts";
import type { HistoryEvent } from "./events.ts";
import type { WorkflowDoc } from "./ir.ts";
import { replay } from "./state.ts";
import { Driver, prng, task, undo, workflow } from "./testing.ts";

const DEFS: WorkflowDoc[] = [
  workflow([
    task("a", { input: "{% $input %}", compensate: undo("ua", { input: "{% $steps.a %}" }) }),
    task("b", {
      input: { a: "{% $steps.a %}" },
      timeout_s: 5,
      retry: {
        max_attempts: 3,
        initial_ms: 100,
        backoff: 2,
        max_ms: 300,
        non_retryable: ["FATAL"],
      },
    }),
    task("c", {
      compensate: undo("uc", { retry: { max_attempts: 2, initial_ms: 50 }, timeout_s: 2 }),
    }),
    task("d", { timeout_s: 1, retry: { max_attempts: 4, initial_ms: 10 } }),
    { id: "done", return: { a: "{% $steps.a %}", d: "{% $steps.d %}" } },
  ]),
  workflow([
    task("x", { compensate: undo("ux") }),
    task("y", { compensate: undo("uy"), retry: { max_attempts: 1 } }),
    task("z", { input: "{% $steps.y.missing.deep %}" }),
  ]),
  workflow([
    task("p", { compensate: undo("up") }),
    task("q", { input: "{% $input.fail ? $error('asked to fail') : 1 %}" }),
    { id: "r", return: "{% $steps.p.nope() %}" },
  ]),
];

const CODES = ["FLAKY", "FATAL", "TIMEOUT", "BAD"];

interface Run {
  history: HistoryEvent[];
  commands: Array<{ at: number; cmd: Command }>;
}

/** Drives one randomized run; asserts the invariants after every command. */
async function randomRun(seed: number, script?: Run["commands"]): Promise<Run> {
  const rnd = prng(seed);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;
  const def = DEFS[seed % DEFS.length]!;
  const d = new Driver(def);
  const commands: Run["commands"] = [];
  const tokens: string[] = [];
  const seen: Command[] = [];

  const send = async (cmd: Command) => {
    commands.push({ at: d.now, cmd });
    const before = d.state;
    const snapshot = structuredClone(before);
    const n = d.history.length;
    const r = await d.send(cmd);
    assert.deepEqual(before, snapshot, `seed ${seed}: decide mutated its input state`);
    if (!r.accepted) assert.equal(d.history.length, n);
    if (cmd.type === "dispatch" && r.accepted) tokens.push(cmd.token);
    seen.push(cmd);
    assert.deepEqual(replay(d.history), d.s, `seed ${seed}: replay differs after ${cmd.type}`);
  };

  if (script) {
    for (const { at, cmd } of script) {
      d.now = at;
      await send(cmd);
    }
    return { history: d.history, commands };
  }

  await send({
    type: "start",
    execution_id: "exec-1",
    run_id: "run-1",
    input: { fail: rnd() < 0.3 },
  });
  for (let i = 0; i < 80 && d.s.phase !== "closed"; i++) {
    d.now += Math.floor(rnd() * 400);
    const s = d.s;
    const roll = rnd();
    const scheduled = Object.values(s.steps).filter((st) => st.status === "scheduled");
    const timers = Object.keys(s.timers);
    const stepIds = Object.keys(s.steps);
    if (roll < 0.3 && scheduled.length > 0) {
      await send({
        type: "dispatch",
        step: pick(scheduled).id,
        token: d.token(),
        worker_id: "w",
        worker_session: pick(["s1", "s2"]),
      });
    } else if (roll < 0.5 && tokens.length > 0) {
      await send({
        type: "complete",
        token: pick(tokens),
        output: { i, v: Math.floor(rnd() * 10) },
      });
    } else if (roll < 0.62 && tokens.length > 0) {
      await send({
        type: "fail",
        token: pick(tokens),
        error: { code: pick(CODES), message: "m", ...(rnd() < 0.2 ? { retryable: false } : {}) },
      });
    } else if (roll < 0.74 && timers.length > 0) {
      if (rnd() < 0.7) d.now = Math.max(d.now, s.timers[timers[0]!]!.fire_at_ms);
      await send({ type: "timer", timer_id: pick(timers) });
    } else if (roll < 0.82 && stepIds.length > 0) {
      const st = s.steps[pick(stepIds)]!;
      if (rnd() < 0.5 && st.deadline_ms !== null) d.now = Math.max(d.now, st.deadline_ms);
      await send({
        type: "deadline",
        step: st.id,
        attempt: rnd() < 0.8 ? st.attempt : st.attempt - 1,
      });
    } else if (roll < 0.9 && tokens.length > 0) {
      await send({ type: "uncertain", token: pick(tokens), reason: "session expired" });
    } else if (roll < 0.91 && rnd() < 0.4) {
      await send({ type: "cancel", reason: `cancel ${i}` });
    } else if (seen.length > 0) {
      await send(structuredClone(pick(seen))); // a duplicate delivery of an earlier command
    }
  }
  return { history: d.history, commands };
}

function checkHistory(seed: number, history: HistoryEvent[]) {
  assert.deepEqual(
    history.map((e) => e.seq),
    history.map((_, i) => i + 1),
    `seed ${seed}: seq gap`,
  );
  const succeeded = new Map<string, number>();
  for (const e of history) {
    if (e.type === "StepSucceeded") succeeded.set(e.step, (succeeded.get(e.step) ?? 0) + 1);
  }
  for (const [step, n] of succeeded) {
    assert.equal(n, 1, `seed ${seed}: ${n} StepSucceeded for ${step}`);
  }
  const terminal = history.findIndex((e) =>
    e.type === "WorkflowCompleted" || e.type === "WorkflowFailed" || e.type === "WorkflowCancelled"
  );
  if (terminal >= 0) {
    assert.equal(terminal, history.length - 1, `seed ${seed}: events after the end`);
  }
  for (let i = 1; i < history.length; i++) {
    assert.ok(history[i]!.time_ms >= history[i - 1]!.time_ms, `seed ${seed}: time went back`);
  }
}

Deno.test("decide() keeps replay(history) equal to its state over 300 randomized runs", async () => {
  const ends = new Map<string, number>();
  for (let seed = 1; seed <= 300; seed++) {
    const { history } = await randomRun(seed);
    checkHistory(seed, history);
    const s = replay(history);
    ends.set(s.status, (ends.get(s.status) ?? 0) + 1);
  }
  // The generator must reach every outcome, or the test proves less than it claims.
  for (const status of ["completed", "failed", "cancelled", "running"]) {
    assert.ok((ends.get(status) ?? 0) > 0, `no randomized run ended ${status}: ${[...ends]}`);
  }
});

Deno.test("decide() is deterministic: the same commands at the same times give the same history", async () => {
  for (let seed = 1; seed <= 60; seed++) {
    const first = await randomRun(seed);
    const again = await randomRun(seed, first.commands);
    assert.deepEqual(again.history, first.history, `seed ${seed}`);
  }
});

Deno.test("replay() rebuilds every prefix of a randomized history and ignores object identity", async () => {
  const { history } = await randomRun(7);
  assert.ok(history.length > 10);
  for (let n = 0; n <= history.length; n++) {
    const s = replay(history.slice(0, n));
    assert.equal(s.last_seq, n);
  }
  assert.deepEqual(replay(structuredClone(history)), replay(history));
});

Deno.test("prng() is deterministic per seed", () => {
  const a = prng(42), b = prng(42), c = prng(43);
  const xs = [a(), a(), a()];
  assert.deepEqual([b(), b(), b()], xs);
  assert.notDeepEqual([c(), c(), c()], xs);
  for (const x of xs) assert.ok(x >= 0 && x < 1);
});
