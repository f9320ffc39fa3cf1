/**
 * The session store on its own, with a clock the test moves: contact and expiry, which
 * session holds which attempt, cancel notices, orphans and attempts left out of heartbeats.
 */
import assert from "node:assert/strict";
import type { ExecutionState } from "../engine/state.ts";
import type { OrbitError } from "../errors.ts";
import { type Session, WorkerSessions } from "./sessions.ts";

const TIMEOUT = 1000;

function setup() {
  let now = 0;
  let n = 0;
  const store = new WorkerSessions({
    sessionTimeoutMs: TIMEOUT,
    now: () => now,
    newId: () => `s${++n}`,
  });
  const due: string[] = [];
  const sweep = (at: number) => {
    now = at;
    store.sweep({
      expired: (s) => due.push(`expired ${s.session_id} ${[...s.tokens]}`),
      unlisted: (s, t) => due.push(`unlisted ${s.session_id} ${t}`),
      orphaned: (t) => due.push(`orphaned ${t}`),
    });
  };
  const register = () =>
    store.register({
      worker_id: "w",
      runtime: "typescript",
      tasks: [{ name: "t", contract: "1" }],
      concurrency: 4,
    });
  return { store, due, sweep, register, at: (t: number) => (now = t) };
}

/** A state whose one task step holds the given tokens (token → session). */
function holding(tokens: Record<string, string>): ExecutionState {
  return {
    execution_id: "e1",
    phase: "running",
    steps: {
      a: {
        id: "a",
        kind: "task",
        status: "dispatched",
        tokens: Object.fromEntries(
          Object.entries(tokens).map(([t, s]) => [t, { worker_id: "w", worker_session: s }]),
        ),
      },
    },
  } as unknown as ExecutionState;
}

Deno.test("an unknown session is UNKNOWN_SESSION; contact keeps a session alive", () => {
  const { store, due, sweep, register, at } = setup();
  assert.throws(() => store.contact("nope"), (e) => (e as OrbitError).code === "UNKNOWN_SESSION");
  const id = register();
  at(900);
  assert.equal(store.contact(id).last_contact_ms, 900);
  sweep(1800);
  assert.ok(store.sessions.has(id));
  sweep(1901);
  assert.ok(!store.sessions.has(id));
  assert.deepEqual(due, [`expired ${id} `]);
});

Deno.test("a session with a poll in progress does not expire", () => {
  const { store, due, sweep, register } = setup();
  const id = register();
  store.sessions.get(id)!.polling = 1;
  sweep(5000);
  assert.ok(store.sessions.has(id));
  assert.deepEqual(due, []);
});

Deno.test("attempts join their session, leave it when they die, and its worker hears cancel", () => {
  const { store, register } = setup();
  const id = register();
  const s = store.sessions.get(id)!;
  const one = holding({ "e1/x": id, "e1/y": id });
  store.track(null, one, new Set());
  assert.deepEqual([...s.tokens], ["e1/x", "e1/y"]);
  // x was reported by its worker, y died otherwise (cancelled): only y is a cancel notice.
  store.track(one, holding({}), new Set(["e1/x"]));
  assert.deepEqual([...s.tokens], []);
  assert.deepEqual(store.heartbeat(s, []), ["e1/y"]);
  assert.deepEqual(store.heartbeat(s, []), []);
  // A token nobody holds is a cancel notice once.
  assert.deepEqual(store.heartbeat(s, ["e1/z"]), ["e1/z"]);
  assert.deepEqual(store.heartbeat(s, ["e1/z"]), []);
});

Deno.test("an orphan is due one timeout later unless a heartbeat names it first", () => {
  const { store, due, sweep, register, at } = setup();
  store.track(null, holding({ "e1/x": "gone", "e1/y": "gone" }), new Set());
  const id = register();
  const s: Session = store.sessions.get(id)!;
  assert.deepEqual(store.heartbeat(s, ["e1/x"]), []);
  assert.deepEqual([...s.tokens], ["e1/x"]);
  at(1001);
  store.contact(id);
  sweep(1001);
  assert.deepEqual(due, ["orphaned e1/y"]);
});

Deno.test("an attempt left out of heartbeats for a timeout is due once; listed, it is not", () => {
  const { store, due, sweep, register, at } = setup();
  const id = register();
  const s = store.sessions.get(id)!;
  store.track(null, holding({ "e1/x": id, "e1/y": id }), new Set());
  at(500);
  store.heartbeat(store.contact(id), ["e1/x"]);
  sweep(900);
  assert.deepEqual(due, []);
  store.heartbeat(store.contact(id), ["e1/x"]);
  sweep(1001);
  assert.deepEqual(due, [`unlisted ${id} e1/y`]);
  store.heartbeat(store.contact(id), ["e1/x"]);
  sweep(1600);
  assert.deepEqual(due, [`unlisted ${id} e1/y`]);
  assert.deepEqual([...s.tokens], ["e1/x", "e1/y"]);
});

Deno.test("a worker that registered again takes over its attempts by naming them", () => {
  const { store, register } = setup();
  const first = register();
  store.track(null, holding({ "e1/x": first }), new Set());
  const second = register();
  const s2 = store.sessions.get(second)!;
  assert.deepEqual(store.heartbeat(s2, ["e1/x"]), []);
  assert.deepEqual([...store.sessions.get(first)!.tokens], []);
  assert.deepEqual([...s2.tokens], ["e1/x"]);
});

Deno.test("an attempt a heartbeat adopted and its worker later leaves out is due one timeout after", () => {
  const { store, due, sweep, register, at } = setup();
  // Recovered after a restart: its session is gone (an orphan); the worker's new session lists
  // it and adopts it.
  store.track(null, holding({ "e1/x": "gone" }), new Set());
  const id = register();
  const s = store.sessions.get(id)!;
  store.heartbeat(s, ["e1/x"]);
  assert.deepEqual([...s.tokens], ["e1/x"]);
  // Then the worker drops it without a result (its answer lost, or a result it could not send).
  at(500);
  store.heartbeat(store.contact(id), []);
  sweep(900);
  assert.deepEqual(due, []);
  at(1001);
  store.heartbeat(store.contact(id), []);
  sweep(1001);
  assert.deepEqual(due, [`unlisted ${id} e1/x`]);
});
