/**
 * The conformance scenarios: what every SDK's worker must do, each observed from outside
 * through the API, histories, server logs and (where a fault is injected) the proxy's records.
 * Language-neutral: a scenario starts the SDK's worker program with `--server` and the
 * environment of README.md, and knows nothing else about it.
 */
import assert from "node:assert/strict";
import { api, startServer, waitFor } from "../support/server.ts";
import { sharedPostgres } from "../support/pg.ts";
import { freePort } from "./fault_proxy.ts";
import {
  deploy,
  executing,
  finished,
  history,
  holdFault,
  oneStep,
  type Scenario,
  sessions,
  start,
  stepTypes,
} from "./driver.ts";

const ECHO = oneStep("Echo", "conformance.echo");

/** Register: the worker registers its tasks under its runtime, with the bearer token. */
const register: Scenario = {
  id: "register",
  title: "registers its tasks, runtime and concurrency, with ORBIT_TOKEN",
  async run(r) {
    const server = await r.server({ args: ["--token", "conformance-secret"] });
    await r.worker(server.url, {
      ORBIT_TOKEN: "conformance-secret",
      CONFORMANCE_TASKS: "conformance.echo,conformance.fail",
      CONFORMANCE_CONCURRENCY: "3",
    });
    const id = `conformance-${r.sdk.name}`;
    await server.waitForLog(
      new RegExp(`worker registered worker_id=${id} runtime=${r.sdk.runtime} tasks=2\\b`),
    );
    const list = await sessions(server.url, "conformance-secret");
    assert.equal(list.length, 1, JSON.stringify(list));
    const s = list[0]!;
    assert.equal(s.worker_id, id);
    assert.equal(s.runtime, r.sdk.runtime);
    assert.equal(s.concurrency, 3);
    assert.deepEqual(
      (s.tasks as Array<{ name: string; contract: string }>)
        .map((t) => `${t.name}@${t.contract}`).sort(),
      ["conformance.echo@1", "conformance.fail@1"],
    );
  },
};

/**
 * Poll and complete: a three-step workflow completes; every poll asks for one task, and every
 * result report asks for the slot's next task (`session_id`, `max_tasks: 1`).
 */
const complete: Scenario = {
  id: "complete",
  title: "polls one task per slot, completes it, asks for the next in the result",
  async run(r) {
    const server = await r.server();
    const proxy = r.proxy(server.url);
    const w = await r.worker(proxy.url);
    await deploy(server.url, {
      ir: "orbit-ir/1",
      name: "Three",
      version: "1.0.0",
      steps: [
        { id: "a", task: "conformance.echo", contract: "1", input: "{% $input %}" },
        { id: "b", task: "conformance.echo", contract: "1", input: "{% $steps.a %}" },
        { id: "c", task: "conformance.echo", contract: "1", input: "{% $steps.b %}" },
        { id: "done", return: "{% $steps.c %}" },
      ],
    });
    await start(server.url, "Three", "c-1", { value: { n: 42, s: "ünï" } });
    const x = await finished(server.url, "c-1");
    assert.equal(x.status, "completed", JSON.stringify(x));
    assert.equal(x.output.runtime, r.sdk.runtime);
    assert.equal(x.output.attempt, 1);
    assert.equal(x.output.redelivery, false);
    const events = await history(server.url, "c-1");
    for (const step of ["a", "b", "c"]) {
      assert.deepEqual(stepTypes(events, step), [
        "StepScheduled",
        "StepDispatched",
        "StepSucceeded",
      ]);
    }
    const key = events.find((e) => e.type === "StepScheduled" && e.step === "c")!.idempotency_key;
    assert.equal(x.output.idempotency_key, key);
    assert.equal(executing(w, "c-1").length, 3);
    const polls = proxy.records.filter((p) => p.path === "/v1/workers/poll");
    assert.ok(polls.length >= 1);
    for (const p of polls) assert.equal(p.request?.max_tasks, 1, JSON.stringify(p.request));
    const reports = proxy.records.filter((p) => p.path === "/v1/tasks/complete");
    assert.equal(reports.length, 3);
    for (const p of reports) {
      assert.equal(p.request?.max_tasks, 1, JSON.stringify(p.request));
      assert.equal(typeof p.request?.session_id, "string", JSON.stringify(p.request));
    }
  },
};

