/**
 * "Why is it waiting?" (`GET /v1/executions/{id}/pending`, `orbit executions pending`, the
 * pending block of `orbit executions show`) against a real server process: a task with no
 * worker, a worker with a free slot, all slots busy, an attempt held by a silent worker, the
 * same attempt after the session expired (naming the last worker), a retry backoff, a signal
 * wait with its timeout, a sleep, a running child, and a child start held back by
 * --max-active-executions; and, in process, an execution another runtime runs (replayed from
 * history). Waits are for conditions, never fixed sleeps.
 */
import assert from "node:assert/strict";
import { api, MAIN, type ServerProcess, startServer, tempDir, waitFor } from "./support/server.ts";
import { registerWorker } from "./support/workers.ts";
import { pendingOf } from "../lib/executions/pending.ts";
import { Runtime } from "../lib/runtime.ts";
import { openSqliteStore } from "../lib/store/sqlite.ts";

type Api = ReturnType<typeof api>;
const TOKEN = "pending-test-token";

async function withServer(
  args: string[],
  fn: (s: ServerProcess, c: Api) => Promise<void>,
): Promise<void> {
  const dir = await tempDir();
  const s = await startServer({ db: `${dir}/orbit.db`, args: ["--token", TOKEN, ...args] });
  try {
    await fn(s, api(s.url, TOKEN));
  } finally {
    await s.kill("SIGKILL");
    await Deno.remove(dir, { recursive: true });
  }
}

async function deploy(c: Api, doc: Record<string, unknown>): Promise<void> {
  const r = await c.post("/v1/workflows", doc);
  assert.equal(r.status, 201, JSON.stringify(r.body));
}

async function start(c: Api, workflow: string, id: string, input: unknown = {}): Promise<void> {
  const r = await c.post("/v1/executions", { workflow, input, execution_id: id });
  assert.equal(r.status, 201, JSON.stringify(r.body));
}

// deno-lint-ignore no-explicit-any
type Item = Record<string, any>;

async function pending(c: Api, id: string): Promise<Item[]> {
  const r = await c.get(`/v1/executions/${encodeURIComponent(id)}/pending`);
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body.pending;
}

/** Waits until the execution's only pending item of `step` has `reason`; answers it. */
async function until(c: Api, id: string, step: string, reason: string): Promise<Item> {
  let last: Item[] = [];
  try {
    return await waitFor(
      async () => {
        last = await pending(c, id);
        return last.find((p) => p.step === step && p.reason === reason) ?? null;
      },
      `${id} step ${step} ${reason}`,
      20_000,
    );
  } catch (e) {
    throw new Error(`${(e as Error).message}; last answer ${JSON.stringify(last)}`);
  }
}

async function orbit(url: string, args: string[]): Promise<{ code: number; stdout: string }> {
  const r = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", MAIN, ...args, "--server", url, "--token", TOKEN],
    env: { NO_COLOR: "1" },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  return { code: r.code, stdout: new TextDecoder().decode(r.stdout) };
}

const wf = (name: string, steps: unknown[], extra: Record<string, unknown> = {}) => ({
  ir: "orbit-ir/2",
  name,
  version: "1.0.0",
  steps,
  ...extra,
});

