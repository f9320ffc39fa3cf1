/**
 * A Java SDK worker in a shared cluster spreads its slots over the live servers
 * (`spreadOverNodes`, sdk/java/src/main/java/dev/orbit/sdk/Nodes.java): two real shared servers
 * on one real PostgreSQL, the worker (a real `java` process, sdk/java/examples/spread) given the
 * first server's address only. Its slots poll both servers at the addresses `/v1/health`
 * advertises, each server hands out the tasks of the executions it owns, and no result is
 * forwarded between them. When a server dies, its slots move to the configured address at once
 * and the work goes on; a server whose advertised address does not answer is left out; a result
 * held by a paused server reaches the other one once the paused one leaves the live list. The
 * TypeScript and Python workers do the same (tests/cluster_shared_spread_test.ts). Skipped,
 * loudly, where the JDK or Gson is not installed; CI installs them.
 */
import assert from "node:assert/strict";
import { api, waitFor } from "./support/server.ts";
import { JAVA_FLAGS, javaBuild, MissingToolchain } from "./conformance/sdks.ts";
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

let build: { dir: string; classpath: string } | null = null;
try {
  build = await javaBuild();
} catch (err) {
  if (!(err instanceof MissingToolchain)) throw err;
  console.warn(
    `\n${"!".repeat(78)}\n!!! SKIPPING the Java spread test: ${err.message}\n${"!".repeat(78)}\n`,
  );
}

/**
 * The Java worker (sdk/java/examples/spread) on `server`, `args` after it (concurrency, request
 * timeout in seconds); `out()` is what it wrote so far, `ran()` its `ran …` lines, `say` writes a
 * line on its standard input, `kill` ends it (SIGKILL, by its PID).
 */