/** A retryable failure is retried by the step's policy; its code and details are kept. */
const failRetryable: Scenario = {
  id: "fail-retryable",
  title: "a retryable failure (code, details) is retried until it succeeds",
  async run(r) {
    const server = await r.server();
    await r.worker(server.url);
    await deploy(
      server.url,
      oneStep("Flaky", "conformance.fail", {
        retry: { max_attempts: 5, initial_ms: 50, backoff: 1 },
      }),
    );
    await start(server.url, "Flaky", "fr-1", {
      code: "FLAKY",
      message: "try again",
      retryable: true,
      succeed_on_attempt: 3,
    });
    const x = await finished(server.url, "fr-1");
    assert.equal(x.status, "completed", JSON.stringify(x));
    assert.deepEqual(x.output, { attempt: 3 });
    const events = await history(server.url, "fr-1");
    const failed = events.filter((e) => e.type === "StepFailed");
    assert.deepEqual(failed.map((e) => e.attempt), [1, 2]);
    for (const f of failed) {
      assert.equal(f.error.code, "FLAKY");
      assert.equal(f.error.message, "try again");
      assert.equal(f.error.retryable, true);
      assert.deepEqual(f.error.details, { attempt: f.attempt });
    }
    assert.equal(events.filter((e) => e.type === "StepSucceeded").length, 1);
  },
};

/** A non-retryable failure fails the execution after one attempt. */
const failNonRetryable: Scenario = {
  id: "fail-non-retryable",
  title: "a non-retryable failure ends the step after one attempt",
  async run(r) {
    const server = await r.server();
    const w = await r.worker(server.url);
    await deploy(
      server.url,
      oneStep("Declined", "conformance.fail", { retry: { max_attempts: 5 } }),
    );
    await start(server.url, "Declined", "fn-1", {
      code: "CARD_DECLINED",
      message: "the card was declined",
      retryable: false,
    });
    const x = await finished(server.url, "fn-1");
    assert.equal(x.status, "failed", JSON.stringify(x));
    assert.equal(x.error.code, "CARD_DECLINED", JSON.stringify(x.error));
    const failed = (await history(server.url, "fn-1")).filter((e) => e.type === "StepFailed");
    assert.equal(failed.length, 1);
    assert.equal(failed[0]!.error.retryable, false);
    assert.equal(failed[0]!.will_retry, false);
    assert.equal(executing(w, "fn-1").length, 1);
  },
};

/**
 * A task that outlives its step's timeout: the step fails with STEP_TIMEOUT, the handler sees
 * its cancellation (deadline or heartbeat), and the worker goes on serving.
 */
const timeout: Scenario = {
  id: "timeout",
  title: "a task past its timeout is cancelled in the handler; the worker goes on",
  async run(r) {
    const server = await r.server();
    const w = await r.worker(server.url);
    await deploy(
      server.url,
      oneStep("Slow", "conformance.sleep", { timeout_s: 1, retry: { max_attempts: 1 } }),
    );
    await deploy(server.url, ECHO);
    await start(server.url, "Slow", "to-1", { ms: 60_000 });
    await w.waitForEvent(
      (e) => e.event === "cancelled" && e.execution_id === "to-1",
      "the timed-out attempt's cancellation",
      15_000,
    );
    const x = await finished(server.url, "to-1");
    assert.equal(x.status, "failed");
    // The runtime's deadline (STEP_TIMEOUT) or the SDK's own report of it, whichever lands first.
    assert.ok(
      ["STEP_TIMEOUT", "DEADLINE_EXCEEDED"].includes(x.error.code),
      JSON.stringify(x.error),
    );
    await start(server.url, "Echo", "to-2", { value: 1 });
    assert.equal((await finished(server.url, "to-2")).status, "completed");
  },
};

/** Cancelling the execution reaches the running handler through the heartbeat's cancel list. */
const heartbeatCancel: Scenario = {
  id: "heartbeat-cancel",
  title: "a cancellation from a heartbeat reaches the running handler",
  async run(r) {
    const server = await r.server();
    const w = await r.worker(server.url);
    await deploy(server.url, oneStep("Hold", "conformance.hold"));
    await start(server.url, "Hold", "hc-1", {});
    await w.waitForEvent((e) => e.event === "executing" && e.execution_id === "hc-1", "executing");
    const c = await api(server.url).post("/v1/executions/hc-1/cancel", { reason: "conformance" });
    assert.equal(c.status, 200, JSON.stringify(c.body));
    await w.waitForEvent(
      (e) => e.event === "cancelled" && e.execution_id === "hc-1",
      "the handler to see the cancellation",
      15_000,
    );
    assert.equal((await finished(server.url, "hc-1")).status, "cancelled");
  },
};