Deno.test("pending: a queued task names the missing worker, then free slots, busy slots, a silent worker, the last worker after expiry, and a retry backoff", async () => {
  await withServer(["--session-timeout", "2"], async (s, c) => {
    await deploy(
      c,
      wf("Pend", [{
        id: "work",
        task: "pend.work",
        contract: "1",
        language: "typescript",
        retry: { max_attempts: 3, initial_ms: 600_000 },
      }, { id: "done", return: "{% $steps.work %}" }]),
    );
    await start(c, "Pend", "p1");
    const none = await until(c, "p1", "work", "QUEUED_NO_WORKER");
    assert.equal(none.kind, "task");
    assert.equal(none.task, "pend.work");
    assert.equal(none.sessions, 0);
    assert.equal(none.last_worker, null);
    assert.equal(typeof none.since_ms, "number");
    assert.match(
      none.message,
      /no worker serves task pend\.work contract 1 \(language typescript\); no worker has served it/,
    );

    // The CLI prints it, on its own and in `show`.
    const cli = await orbit(s.url, ["executions", "pending", "p1"]);
    assert.equal(cli.code, 0, cli.stdout);
    assert.match(cli.stdout, /^STEP\s+REASON\s+SINCE\s+DETAIL$/m);
    assert.match(
      cli.stdout,
      /work\s+QUEUED_NO_WORKER\s+\S+Z\s+queued: no worker serves task pend\.work/,
    );
    const show = await orbit(s.url, ["executions", "show", "p1"]);
    assert.equal(show.code, 0);
    assert.match(
      show.stdout,
      /^status +running$[\s\S]*^pending +work: QUEUED_NO_WORKER: queued: no worker serves task pend\.work/m,
    );
    // The pending line's value starts in the column of every other value.
    const starts = show.stdout.trim().split("\n").map((l) => l.search(/ {2}\S/));
    assert.equal(new Set(starts).size, 1, show.stdout);
    const json = await orbit(s.url, ["executions", "pending", "p1", "--json"]);
    assert.equal(JSON.parse(json.stdout).pending[0].reason, "QUEUED_NO_WORKER");

    // A worker in another language does not serve it; one in TypeScript does.
    const w = api(s.url, TOKEN);
    await registerWorker(w, {
      worker_id: "py-worker",
      runtime: "python",
      tasks: [{ name: "pend.work", contract: "1" }],
      concurrency: 4,
    });
    assert.equal((await until(c, "p1", "work", "QUEUED_NO_WORKER")).sessions, 0);
    const session = await registerWorker(w, {
      worker_id: "ts-worker",
      runtime: "typescript",
      tasks: [{ name: "pend.work", contract: "1" }],
      concurrency: 1,
    });
    const free = await until(c, "p1", "work", "QUEUED_FOR_POLL");
    assert.deepEqual([free.sessions, free.slots, free.busy_slots], [1, 1, 0]);

    // The one slot takes p1; p2 waits for it.
    const polled = await w.post("/v1/workers/poll", { session_id: session, wait_s: 0 });
    assert.equal(polled.body.tasks.length, 1);
    assert.equal(polled.body.tasks[0].execution_id, "p1");
    await start(c, "Pend", "p2");
    const busy = await until(c, "p2", "work", "QUEUED_SLOTS_BUSY");
    assert.deepEqual([busy.sessions, busy.slots, busy.busy_slots, busy.queue_depth], [1, 1, 1, 1]);
    assert.match(busy.message, /all 1 slot\(s\) are busy; 1 attempt\(s\) queued/);

    const held = await until(c, "p1", "work", "DISPATCHED");
    assert.equal(held.worker_id, "ts-worker");
    assert.equal(held.session_id, session);
    assert.equal(held.redeliver_at_ms, held.last_contact_ms + 2000);

    // No contact for more than half the session timeout: silent, with the redelivery time.
    const silent = await until(c, "p1", "work", "WORKER_SILENT");
    assert.ok(silent.silent_s >= 1, JSON.stringify(silent));
    assert.match(
      silent.message,
      /dispatched to worker ts-worker .*last contact \d+\.\d s ago, redelivered at \S+Z if it stays silent/,
    );

    // The session expires: the attempt is queued again, and the last worker is named.
    const lost = await until(c, "p1", "work", "QUEUED_NO_WORKER");
    assert.equal(lost.last_worker.worker_id, "ts-worker");
    assert.match(lost.message, /\(a redelivery\)/);
    assert.match(lost.message, /last served by worker ts-worker at \S+Z/);

    // A retryable failure: the backoff names the next attempt's start.
    const again = await registerWorker(w, {
      worker_id: "ts-worker-2",
      runtime: "typescript",
      tasks: [{ name: "pend.work", contract: "1" }],
      concurrency: 4,
    });
    const got = await w.post("/v1/workers/poll", {
      session_id: again,
      max_tasks: 4,
      wait_s: 5,
    });
    const t = (got.body.tasks as Item[]).find((x) => x.execution_id === "p2")!;
    assert.ok(t, JSON.stringify(got.body));
    const failed = await w.post("/v1/tasks/fail", {
      token: t.token,
      error: { code: "FLAKY", message: "try again", retryable: true },
    });
    assert.equal(failed.status, 200, JSON.stringify(failed.body));
    const backoff = await until(c, "p2", "work", "RETRY_BACKOFF");
    assert.equal(backoff.last_error.code, "FLAKY");
    assert.ok(backoff.retry_at_ms > Date.now() + 30_000, JSON.stringify(backoff));
    assert.match(backoff.message, /attempt 1 failed with FLAKY; attempt 2 starts at \S+Z/);

    // Finished and unknown executions.
    assert.equal((await c.post("/v1/executions/p2/cancel", {})).status, 200);
    const done = await c.get("/v1/executions/p2/pending");
    assert.equal(done.body.status, "cancelled");
    assert.deepEqual(done.body.pending, []);
    const doneCli = await orbit(s.url, ["executions", "pending", "p2"]);
    assert.equal(doneCli.code, 0);
    assert.equal(doneCli.stdout.trim(), "execution p2 is cancelled: nothing pending");
    const unknown = await c.get("/v1/executions/no-such/pending");
    assert.equal(unknown.status, 404);
    assert.equal(unknown.body.error.code, "UNKNOWN_EXECUTION");
    const noToken = await api(s.url).get("/v1/executions/p1/pending");
    assert.equal(noToken.status, 401);
  });
});

