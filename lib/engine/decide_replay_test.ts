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
import { Driver, prng, task, undo, workflow, workflow2 } from "./testing.ts";

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

/** orbit-ir/2 shapes: branches, signals, handlers, timers, http, children, continue-as-new. */
const DEFS2: WorkflowDoc[] = [
  workflow2([
    task("a", { compensate: undo("ua") }),
    { id: "nap", sleep_s: 0.2 },
    {
      id: "p",
      parallel: [
        [
          task("b", { compensate: undo("ub"), retry: { max_attempts: 2, initial_ms: 50 } }),
          { id: "w", wait_signal: "go", timeout_s: 1 },
        ],
        [
          {
            id: "h",
            http: { url: "{% 'https://x.test/' & $execution.id %}", body: "{% $steps.a %}" },
            retry: { max_attempts: 2, initial_ms: 10 },
            timeout_s: 1,
          },
          { id: "kid", child: { workflow: "K", input: "{% $steps.h %}" }, timeout_s: 2 },
        ],
      ],
    },
    {
      id: "i",
      if: "{% $vars.n > 1 %}",
      then: [{ id: "set", assign: { big: true } }],
      else: [task("e", { compensate: undo("ue") })],
    },
    { id: "done", return: { vars: "{% $vars %}", w: "{% $steps.w %}", p: "{% $steps.p %}" } },
  ], {
    signals: { go: {}, bump: {} },
    handlers: {
      bump: [
        { id: "inc", assign: { n: "{% ($vars.n ? $vars.n : 0) + 1 %}" } },
        task("hb", {
          input: "{% $signal %}",
          compensate: undo("uhb", { input: "{% $steps.hb %}" }),
        }),
      ],
    },
    timeout_s: 40,
  }),
  workflow2([
    { id: "w", wait_signal: "go" },
    { id: "i", if: "{% $steps.w = 'again' %}", then: [{ id: "again", continue_as_new: {} }] },
    task("t", { compensate: undo("ut") }),
    { id: "w2", wait_signal: "go", timeout_s: 5 },
    { id: "v", assign: { x: "{% $steps.t %}" } },
  ], {
    signals: { go: {}, bump: {} },
    handlers: { bump: [{ id: "seen", assign: { seen: true } }] },
  }),
];

const CODES = ["FLAKY", "FATAL", "TIMEOUT", "BAD"];

interface Run {
  history: HistoryEvent[];
  commands: Array<{ at: number; cmd: Command }>;
}

/** Drives one randomized run; asserts the invariants after every command. */
async function randomRun(
  seed: number,
  script?: Run["commands"],
  defs: WorkflowDoc[] = DEFS,
): Promise<Run> {
  const rnd = prng(seed);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;
  const def = defs[seed % defs.length]!;
  const ir2 = defs === DEFS2;
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
    // On ir/2 shapes: earliest first, and the workflow's own timeout only now and then (a jump
    // to it ends the run).
    const timers = ir2
      ? Object.keys(s.timers).filter((t) => t !== "workflow-timeout" || rnd() < 0.1)
        .sort((x, y) => s.timers[x]!.fire_at_ms - s.timers[y]!.fire_at_ms)
      : Object.keys(s.timers);
    const stepIds = Object.keys(s.steps);
    const children = Object.values(s.steps).filter((st) => st.kind === "child");
    if (ir2 && rnd() < 0.3) {
      const what = rnd();
      if (what < 0.5) {
        await send({
          type: "signal",
          name: pick(["go", "bump"]),
          payload: pick(["again", 1, { x: i }, null]),
        });
      } else if (children.length > 0) {
        const st = pick(children);
        await send(
          what < 0.7
            ? {
              type: "child_started",
              step: st.id,
              execution_id: st.child!.execution_id,
              run_id: `child-run-${i}`,
            }
            : {
              type: "child_result",
              step: st.id,
              execution_id: rnd() < 0.9 ? st.child!.execution_id : "stranger",
              status: pick(["completed", "completed", "failed", "cancelled", "timed_out"] as const),
              output: { child: i },
              error: { code: "CHILD_BROKE", message: "m" },
            },
        );
      }
      continue;
    }
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
    e.type === "WorkflowCompleted" || e.type === "WorkflowFailed" ||
    e.type === "WorkflowCancelled" || e.type === "WorkflowTimedOut" ||
    e.type === "WorkflowContinuedAsNew"
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

Deno.test("decide() keeps replay(history) equal to its state over 300 randomized orbit-ir/2 runs", async () => {
  const ends = new Map<string, number>();
  let lengths = 0;
  for (let seed = 1; seed <= 300; seed++) {
    const { history } = await randomRun(seed, undefined, DEFS2);
    checkHistory(seed, history);
    const s = replay(history);
    ends.set(s.status, (ends.get(s.status) ?? 0) + 1);
    // The saga never compensates a step twice, and never one that did not complete.
    const comps = history.filter((e) => e.type === "CompensationStarted");
    assert.ok(comps.length <= 1, `seed ${seed}: two sagas`);
    lengths += history.length;
  }
  assert.ok(lengths / 300 > 15, `runs too short to prove much: ${lengths / 300} events on average`);
  for (const status of ["completed", "failed", "cancelled", "timed_out", "continued"]) {
    assert.ok((ends.get(status) ?? 0) > 0, `no randomized run ended ${status}: ${[...ends]}`);
  }
});

Deno.test("decide() is deterministic on orbit-ir/2 shapes: the same commands give the same history", async () => {
  for (let seed = 1; seed <= 60; seed++) {
    const first = await randomRun(seed, undefined, DEFS2);
    const again = await randomRun(seed, first.commands, DEFS2);
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