/** 404 UNKNOWN_SESSION (the session was dropped): the worker registers again and goes on. */
const unknownSession: Scenario = {
  id: "unknown-session",
  title: "404 UNKNOWN_SESSION: registers again and goes on",
  async run(r) {
    const server = await r.server();
    await r.worker(server.url);
    const [first] = await sessions(server.url);
    const un = await api(server.url).post("/v1/workers/unregister", {
      session_id: first!.session_id,
    });
    assert.equal(un.status, 200, JSON.stringify(un.body));
    const again = await waitFor(async () => {
      const list = await sessions(server.url);
      return list.find((s) => s.session_id !== first!.session_id);
    }, "a new session");
    assert.equal(again.worker_id, first!.worker_id);
    const registered = () =>
      server.logs.filter((l) =>
        l.includes(`worker registered worker_id=conformance-${r.sdk.name} `)
      );
    await waitFor(() => registered().length >= 2, "the second registration's log line");
    await deploy(server.url, ECHO);
    await start(server.url, "Echo", "us-1", { value: "after" });
    assert.equal((await finished(server.url, "us-1")).status, "completed");
    assert.equal(registered().length, 2, registered().join("\n"));
  },
};

/**
 * 5xx answers (503 NOT_LEADER, 500, a 502 that is not JSON) and a refused connection are
 * retried with growing, jittered delays; the worker never gives up.
 */
const backoff: Scenario = {
  id: "backoff",
  title: "503 NOT_LEADER, other 5xx and connection refused are retried with backoff",
  async run(r) {
    const server = await r.server();
    await deploy(server.url, ECHO);
    const proxy = r.proxy(server.url, "5xx", freePort());
    const w = await r.worker(proxy.url, { CONFORMANCE_CONCURRENCY: "1" }, { ready: false });
    const registers = () => proxy.records.filter((p) => p.path === "/v1/workers/register");
    await proxy.waitFor("four refused registrations", () => registers().length >= 4, 20_000);
    const at = registers().slice(0, 4).map((p) => p.at);
    const gaps = at.slice(1).map((t, i) => t - at[i]!);
    assert.ok(gaps[0]! >= 50, `retried without a pause: ${gaps}`);
    assert.ok(gaps[2]! > gaps[0]! * 1.5, `the delays do not grow: ${gaps}`);
    assert.equal(w.exitCode(), null, "the worker gave up");
    proxy.mode = "pass";
    await w.waitForEvent((e) => e.event === "ready", "ready once the 5xx end", 20_000);
    await start(server.url, "Echo", "bo-1", { value: 1 });
    assert.equal((await finished(server.url, "bo-1")).status, "completed");

    // Connection refused: nothing listens while an execution waits; then it is served.
    await proxy.close();
    await start(server.url, "Echo", "bo-2", { value: 2 });
    await holdFault(1_500);
    assert.equal(w.exitCode(), null, "the worker gave up while the server was unreachable");
    proxy.reopen();
    const x = await finished(server.url, "bo-2", 30);
    assert.equal(x.status, "completed");
    assert.equal(
      (await sessions(server.url)).length,
      1,
      "the session outlived the outage: no second one",
    );
  },
};

/**
 * A worker killed mid-task: after the session timeout the attempt is redelivered to another
 * worker with the same idempotency key and `redelivery: true`.
 */
const redelivery: Scenario = {
  id: "redelivery",
  title: "redelivery after a worker dies: same idempotency key, redelivery: true",
  async run(r) {
    const server = await r.server({ args: ["--session-timeout", "2"] });
    const a = await r.worker(server.url, { CONFORMANCE_CONCURRENCY: "1" });
    await deploy(server.url, oneStep("Hold", "conformance.hold"));
    await start(server.url, "Hold", "rd-1", {});
    const first = await a.waitForEvent(
      (e) => e.event === "executing" && e.execution_id === "rd-1",
      "the first attempt",
    );
    await a.kill("SIGKILL");
    const b = await r.worker(server.url, { CONFORMANCE_CONCURRENCY: "1" });
    const again = await b.waitForEvent(
      (e) => e.event === "executing" && e.execution_id === "rd-1",
      "the redelivery",
      20_000,
    );
    assert.equal(again.redelivery, true);
    assert.equal(again.idempotency_key, first.idempotency_key);
    assert.equal(again.redelivery, true);
    const x = await finished(server.url, "rd-1");
    assert.equal(x.status, "completed");
    assert.deepEqual(x.output, { redelivered: true });
    const types = stepTypes(await history(server.url, "rd-1"));
    assert.ok(types.includes("StepAttemptUncertain"), types.join(","));
    assert.equal(types.filter((t) => t === "StepSucceeded").length, 1);
  },
};