Deno.test("pending: a signal wait with its timeout, a sleep and a running child side by side; a signal clears its item", async () => {
  await withServer([], async (_s, c) => {
    await deploy(c, wf("Hold", [{ id: "w", wait_signal: "go" }], { signals: { go: {} } }));
    await deploy(
      c,
      wf("Waits", [{
        id: "all",
        parallel: [
          [{ id: "approval", wait_signal: "approved", timeout_s: 3600 }],
          [{ id: "nap", sleep_s: 600 }],
          [{ id: "kid", child: { workflow: "Hold" } }],
        ],
      }], { signals: { approved: {} } }),
    );
    const before = Date.now();
    await start(c, "Waits", "w1");
    const sig = await until(c, "w1", "approval", "WAITING_FOR_SIGNAL");
    assert.equal(sig.signal, "approved");
    assert.ok(sig.since_ms >= before - 1000);
    assert.ok(Math.abs(sig.timeout_at_ms - (sig.since_ms + 3_600_000)) < 2000, JSON.stringify(sig));
    assert.match(sig.message, /waiting for signal approved since \S+Z; times out at \S+Z/);
    const nap = await until(c, "w1", "nap", "SLEEPING");
    assert.ok(Math.abs(nap.until_ms - (nap.since_ms + 600_000)) < 2000, JSON.stringify(nap));
    const kid = await until(c, "w1", "kid", "CHILD_RUNNING");
    assert.equal(kid.child_execution_id, "w1.kid");
    assert.equal(kid.child_status, "running");
    // The child's own wait shows on the child.
    assert.equal((await until(c, "w1.kid", "w", "WAITING_FOR_SIGNAL")).signal, "go");
    // Containers (the parallel step) carry no item of their own.
    assert.equal((await pending(c, "w1")).length, 3);

    assert.equal((await c.post("/v1/executions/w1/signals/approved", {})).status, 200);
    await waitFor(
      async () => !(await pending(c, "w1")).some((p) => p.step === "approval"),
      "the signal wait to close",
    );
  });
});

Deno.test("pending: a child whose start --max-active-executions holds back says so", async () => {
  await withServer(["--max-active-executions", "1"], async (_s, c) => {
    await deploy(c, wf("Leaf", [{ id: "r", return: 1 }]));
    await deploy(c, wf("Parent", [{ id: "kid", child: { workflow: "Leaf" } }]));
    await start(c, "Parent", "parent-1");
    const held = await until(c, "parent-1", "kid", "CHILD_HELD");
    assert.equal(held.max_active_executions, 1);
    assert.equal(held.active_executions, 1);
    assert.match(held.message, /held back by --max-active-executions 1/);
  });
});

Deno.test("pending: an execution this server does not run is replayed from history and says so", async () => {
  const dir = await tempDir();
  const opts = { sessionTimeoutMs: 30_000, maxActiveExecutions: null };
  const store = await openSqliteStore(`${dir}/orbit.db`);
  await store.migrate();
  const runner = new Runtime(store, opts);
  const other = new Runtime(await openSqliteStore(`${dir}/orbit.db`), opts);
  try {
    await runner.definitions.deploy(wf("Far", [{ id: "work", task: "far.work", contract: "1" }]));
    await runner.executions.start({ workflow: "Far", execution_id: "far-1" });
    const here = await pendingOf(runner).of("far-1");
    assert.equal(here.source, "memory");
    assert.equal(here.pending[0]?.reason, "QUEUED_NO_WORKER");
    // Another runtime on the same database never loaded it: it replays the history.
    const there = await pendingOf(other).of("far-1");
    assert.equal(there.source, "history");
    assert.equal(there.status, "running");
    assert.deepEqual(there.pending.map((p) => [p.step, p.reason]), [["work", "QUEUED_NO_WORKER"]]);
    assert.match(there.pending[0]!.message, /another server runs the execution/);
    await assert.rejects(() => pendingOf(other).of("nope"), /does not exist/);
  } finally {
    await runner.stop();
    await other.stop();
    await Deno.remove(dir, { recursive: true });
  }
});
