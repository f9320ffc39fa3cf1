/**
 * A TypeScript SDK worker in a shared cluster spreads its slots over the live servers
 * (`spreadOverNodes`, sdk/typescript/worker/nodes.ts): two real shared servers on one real
 * PostgreSQL, the worker configured with the first server's address only. Its slots poll both
 * servers at the addresses `/v1/health` advertises, each server hands out the tasks of the
 * executions it owns, and no result is forwarded between them. When a server dies, its slots
 * move to the configured address at once and the work goes on; a server whose advertised
 * address does not answer is left out. The Python SDK's worker (a real `python3` process) does
 * the same.
 */
import assert from "node:assert/strict";
import { api, waitFor } from "./support/server.ts";
import { defineTask, Worker } from "../sdk/typescript/mod.ts";
import { recordingLogger } from "../sdk/typescript/testing/helpers.ts";
import {
  assertPolledAndNothingForwarded,
  runOne,
  SLOW,
  start,
  TWO_STEPS,
  waitForPolls,
  withDeadSecond,
  withTwo,
} from "./support/shared_spread.ts";

const T = { sanitizeOps: false, sanitizeResources: false };

/** A worker on `server` whose task echoes its input and counts its attempts. */
function spreadWorker(server: string, seen: string[]) {
  const logger = recordingLogger();
  const worker = new Worker({
    server,
    workerId: "spread-worker",
    concurrency: 4,
    pollWaitS: 5,
    nodeRefreshMs: 200,
    heartbeatMs: 500,
    backoff: { initialMs: 50, maxMs: 500 },
    logger,
    tasks: [
      defineTask({
        name: "t.spread",
        contract: "1",
        handler: (input: unknown, ctx) => {
          seen.push(`${ctx.executionId}/${ctx.step}`);
          return input;
        },
      }),
    ],
  });
  return { worker, logger };
}

Deno.test({
  ...T,
  name: "shared: a worker given one server's address polls every live server, and each " +
    "server's results stay on it",
  fn: () =>
    withTwo(TWO_STEPS, async (one, two) => {
      const seen: string[] = [];
      const { worker, logger } = spreadWorker(one.url, seen);
      await worker.start();
      try {
        assert.deepEqual([...worker.nodeAddresses], [one.url, two.url].sort());
        assert.match(logger.text(), /slots spread over 2 node\(s\)/);
        await waitForPolls([one, two]);
        // One at a time, alternately owned by each server: every task goes to a slot polling
        // its owner, whose result comes back to it.
        for (let i = 0; i < 10; i++) await runOne(i % 2 ? two.url : one.url, `spread-${i}`);
        assert.equal(seen.length, 20);
        await assertPolledAndNothingForwarded([one, two]);

        // The second server dies: its slots move to the configured address at once, and the
        // live list loses it once its heartbeat is older than the node timeout.
        await two.kill(); // SIGKILL
        for (let i = 10; i < 14; i++) await runOne(one.url, `spread-${i}`);
        await waitFor(
          () => worker.nodeAddresses.length === 1,
          "the worker to read one live node",
          20_000,
          50,
        );
        assert.deepEqual([...worker.nodeAddresses], [one.url]);
        for (let i = 14; i < 18; i++) await runOne(one.url, `spread-${i}`);
        assert.equal(seen.length, 36);
        assert.equal(new Set(seen).size, 36, "an attempt ran twice");
      } finally {
        await worker.stop({ timeoutMs: 5_000 });
      }
    }),
});

Deno.test({
  ...T,
  name: "shared: a server whose advertised address does not answer is left out; its " +
    "executions' tasks still run",
  fn: () =>
    withDeadSecond(TWO_STEPS, async (one, two, dead) => {
      const seen: string[] = [];
      const { worker, logger } = spreadWorker(one.url, seen);
      await worker.start();
      try {
        assert.deepEqual([...worker.nodeAddresses], [one.url, dead].sort());
        for (let i = 0; i < 6; i++) await runOne(i % 2 ? two.url : one.url, `dead-${i}`);
        assert.equal(seen.length, 12);
        assert.match(logger.text(), new RegExp(`node ${dead} did not answer`));
      } finally {
        await worker.stop({ timeoutMs: 5_000 });
      }
    }),
});