/**
 * A second result for a step: a paused worker (SIGSTOP) loses its attempt to another worker,
 * then resumes and reports; the runtime answers `{"accepted": false}`, and the worker goes on
 * (it registers again and serves the next task).
 */
const secondResult: Scenario = {
  id: "second-result",
  title: `a second result is answered {"accepted": false}; the worker goes on`,
  async run(r) {
    const server = await r.server({ args: ["--session-timeout", "2"] });
    const proxy = r.proxy(server.url);
    const a = await r.worker(proxy.url, {
      CONFORMANCE_CONCURRENCY: "1",
      CONFORMANCE_WORKER_ID: "a",
    });
    await deploy(server.url, oneStep("Sleep", "conformance.sleep"));
    await start(server.url, "Sleep", "sr-1", { ms: 1_500 });
    const first = await a.waitForEvent(
      (e) => e.event === "executing" && e.execution_id === "sr-1",
      "the first attempt",
    );
    a.signal("SIGSTOP");
    const b = await r.worker(server.url, {
      CONFORMANCE_CONCURRENCY: "1",
      CONFORMANCE_WORKER_ID: "b",
    });
    await b.waitForEvent(
      (e) => e.event === "executing" && e.execution_id === "sr-1" && e.redelivery === true,
      "the redelivery to the other worker",
      20_000,
    );
    assert.equal((await finished(server.url, "sr-1")).status, "completed");
    a.signal("SIGCONT");
    await proxy.waitFor(
      "the paused worker's late result",
      () =>
        proxy.records.some((p) =>
          p.path.startsWith("/v1/tasks/") && p.request?.token === first.token && p.done
        ),
      20_000,
    );
    const late = proxy.records.find((p) =>
      p.path.startsWith("/v1/tasks/") && p.request?.token === first.token
    )!;
    assert.equal(late.status, 200);
    assert.equal(late.response?.accepted, false, JSON.stringify(late.response));
    const events = await history(server.url, "sr-1");
    assert.equal(stepTypes(events).filter((t) => t === "StepSucceeded").length, 1);

    // The worker goes on: with the other one gone, it serves the next task.
    assert.equal((await b.kill("SIGTERM")).code, 0);
    await start(server.url, "Sleep", "sr-2", { ms: 1 });
    assert.equal((await finished(server.url, "sr-2")).status, "completed");
    assert.equal(executing(a, "sr-2").length, 1, "the resumed worker did not serve sr-2");
  },
};

/**
 * SIGTERM mid-task: the worker stops polling, finishes the running task and reports it,
 * unregisters, and exits 0. A task queued after the signal is not taken.
 */
const gracefulStop: Scenario = {
  id: "graceful-stop",
  title: "SIGTERM mid-task: finishes and reports it, takes no new task, unregisters",
  async run(r) {
    const server = await r.server();
    const proxy = r.proxy(server.url);
    const w = await r.worker(proxy.url, { CONFORMANCE_CONCURRENCY: "2" });
    await deploy(server.url, oneStep("Sleep", "conformance.sleep"));
    await start(server.url, "Sleep", "gs-1", { ms: 1_500 });
    await w.waitForEvent((e) => e.event === "executing" && e.execution_id === "gs-1", "gs-1");
    w.signal("SIGTERM");
    await proxy.waitFor(
      "the free slot to end its poll",
      () => proxy.open("/v1/workers/poll") === 0,
    );
    await start(server.url, "Sleep", "gs-2", { ms: 1 });
    const status = await w.status;
    assert.equal(status.code, 0, `exit code ${status.code}`);
    assert.ok(w.events.some((e) => e.event === "stopped"), "no stopped event");
    const x = await finished(server.url, "gs-1");
    assert.equal(x.status, "completed");
    assert.deepEqual(stepTypes(await history(server.url, "gs-1")), [
      "StepScheduled",
      "StepDispatched",
      "StepSucceeded",
    ]);
    assert.equal(executing(w, "gs-2").length, 0, "took a task after SIGTERM");
    assert.deepEqual(stepTypes(await history(server.url, "gs-2")), ["StepScheduled"]);
    assert.deepEqual(await sessions(server.url), [], "still registered after stopping");
  },
};

