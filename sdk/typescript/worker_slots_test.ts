/**
 * Every concurrency slot of the worker polls and reports on an HTTP connection of its own:
 * against a small keep-alive server (the fake of ./testing closes every connection, so it
 * cannot tell connections apart), the held polls come from as many client ports as there are
 * slots, and a task's poll, its result and the result of the next step that answer carried all
 * travel on one connection. Behind a balancer that spreads connections over the servers of a
 * shared-mode cluster, that is what keeps an execution's steps on the server that owns it.
 */
import assert from "node:assert/strict";
import { defineTask, type PolledTask, Worker } from "./mod.ts";
import { recordingLogger } from "./testing/helpers.ts";

interface Seen {
  path: string;
  port: number;
  body: Record<string, unknown>;
}

function task(step: string): PolledTask {
  return {
    token: `ex-1/${step}`,
    execution_id: "ex-1",
    step,
    attempt: 1,
    task: "test.step",
    contract: "1",
    input: { step },
    idempotency_key: `ex-1/${step}/1`,
    redelivery: false,
  };
}

/** register, poll (held until a task is queued), complete (answering `next[token]`), heartbeat. */
function miniServer() {
  const seen: Seen[] = [];
  const queue: PolledTask[] = [];
  const next = new Map<string, PolledTask>();
  const waiting = new Set<() => void>();
  const held = new Map<number, number>(); // port → polls held
  const changed = () => {
    for (const w of [...waiting]) w();
  };
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    async (req, info) => {
      const path = new URL(req.url).pathname;
      const body = (await req.json().catch(() => ({}))) as Record<string, unknown>;
      const port = info.remoteAddr.port;
      seen.push({ path, port, body });
      const json = (v: unknown) => Response.json(v);
      if (path === "/v1/workers/register") return json({ session_id: "s-1" });
      if (path === "/v1/workers/heartbeat") return json({ cancel: [] });
      if (path === "/v1/workers/unregister") return json({});
      if (path === "/v1/tasks/complete") {
        const after = body.session_id ? next.get(String(body.token)) : undefined;
        return json({ accepted: true, tasks: after ? [after] : [] });
      }
      if (path === "/v1/workers/poll") {
        held.set(port, (held.get(port) ?? 0) + 1);
        changed();
        try {
          for (;;) {
            const t = queue.shift();
            if (t) return json({ tasks: [t] });
            if (req.signal.aborted) return json({ tasks: [] });
            await new Promise<void>((resolve) => {
              const wake = () => {
                waiting.delete(wake);
                req.signal.removeEventListener("abort", wake);
                resolve();
              };
              waiting.add(wake);
              req.signal.addEventListener("abort", wake);
            });
          }
        } finally {
          held.set(port, held.get(port)! - 1);
          changed();
        }
      }
      return new Response("not found", { status: 404 });
    },
  );
  const waitFor = async (cond: () => boolean, what: string, ms = 5000) => {
    const deadline = Date.now() + ms;
    while (!cond()) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
      await new Promise<void>((resolve) => {
        const t = setTimeout(done, 50);
        function done() {
          clearTimeout(t);
          waiting.delete(done);
          resolve();
        }
        waiting.add(done);
      });
    }
  };
  return {
    url: `http://127.0.0.1:${server.addr.port}`,
    seen,
    next,
    held,
    enqueue(t: PolledTask) {
      queue.push(t);
      changed();
    },
    waitFor,
    changed,
    close: () => server.shutdown(),
  };
}

Deno.test("each slot holds its poll on a connection of its own, and reports on it", async () => {
  const mini = miniServer();
  const results: string[] = [];
  const step = defineTask({
    name: "test.step",
    contract: "1",
    handler: (input: { step: string }) => {
      results.push(input.step);
      mini.changed();
      return { done: input.step };
    },
  });
  const worker = new Worker({
    server: mini.url,
    workerId: "slots",
    tasks: [step],
    concurrency: 3,
    pollWaitS: 5,
    heartbeatMs: 60_000,
    logger: recordingLogger(),
  });
  try {
    assert.equal(worker.connectionPerSlot, true);
    await worker.start();
    const heldPorts = () => [...mini.held].filter(([, n]) => n > 0).map(([port]) => port);
    await mini.waitFor(() => heldPorts().length === 3, "three polls held on three connections");
    const polls = mini.seen.filter((s) => s.path === "/v1/workers/poll");
    assert.equal(polls.length, 3);
    assert.ok(polls.every((p) => p.body.max_tasks === 1));

    // "a" is polled; its result's answer carries "b", whose result's answer carries "c".
    mini.next.set("ex-1/a", task("b"));
    mini.next.set("ex-1/b", task("c"));
    mini.enqueue(task("a"));
    await mini.waitFor(() => results.length === 3, "three steps to run");
    await mini.waitFor(
      () => mini.seen.filter((s) => s.path === "/v1/tasks/complete").length === 3,
      "three results",
    );
    const completes = mini.seen.filter((s) => s.path === "/v1/tasks/complete");
    assert.deepEqual(completes.map((c) => c.body.token), ["ex-1/a", "ex-1/b", "ex-1/c"]);
    // The slot whose poll got "a": that poll answered, so its port holds no poll until the
    // chain ends; all three results went over that same connection.
    const port = completes[0]!.port;
    assert.ok(polls.some((p) => p.port === port), "a's result went on a poll's connection");
    assert.ok(completes.every((c) => c.port === port), "the chain stayed on one connection");
    assert.ok(completes.every((c) => c.body.session_id === "s-1" && c.body.max_tasks === 1));
    // b and c came in answers, not from polls: three initial polls and the slot's next one.
    await mini.waitFor(() => heldPorts().length === 3, "the slot polls again on its connection");
    assert.deepEqual(heldPorts().sort(), polls.map((p) => p.port).sort());
  } finally {
    await worker.stop();
    await mini.close();
  }
});

Deno.test("connectionPerSlot: false — slots still poll one task each, over the shared pool", async () => {
  const mini = miniServer();
  const worker = new Worker({
    server: mini.url,
    workerId: "pooled",
    tasks: [defineTask({ name: "test.step", contract: "1", handler: () => null })],
    concurrency: 2,
    pollWaitS: 5,
    heartbeatMs: 60_000,
    logger: recordingLogger(),
    connectionPerSlot: false,
  });
  try {
    assert.equal(worker.connectionPerSlot, false);
    await worker.start();
    await mini.waitFor(
      () => [...mini.held.values()].reduce((a, b) => a + b, 0) === 2,
      "two polls held",
    );
  } finally {
    await worker.stop();
    await mini.close();
  }
});