Deno.test({
  ...T,
  name: "shared: a result held by a paused server goes to the given address once that server " +
    "leaves the live list, before its attempt is redelivered",
  fn: () =>
    withTwo(SLOW, async (one, two) => {
      let runs = 0;
      let started!: () => void;
      const running = new Promise<void>((r) => (started = r));
      let finish!: () => void;
      const finished = new Promise<void>((r) => (finish = r));
      const logger = recordingLogger();
      const worker = new Worker({
        server: one.url,
        workerId: "held-worker",
        // One slot per server: node-2's own slot takes the task of the execution it owns.
        concurrency: 2,
        pollWaitS: 5,
        nodeRefreshMs: 200,
        heartbeatMs: 500,
        // Far past the takeover and the redelivery that follows it: only the cut ends it.
        requestTimeoutMs: 60_000,
        backoff: { initialMs: 50, maxMs: 500 },
        logger,
        tasks: [
          defineTask({
            name: "t.slow",
            contract: "1",
            handler: async (input: unknown) => {
              runs++;
              started();
              await finished;
              return input;
            },
          }),
        ],
      });
      await worker.start();
      try {
        assert.equal(worker.nodeAddresses.length, 2);
        await start(two.url, "SpreadSlow", "held-1");
        await running;
        // node-2 stops answering with the result on its way to it.
        two.pause();
        const paused = Date.now();
        finish();
        const w = await api(one.url).get("/v1/executions/held-1/wait?timeout_s=30");
        assert.equal(w.body.status, "completed", JSON.stringify(w.body));
        const took = Date.now() - paused;
        assert.ok(took < 15_000, `completed ${took} ms after the pause`);
        assert.equal(runs, 1, "the attempt ran again");
        const h = await api(one.url).get("/v1/executions/held-1/history");
        const types = (h.body.events as { type: string }[]).map((e) => e.type);
        assert.equal(types.includes("StepAttemptUncertain"), false, types.join(", "));
      } finally {
        two.resume();
        finish();
        await worker.stop({ timeoutMs: 5_000 });
      }
    }),
});

const PYTHON_WORKER = `
import logging, sys
sys.path.insert(0, sys.argv[2])
from orbit_sdk import Worker
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s", stream=sys.stdout)
w = Worker(sys.argv[1], "spread-py", concurrency=4, poll_wait_s=5, node_refresh_s=0.2)

@w.task("t.spread", contract="1")
def spread(value, ctx):
    print("ran", ctx.execution_id, ctx.step, flush=True)
    return value

w.run()
`;

Deno.test({
  ...T,
  name: "shared: a Python worker given one server's address polls every live server, and " +
    "each server's results stay on it",
  fn: () =>
    withTwo(TWO_STEPS, async (one, two) => {
      const sdk = new URL("../sdk/python", import.meta.url).pathname;
      const child = new Deno.Command("python3", {
        args: ["-u", "-c", PYTHON_WORKER, one.url, sdk],
        env: { PYTHONDONTWRITEBYTECODE: "1" },
        stdin: "null",
        stdout: "piped",
        stderr: "inherit",
      }).spawn();
      let out = "";
      const pump = (async () => {
        for await (const chunk of child.stdout.pipeThrough(new TextDecoderStream())) out += chunk;
      })();
      try {
        await waitFor(() => /slots spread over 2 node\(s\)/.test(out), "the spread line", 20_000);
        assert.ok(
          out.includes(`slots spread over 2 node(s): ${[one.url, two.url].sort().join(", ")}`),
          out,
        );
        await waitForPolls([one, two]);
        for (let i = 0; i < 10; i++) await runOne(i % 2 ? two.url : one.url, `py-spread-${i}`);
        assert.equal(out.split("\n").filter((l) => l.startsWith("ran ")).length, 20, out);
        await assertPolledAndNothingForwarded([one, two]);
      } finally {
        try {
          child.kill("SIGKILL");
        } catch { /* gone */ }
        await child.status;
        await pump;
      }
    }),
});