function javaWorker(server: string, args: string[] = []) {
  const child = new Deno.Command("java", {
    args: [
      ...JAVA_FLAGS,
      "-cp",
      build!.classpath,
      "dev.orbit.examples.spread.SpreadWorker",
      server,
      ...args,
    ],
    stdin: "piped",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  let out = "";
  const pump = (async () => {
    for await (const chunk of child.stdout.pipeThrough(new TextDecoderStream())) out += chunk;
  })();
  const stdin = child.stdin.getWriter();
  return {
    out: () => out,
    ran: () => out.split("\n").filter((l) => l.startsWith("ran ")),
    say: (line: string) => stdin.write(new TextEncoder().encode(`${line}\n`)),
    kill: async () => {
      try {
        Deno.kill(child.pid, "SIGKILL");
      } catch { /* gone */ }
      await child.status;
      await stdin.close().catch(() => {});
      await pump;
    },
  };
}

/** Waits until `w` wrote `n` `ran …` lines (each is written before its result is reported). */
async function ranLines(w: ReturnType<typeof javaWorker>, n: number): Promise<string[]> {
  await waitFor(() => w.ran().length >= n, `${n} task runs on stdout`, 10_000).catch(() => {});
  assert.equal(w.ran().length, n, w.out());
  return w.ran();
}

Deno.test({
  ...T,
  name: "shared: a Java worker given one server's address polls every live server, and " +
    "each server's results stay on it",
  ignore: build === null,
  fn: () =>
    withTwo(TWO_STEPS, async (one, two) => {
      const w = javaWorker(one.url);
      try {
        await waitFor(
          () => /slots spread over 2 node\(s\)/.test(w.out()),
          "the spread line",
          60_000,
        );
        assert.ok(
          w.out().includes(`slots spread over 2 node(s): ${[one.url, two.url].sort().join(", ")}`),
          w.out(),
        );
        await waitForPolls([one, two]);
        for (let i = 0; i < 10; i++) await runOne(i % 2 ? two.url : one.url, `java-spread-${i}`);
        await ranLines(w, 20);
        await assertPolledAndNothingForwarded([one, two]);
      } catch (e) {
        console.error(`the Java worker's output:\n${w.out()}`);
        throw e;
      } finally {
        await w.kill();
      }
    }),
});

Deno.test({
  ...T,
  name: "shared: a Java worker's slots on a killed server move at once, and the work goes on",
  ignore: build === null,
  fn: () =>
    withTwo(TWO_STEPS, async (one, two) => {
      const w = javaWorker(one.url);
      try {
        await waitFor(
          () => /slots spread over 2 node\(s\)/.test(w.out()),
          "the spread line",
          60_000,
        );
        for (let i = 0; i < 6; i++) await runOne(i % 2 ? two.url : one.url, `java-kill-${i}`);
        await ranLines(w, 12);
        // The second server dies: its slots move to the configured address at once, and the
        // live list loses it once its heartbeat is older than the node timeout.
        await two.kill(); // SIGKILL
        for (let i = 6; i < 10; i++) await runOne(one.url, `java-kill-${i}`);
        await waitFor(
          () => w.out().includes(`slots spread over 1 node(s): ${one.url}`),
          "the worker to read one live node",
          20_000,
        );
        for (let i = 10; i < 14; i++) await runOne(one.url, `java-kill-${i}`);
        const ran = await ranLines(w, 28);
        assert.equal(new Set(ran).size, 28, `an attempt ran twice:\n${w.out()}`);
      } catch (e) {
        console.error(`the Java worker's output:\n${w.out()}`);
        throw e;
      } finally {
        await w.kill();
      }
    }),
});

Deno.test({
  ...T,
  name: "shared: a server whose advertised address does not answer is left out by a Java " +
    "worker; its executions' tasks still run",
  ignore: build === null,
  fn: () =>
    withDeadSecond(TWO_STEPS, async (one, two, dead) => {
      const w = javaWorker(one.url);
      try {
        await waitFor(
          () =>
            w.out().includes(`slots spread over 2 node(s): ${[one.url, dead].sort().join(", ")}`),
          "the spread line",
          60_000,
        );
        for (let i = 0; i < 6; i++) await runOne(i % 2 ? two.url : one.url, `java-dead-${i}`);
        await ranLines(w, 12);
        assert.ok(
          w.out().includes(
            `WARN orbit node ${dead} did not answer (connection refused`,
          ) && w.out().includes(`its slots use ${one.url} for 10 s`),
          w.out(),
        );
      } catch (e) {
        console.error(`the Java worker's output:\n${w.out()}`);
        throw e;
      } finally {
        await w.kill();
      }
    }),
});

Deno.test({
  ...T,
  name: "shared: a Java worker's result held by a paused server goes to the given address once " +
    "that server leaves the live list, before its attempt is redelivered",
  ignore: build === null,
  fn: () =>
    withTwo(SLOW, async (one, two) => {
      // One slot per server (node-2's own slot takes the task of the execution it owns); a
      // request timeout far past the takeover and the redelivery that follows: only the cut
      // ends the held delivery.
      const w = javaWorker(one.url, ["2", "60"]);
      try {
        await waitFor(
          () => /slots spread over 2 node\(s\)/.test(w.out()),
          "the spread line",
          60_000,
        );
        await start(two.url, "SpreadSlow", "java-held-1");
        await waitFor(() => w.ran().length === 1, "the slow task to start", 30_000);
        // node-2 stops answering with the result on its way to it.
        two.pause();
        const paused = Date.now();
        await w.say("finish");
        const r = await api(one.url).get("/v1/executions/java-held-1/wait?timeout_s=30");
        assert.equal(r.body.status, "completed", JSON.stringify(r.body));
        const took = Date.now() - paused;
        assert.ok(took < 15_000, `completed ${took} ms after the pause`);
        assert.equal(w.ran().length, 1, `the attempt ran again:\n${w.out()}`);
        const h = await api(one.url).get("/v1/executions/java-held-1/history");
        const types = (h.body.events as { type: string }[]).map((e) => e.type);
        assert.equal(types.includes("StepAttemptUncertain"), false, types.join(", "));
      } catch (e) {
        console.error(`the Java worker's output:\n${w.out()}`);
        throw e;
      } finally {
        two.resume();
        await w.kill();
      }
    }),
});