/**
 * The server is killed (SIGKILL) while the worker runs a task and started again on the same
 * database and port: the worker retries through the outage, registers again after 404
 * UNKNOWN_SESSION, and its late result is accepted (one dispatch, one success, no redelivery).
 */
const serverRestart: Scenario = {
  id: "server-restart",
  title: "a result delivered after the server restarted is accepted",
  async run(r) {
    const first = await r.server({ args: ["--session-timeout", "10"] });
    const addr = new URL(first.url).host;
    const db = `${await r.dir()}/orbit-0.db`;
    const w = await r.worker(first.url);
    await deploy(first.url, oneStep("Sleep", "conformance.sleep"));
    await start(first.url, "Sleep", "rs-1", { ms: 2_000 });
    await w.waitForEvent((e) => e.event === "executing" && e.execution_id === "rs-1", "rs-1");
    await first.kill("SIGKILL");
    const second = await r.server({ db, addr, args: ["--session-timeout", "10"] });
    const x = await finished(second.url, "rs-1", 30);
    assert.equal(x.status, "completed", JSON.stringify(x));
    assert.deepEqual(stepTypes(await history(second.url, "rs-1")), [
      "StepScheduled",
      "StepDispatched",
      "StepSucceeded",
    ]);
    assert.equal(executing(w, "rs-1").length, 1);
    await second.waitForLog(
      new RegExp(`worker registered worker_id=conformance-${r.sdk.name} `),
      20_000,
    );
    await start(second.url, "Sleep", "rs-2", { ms: 1 });
    assert.equal((await finished(second.url, "rs-2")).status, "completed");
  },
};

/**
 * Shared mode: two servers behind a round-robin proxy; the worker's requests land on both,
 * with one session, and every execution completes exactly once per step.
 */
const sharedProxy: Scenario = {
  id: "shared-proxy",
  title: "behind a round-robin proxy over two shared-mode servers",
  postgres: true,
  async run(r) {
    const db = await (await sharedPostgres()).createDatabase();
    const nodes = [await r.sharedServer(db, "node-1"), await r.sharedServer(db, "node-2")];
    const lb = await r.balancer(nodes);
    await deploy(lb.url, {
      ir: "orbit-ir/1",
      name: "Two",
      version: "1.0.0",
      steps: [
        { id: "a", task: "conformance.echo", contract: "1", input: "{% $input %}" },
        { id: "b", task: "conformance.echo", contract: "1", input: "{% $steps.a %}" },
        { id: "done", return: "{% $steps.b %}" },
      ],
    });
    const w = await r.worker(lb.workerUrl, { CONFORMANCE_CONCURRENCY: "2" });
    const ids = Array.from({ length: 6 }, (_, i) => `sh-${i}`);
    for (const id of ids) await start(lb.url, "Two", id, { value: id });
    for (const id of ids) {
      const x = await finished(lb.url, id, 60);
      assert.equal(x.status, "completed", JSON.stringify(x));
      assert.equal(x.output.value, id);
      const events = await history(lb.url, id);
      for (const step of ["a", "b"]) {
        assert.equal(stepTypes(events, step).filter((t) => t === "StepSucceeded").length, 1);
      }
    }
    assert.equal(w.events.filter((e) => e.event === "executing").length, 12);
    const registered = nodes.flatMap((n) =>
      n.logs.filter((l) => l.includes(`worker registered worker_id=conformance-${r.sdk.name} `))
    );
    assert.equal(registered.length, 1, `registered more than once:\n${registered.join("\n")}`);
  },
};

/** Every scenario, in the order the results table lists them. */
export const SCENARIOS: Scenario[] = [
  register,
  complete,
  failRetryable,
  failNonRetryable,
  timeout,
  heartbeatCancel,
  unknownSession,
  backoff,
  redelivery,
  secondResult,
  gracefulStop,
  serverRestart,
  sharedProxy,
];

// startServer is re-exported for scenarios added later that need a server of their own.
export { startServer };
