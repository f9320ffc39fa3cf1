/**
 * The notification bus's wait announcements (cluster/shared/notify.ts), with the database faked:
 * a wait on a server that does not hold the execution is announced once per WAIT_ANNOUNCE_MS,
 * and an end is announced only for executions a server announced a wait for, while it remembers.
 */
import assert from "node:assert/strict";
import { Notifier, SERVED_ANNOUNCE_MS, WAIT_ANNOUNCE_MS, WAIT_MEMORY_MS } from "./shared/notify.ts";
import type { SharedContext } from "./shared/context.ts";
import { waitFor } from "../tests/support/server.ts";

function fakeNotifier() {
  let now = 1_000_000;
  const sent: Array<{ channel: string; payload: string }> = [];
  const ctx = {
    conns: {},
    now: () => now,
    rt: null,
    sql: () => (_text: string, params: unknown[]) => {
      sent.push(...(params[0] as typeof sent));
      return Promise.resolve([]);
    },
  } as unknown as SharedContext;
  return { n: new Notifier(ctx), sent, advance: (ms: number) => (now += ms) };
}

Deno.test("notify: a wait is announced when it begins and again after WAIT_ANNOUNCE_MS", async () => {
  const { n, sent, advance } = fakeNotifier();
  const off = n.onDone("e-1", () => {});
  off();
  await waitFor(() => sent.length === 1, "the announcement");
  assert.deepEqual(sent, [{ channel: "orbit_wait", payload: "e-1" }]);
  // The wait's one-second re-reads subscribe again: not announced again yet.
  advance(1_000);
  n.onDone("e-1", () => {})();
  advance(WAIT_ANNOUNCE_MS - 1_001);
  n.onDone("e-1", () => {})();
  n.onDone("e-2", () => {})();
  await waitFor(() => sent.length === 2, "e-2's announcement");
  assert.deepEqual(sent[1], { channel: "orbit_wait", payload: "e-2" });
  advance(1);
  n.onDone("e-1", () => {})();
  await waitFor(() => sent.length === 3, "e-1's second announcement");
  assert.deepEqual(sent[2], { channel: "orbit_wait", payload: "e-1" });
  // Alone, nobody else could end it: nothing is sent.
  n.alone = true;
  advance(WAIT_ANNOUNCE_MS);
  n.onDone("e-3", () => {})();
  n.alone = false;
  n.onDone("e-4", () => {})();
  await waitFor(() => sent.length >= 4, "e-4's announcement");
  assert.deepEqual(
    sent.slice(3),
    [{ channel: "orbit_wait", payload: "e-4" }],
    "e-3's was not sent",
  );
});

Deno.test("notify: an end is announced for executions waited for elsewhere, while remembered", () => {
  const { n, advance } = fakeNotifier();
  assert.deepEqual(n.waitedElsewhere(["e-1", "e-2"]), [], "nobody waits");
  n.waited("e-1");
  n.waited("e-2");
  assert.deepEqual(n.waitedElsewhere(["e-1", "e-3"]), ["e-1"]);
  assert.deepEqual(n.waitedElsewhere(["e-1"]), [], "announced once");
  advance(WAIT_MEMORY_MS + 1);
  assert.deepEqual(n.waitedElsewhere(["e-2"]), [], "forgotten: the wait re-announces itself");
  n.waited("e-2");
  advance(WAIT_MEMORY_MS);
  assert.deepEqual(n.waitedElsewhere(["e-2"]), ["e-2"], "a re-announced wait is remembered anew");
});

Deno.test("notify: rows for this node's own workers are announced once per SERVED_ANNOUNCE_MS", async () => {
  const { n, sent, advance } = fakeNotifier();
  const tasks = () => sent.filter((x) => x.channel === "orbit_tasks");
  n.announceServed("node-1");
  await waitFor(() => tasks().length === 1, "the first announcement");
  // Three more commits queue rows within the interval: one announcement at its end, for all.
  const held = performance.now();
  advance(10);
  n.announceServed("node-1");
  n.announceServed("node-1");
  advance(10);
  n.announceServed("node-1");
  await waitFor(() => tasks().length === 2, "the held-back announcement");
  assert.ok(
    performance.now() - held >= SERVED_ANNOUNCE_MS - 20 - 5,
    "sent when the interval ended, not before",
  );
  // Past the interval, the next one goes at once; open rows are never held back.
  advance(SERVED_ANNOUNCE_MS);
  n.announceServed("node-1");
  n.notify([{ channel: "orbit_tasks", payload: "node-1 open" }]);
  await waitFor(() => tasks().length === 4, "the next announcements");
  assert.deepEqual(tasks().map((x) => x.payload), ["node-1", "node-1", "node-1", "node-1 open"]);
  // A node that stops drops what it held back (the test's timer sanitizer checks none is left).
  n.announceServed("node-1");
  n.stop();
  n.notify([{ channel: "orbit_tasks", payload: "" }]);
  await waitFor(() => tasks().length === 5, "the put-back rows' announcement");
  assert.equal(tasks()[4]!.payload, "", "the held-back announcement was dropped");
});
